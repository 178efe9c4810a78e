"""One rank of the collective campaign; runs in a spawned process (see ``collectives.py``).

The parent sends a :class:`WorkerSpec` (plain data) and reads plain tuples back over a pipe:

* ``("ready", rank)`` once the process group is up;
* ``("start", rank, op)`` before each op, ``("result", rank, op, payload)`` after it;
* ``("error", rank, phase, text)`` when the rank raises, ``("done", rank)`` at the end.

Ranks that a launcher started (``launched.py``) run the same :func:`init_rank` and :func:`run_ops`
with an ``env://`` rendezvous and a ``send`` that gathers each op's payload to rank 0.

**Fault injection, for tests only.** ``PYTEST_NVLINK_TEST_FAULT`` holds comma-separated faults
``KIND[:rank=R][:op=OP][:step=STEP]`` with KIND one of ``hang`` (sleep forever), ``crash`` (SIGKILL
itself), ``raise`` (raise RuntimeError) or ``corrupt`` (flip one element of the op's result before
the check). ``op`` is an op name or ``init``; a fault without ``rank`` hits every rank, one without
``op`` hits the first op. Without ``step`` it strikes before the op's first call; with a step of
:data:`FAULT_STEPS` (``warmup``, ``check``, ``barrier``, ``timed``, ``after``) it strikes inside that
step, once the step's first collective call has returned: mid-collective, with the peers in the
same op. Only this module reads the variable.

**Every step is bounded.** Each rank runs a :class:`~pytest_nvlink.measure.step_watch.StepWatch`:
init has ``WorkerSpec.init_limit_s``, every step of an op must end within ``op_limit_s`` of the
op's start, destroy has ``op_limit_s``; none runs past ``ends_at`` (the session's end). A spawned
rank sends its steps (``("step", rank, text, order)``) and, when one outlives its deadline,
``("hung", rank, text, order, limit_s)`` before it exits with ``step_watch.HUNG_EXIT``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

from pytest_nvlink.measure.busbw import Buffers, buffers_for, format_size
from pytest_nvlink.measure.pattern import ROOT, PatternData
from pytest_nvlink.measure.step_watch import Step, StepWatch

FAULT_ENV = "PYTEST_NVLINK_TEST_FAULT"
FAULT_KINDS: tuple[str, ...] = ("hang", "crash", "raise", "corrupt")


@dataclass(frozen=True)
class WorkerSpec:
    backend: str  # "nccl" | "gloo"
    world_size: int
    init_method: str
    ops: tuple[tuple[str, int], ...]  # (op, requested S in bytes), run in this order
    iterations: int
    warmup: int
    pg_timeout_s: float
    devices: tuple[int, ...] = ()  # CUDA index of each rank (nccl only)
    env: tuple[tuple[str, str], ...] = ()  # set before torch is imported
    init_limit_s: float = 600.0  # process-group init (the rank's own watch; torch bounds only the store)
    op_limit_s: float = 600.0  # every step of one op, from the op's start; also destroy
    ends_at: float | None = None  # time.time() by which every step must end (the parent's session limit)

    def limit_s(self, limit: float) -> float:
        """``limit``, or less where the session ends sooner."""
        return limit if self.ends_at is None else max(0.0, min(limit, self.ends_at - time.time()))


# The steps of one op, in order (key: words); a rank that is further along this list is ahead.
OP_STEPS: dict[str, str] = {
    "start": "before its first call",
    "warmup": "warmup",
    "check": "data check",
    "barrier": "barrier before timing",
    "timed": "timed iterations",
    "after": "barrier after timing",
    "gather": "gathering results to rank 0",
}
FAULT_STEPS: tuple[str, ...] = tuple(key for key in OP_STEPS if key != "gather")  # the steps every rank runs
INIT_STEP = "process-group init"
DESTROY_STEP = "destroying the process group"


def op_where(op: str, size: int, world_size: int) -> str:
    """``all_gather at 64 KiB``: an op as the steps and the failures name it."""
    return f"{op} at {format_size(buffers_for(op, size, world_size).size_bytes)}"


def op_step(spec: WorkerSpec, op: str, key: str, limit_s: float | None = None) -> Step:
    index = [name for name, _ in spec.ops].index(op)
    order = 1 + index * (len(OP_STEPS) + 1) + list(OP_STEPS).index(key)
    limit = spec.limit_s(spec.op_limit_s) if limit_s is None else limit_s
    return Step(op_where(op, dict(spec.ops)[op], spec.world_size), OP_STEPS[key], order, limit)


def init_step(spec: WorkerSpec) -> Step:
    return Step(INIT_STEP, "", 0, spec.limit_s(spec.init_limit_s))


def final_step(spec: WorkerSpec, what: str) -> Step:
    """A step after every op (destroy, gathering logs): behind none of them."""
    return Step(what, "", 1 + len(spec.ops) * (len(OP_STEPS) + 1), spec.limit_s(spec.op_limit_s))


def inert_watch() -> StepWatch:
    """A watch that only remembers the step: for a rank run without one (tests, tools)."""
    return StepWatch(lambda step: None, lambda step: None, active=False)


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int | None = None
    op: str | None = None
    step: str | None = None  # a key of OP_STEPS; None: before the op's first call


def parse_faults(text: str) -> list[Fault]:
    """Faults from ``PYTEST_NVLINK_TEST_FAULT``; raises ValueError on a malformed entry."""
    faults = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        kind, *options = entry.split(":")
        if kind not in FAULT_KINDS:
            raise ValueError(f"{FAULT_ENV}: unknown fault {kind!r} in {entry!r}")
        values = dict(option.split("=", 1) for option in options if "=" in option)
        if set(values) - {"rank", "op", "step"} or len(values) != len(options):
            raise ValueError(f"{FAULT_ENV}: expected KIND[:rank=R][:op=OP][:step=STEP], got {entry!r}")
        if values.get("step", "start") not in FAULT_STEPS:
            raise ValueError(f"{FAULT_ENV}: step must be one of {', '.join(FAULT_STEPS)}, got {entry!r}")
        rank = int(values["rank"]) if "rank" in values else None
        faults.append(Fault(kind, rank, values.get("op"), values.get("step")))
    return faults


def fault_for(faults: list[Fault], rank: int, op: str, first_op: str) -> Fault | None:
    for fault in faults:
        if fault.rank in (None, rank) and (fault.op or first_op) == op:
            return fault
    return None


def _inject(fault: Fault | None, watch: StepWatch) -> None:
    if fault is None or fault.kind == "corrupt":
        return
    if fault.kind == "hang":  # sleeps forever: only the step watch (or the parent's kill) ends it
        threading.Event().wait()
    if fault.kind == "crash":
        watch.settle()  # the step it dies in is published first, as a rank killed mid-step would have done
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"injected fault {fault.kind}")


# --- the ops ---------------------------------------------------------------------------------


def _reduce_scatter(dist: Any) -> Callable[[Any, Any], None]:
    native = getattr(dist, "reduce_scatter_single", None) or getattr(dist, "reduce_scatter_tensor", None)
    if native is not None:
        return native  # type: ignore[no-any-return]

    def fallback(out: Any, inp: Any) -> None:
        dist.all_reduce(inp)
        chunk = out.numel()
        out.copy_(inp[dist.get_rank() * chunk : (dist.get_rank() + 1) * chunk])

    return fallback


def _call(dist: Any, op: str, send: Any, recv: Any) -> Callable[[], None]:
    """A no-argument callable that runs ``op`` once on the given buffers."""
    rank, n = dist.get_rank(), dist.get_world_size()
    if op == "all_reduce":
        return lambda: dist.all_reduce(send)
    if op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(recv, send)
    if op == "reduce_scatter":
        scatter = _reduce_scatter(dist)
        return lambda: scatter(recv, send)
    if op == "broadcast":
        return lambda: dist.broadcast(send, src=ROOT)
    if op == "all_to_all":
        return lambda: dist.all_to_all_single(recv, send)
    if op == "sendrecv":

        def ring() -> None:
            pair = [dist.P2POp(dist.isend, send, (rank + 1) % n), dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
            for work in dist.batch_isend_irecv(pair):
                work.wait()

        return ring
    raise ValueError(f"unknown collective {op!r}")


@dataclass
class _Rank:
    torch: Any
    dist: Any
    spec: WorkerSpec
    rank: int
    device: Any
    gpu_uuid: str | None = None  # the GPU this rank opened (NCCL), as the driver names it
    watch: StepWatch = field(default_factory=inert_watch)  # this rank's current step and its deadline

    def sync(self) -> None:
        if self.spec.backend == "nccl":
            self.torch.cuda.synchronize(self.device)

    def run(self, op: str, size: int, fault: Fault | None) -> dict[str, Any]:
        """One op: warmup, data check, timed iterations; every step announced to the watch, within the op's limit."""
        n = self.spec.world_size
        limit = self.spec.limit_s(self.spec.op_limit_s)
        deadline = self.watch.deadline_in(limit)

        def enter(key: str) -> None:
            self.watch.begin(op_step(self.spec, op, key, limit), deadline)

        def strike(key: str) -> None:
            if fault is not None and fault.step == key:
                _inject(fault, self.watch)

        enter("start")
        if fault is not None and fault.step in (None, "start"):
            _inject(fault, self.watch)
        return self._measure(op, buffers_for(op, size, n), enter, strike, fault is not None and fault.kind == "corrupt")

    def _measure(
        self, op: str, buffers: Buffers, enter: Callable[[str], None], strike: Callable[[str], None], corrupt: bool
    ) -> dict[str, Any]:
        torch = self.torch
        send = torch.empty(buffers.send_numel, dtype=torch.float32, device=self.device)
        in_place = op in ("all_reduce", "broadcast")
        recv = send if in_place else torch.empty(buffers.recv_numel, dtype=torch.float32, device=self.device)
        call = _call(self.dist, op, send, recv)
        data = PatternData(torch, self.device, self.rank, self.spec.world_size)
        enter("warmup")
        data.fill(op, buffers, send)
        for index in range(self.spec.warmup):
            call()
            if index == 0:
                strike("warmup")
        enter("check")
        data.fill(op, buffers, send)
        call()
        strike("check")
        self.sync()
        if corrupt:
            recv.view(-1)[0] += 1
        correct = data.matches(op, buffers, recv)
        if op == "all_reduce":
            send.zero_()  # in-place sums of zeros stay exact however many iterations run
        mean_s = self._timed(call, enter, strike)
        return {"op": op, "size_bytes": buffers.size_bytes, "mean_s": mean_s, "correct": correct}

    def _timed(self, call: Callable[[], None], enter: Callable[[str], None], strike: Callable[[str], None]) -> float:
        enter("barrier")
        self.dist.barrier()
        strike("barrier")
        self.sync()
        enter("timed")
        start = time.perf_counter()
        for index in range(self.spec.iterations):
            call()
            if index == 0:
                strike("timed")
        self.sync()
        elapsed = time.perf_counter() - start
        enter("after")
        self.dist.barrier()
        strike("after")
        return elapsed / self.spec.iterations


def visible_device(torch: Any, local_rank: int, environ: Any = os.environ) -> int:
    """The CUDA index a launched rank uses: from what this process sees, not from its rank number.

    Under ``srun --gpus-per-task=1``, ``--gpu-bind`` or a one-GPU pod every task sees one GPU, as
    ``cuda:0``, whatever its local rank; a task that sees all of the node's GPUs uses its local rank.
    """
    count = int(torch.cuda.device_count())
    if count == 1:
        return 0
    if 0 <= local_rank < count:
        return local_rank
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    raise RuntimeError(
        f"local rank {local_rank} has no GPU of its own: this process sees {count} "
        f"(CUDA_VISIBLE_DEVICES={visible!r}); bind one GPU per task or run one task per visible GPU"
    )


def _gpu_uuid(torch: Any, index: int) -> str | None:
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def _init(rank: int, spec: WorkerSpec, local_rank: int | None = None) -> _Rank:
    import torch  # only in the child, after the NCCL env is set
    import torch.distributed as dist

    options: dict[str, Any] = {}
    device: Any = torch.device("cpu")
    uuid = None
    if spec.backend == "nccl":
        index = spec.devices[rank] if local_rank is None else visible_device(torch, local_rank)
        device = torch.device(f"cuda:{index}")
        torch.cuda.set_device(device)
        uuid = _gpu_uuid(torch, index)
        options["device_id"] = device  # eager NCCL init: an init hang shows up as one
    dist.init_process_group(
        spec.backend,
        init_method=spec.init_method,
        rank=rank,
        world_size=spec.world_size,
        timeout=timedelta(seconds=spec.pg_timeout_s),
        **options,
    )
    return _Rank(torch, dist, spec, rank, device, uuid)


Send = Callable[[tuple[Any, ...]], None]


class RankFailed(Exception):
    """This rank raised; ``phase`` is where ("init", an op name, "shutdown"), the cause is chained."""

    def __init__(self, phase: str, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.phase = phase


def init_rank(rank: int, spec: WorkerSpec, local_rank: int | None = None, watch: StepWatch | None = None) -> _Rank:
    """Join the process group (``spec.init_method``), honouring an injected ``init`` fault.

    ``local_rank`` is given for a rank a launcher started: its CUDA device under NCCL is then picked
    by :func:`visible_device`; spawned ranks take ``spec.devices[rank]``. ``watch`` bounds init by
    ``spec.init_limit_s`` (torch does not bound NCCL's eager init). Raises :class:`RankFailed`.
    """
    watch = watch or inert_watch()
    try:
        watch.begin(init_step(spec))
        faults = parse_faults(os.environ.get(FAULT_ENV, ""))
        first_op = spec.ops[0][0] if spec.ops else "init"
        _inject(fault_for(faults, rank, "init", first_op), watch)
        state = _init(rank, spec, local_rank)
    except BaseException as exc:
        raise RankFailed("init", exc) from exc
    state.watch = watch
    return state


def run_ops(state: _Rank, send: Send) -> None:
    """Run ``spec.ops`` in order, reporting ``start``/``result`` through ``send``; raises :class:`RankFailed`."""
    spec, rank = state.spec, state.rank
    phase = "init"
    try:
        faults = parse_faults(os.environ.get(FAULT_ENV, ""))
        first_op = spec.ops[0][0] if spec.ops else "init"
        for op, size in spec.ops:
            phase = op
            fault = fault_for(faults, rank, op, first_op)
            send(("start", rank, op))
            payload = state.run(op, size, fault)
            send(("result", rank, op, payload))
    except BaseException as exc:
        raise RankFailed(phase, exc) from exc


def _locked(conn: Connection) -> tuple[Send, Send]:
    """``send`` for the rank's threads (one pipe, one writer at a time), and a bounded one for the hung report."""
    lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with lock:
            conn.send(message)

    def send_if_free(message: tuple[Any, ...]) -> None:
        if lock.acquire(timeout=5.0):
            try:
                conn.send(message)
            finally:
                lock.release()

    return send, send_if_free


def worker_main(conn: Connection, rank: int, spec: WorkerSpec) -> None:
    """Entry point of one spawned rank."""
    os.environ.update(dict(spec.env))
    send, send_if_free = _locked(conn)
    watch = StepWatch(
        lambda step: send(("step", rank, step.text, step.order)),
        lambda step: send_if_free(("hung", rank, step.text, step.order, step.limit_s)),
    )
    try:
        state = init_rank(rank, spec, watch=watch)
        send(("ready", rank))
        run_ops(state, send)
        try:
            watch.begin(final_step(spec, DESTROY_STEP))
            state.dist.destroy_process_group()
        except BaseException as exc:
            raise RankFailed("shutdown", exc) from exc
        watch.close()
        send(("done", rank))
    except BaseException as exc:
        watch.close()
        phase = exc.phase if isinstance(exc, RankFailed) else "init"
        cause = exc.__cause__ if isinstance(exc, RankFailed) and exc.__cause__ is not None else exc
        with contextlib.suppress(OSError, ValueError):
            send_if_free(("error", rank, phase, f"{type(cause).__name__}: {cause}", traceback.format_exc()))
            conn.close()
        os._exit(1)  # skip interpreter teardown, which can block on a broken process group
    conn.close()
