"""One rank of the collective campaign; runs in a spawned process (see ``collectives.py``).

The parent sends a :class:`WorkerSpec` (plain data) and reads plain tuples back over a pipe:

* ``("ready", rank)`` once the process group is up;
* ``("start", rank, op)`` before each op, ``("result", rank, op, payload)`` after it;
* ``("error", rank, phase, text)`` when the rank raises, ``("done", rank)`` at the end.

Ranks that a launcher started (``launched.py``) run the same :func:`init_rank` and :func:`run_ops`
with an ``env://`` rendezvous and a ``send`` that gathers each op's payload to rank 0.

**Fault injection, for tests only.** ``PYTEST_NVLINK_TEST_FAULT`` holds comma-separated faults
``KIND[:rank=R][:op=OP]`` with KIND one of ``hang`` (block forever), ``crash`` (SIGKILL itself),
``raise`` (raise RuntimeError) or ``corrupt`` (flip one element of the op's result before the check).
``op`` is an op name or ``init``; a fault without ``rank`` hits every rank, one without ``op`` hits
the first op. Only this module reads the variable.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

from pytest_nvlink.measure.busbw import Buffers, buffers_for

FAULT_ENV = "PYTEST_NVLINK_TEST_FAULT"
FAULT_KINDS: tuple[str, ...] = ("hang", "crash", "raise", "corrupt")
ROOT = 0
_PERIOD = 13  # fill pattern period; keeps every value a small integer, so float32 sums are exact
_ALLTOALL_STRIDE = 16


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


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int | None = None
    op: str | None = None


def parse_faults(text: str) -> list[Fault]:
    """Faults from ``PYTEST_NVLINK_TEST_FAULT``; raises ValueError on a malformed entry."""
    faults = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        kind, *options = entry.split(":")
        if kind not in FAULT_KINDS:
            raise ValueError(f"{FAULT_ENV}: unknown fault {kind!r} in {entry!r}")
        values = dict(option.split("=", 1) for option in options if "=" in option)
        if set(values) - {"rank", "op"} or len(values) != len(options):
            raise ValueError(f"{FAULT_ENV}: expected KIND[:rank=R][:op=OP], got {entry!r}")
        rank = int(values["rank"]) if "rank" in values else None
        faults.append(Fault(kind, rank, values.get("op")))
    return faults


def fault_for(faults: list[Fault], rank: int, op: str, first_op: str) -> Fault | None:
    for fault in faults:
        if fault.rank in (None, rank) and (fault.op or first_op) == op:
            return fault
    return None


def _inject(fault: Fault | None) -> None:
    if fault is None or fault.kind == "corrupt":
        return
    if fault.kind == "hang":
        threading.Event().wait()
    if fault.kind == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"injected fault {fault.kind}")


# --- fills and checks: integer-valued float32, so every expected value is exact ---------------

# Elements the fill and the check compute at once. Their temporaries (an int64 index, an int64 peer
# number and the float32 values of one span: 20 bytes an element) stay ~20 MiB whatever the buffer;
# building the whole expected buffer at once took several times its size (a 4 GiB all_reduce ~30 GiB).
SPAN = 1 << 20


class PatternData:
    """Deterministic per-rank inputs and exact expected outputs (like nccl-tests' -c check).

    Element ``i`` of a rank's send buffer is ``i % 13 + rank + 1`` (chunked ops: the position in its
    peer's chunk, plus the pair's number for all_to_all); the expected output follows from the op.
    Both are computed a span at a time, in place, so the extra memory is bounded by :data:`SPAN`.
    """

    def __init__(self, torch: Any, device: Any, rank: int, n: int) -> None:
        self.torch, self.device, self.rank, self.n = torch, device, rank, n

    def _index(self, lo: int, hi: int) -> Any:
        return self.torch.arange(lo, hi, device=self.device, dtype=self.torch.int64)

    def _spans(self, numel: int) -> Iterator[tuple[int, int]]:
        for lo in range(0, numel, SPAN):
            yield lo, min(numel, lo + SPAN)

    def _cyclic(self, lo: int, hi: int, salt: int, scale: int = 1) -> Any:
        """``(i % 13) * scale + salt`` for i in [lo, hi), as float32."""
        return self._index(lo, hi).remainder_(_PERIOD).mul_(scale).add_(salt).to(self.torch.float32)

    def _chunked(self, lo: int, hi: int, chunk: int, peer_term: Callable[[Any], Any]) -> Any:
        """``(i % chunk) % 13 + peer_term(i // chunk)`` for i in [lo, hi), as float32."""
        index = self._index(lo, hi)
        peer = peer_term(self.torch.div(index, chunk, rounding_mode="floor"))
        return index.remainder_(chunk).remainder_(_PERIOD).add_(peer).to(self.torch.float32)

    def _pair_term(self, src_is_peer: bool) -> Callable[[Any], Any]:
        """all_to_all: the number of the (sender, receiver) pair, ``16 * (src * n + dst + 1)``."""
        n, rank = self.n, self.rank
        if src_is_peer:
            return lambda peer: peer.mul_(n).add_(rank + 1).mul_(_ALLTOALL_STRIDE)
        return lambda peer: peer.add_(rank * n + 1).mul_(_ALLTOALL_STRIDE)

    def _sent(self, op: str, buffers: Buffers, lo: int, hi: int) -> Any:
        if op == "broadcast":
            return self._cyclic(lo, hi, ROOT + 1)
        if op == "all_to_all":
            return self._chunked(lo, hi, buffers.chunk_numel, self._pair_term(src_is_peer=False))
        return self._cyclic(lo, hi, self.rank + 1)

    def _expected(self, op: str, buffers: Buffers, lo: int, hi: int) -> Any:
        n, rank, chunk = self.n, self.rank, buffers.chunk_numel
        total = n * (n + 1) // 2
        if op == "all_reduce":
            return self._cyclic(lo, hi, total, scale=n)
        if op == "all_gather":
            return self._chunked(lo, hi, chunk, lambda peer: peer.add_(1))
        if op == "reduce_scatter":  # this rank's chunk of the summed input
            return self._cyclic(rank * chunk + lo, rank * chunk + hi, total, scale=n)
        if op == "broadcast":
            return self._cyclic(lo, hi, ROOT + 1)
        if op == "all_to_all":
            return self._chunked(lo, hi, chunk, self._pair_term(src_is_peer=True))
        if op == "sendrecv":
            return self._cyclic(lo, hi, (rank - 1) % n + 1)
        raise ValueError(f"unknown collective {op!r}")

    def fill(self, op: str, buffers: Buffers, send: Any) -> None:
        if op == "broadcast" and self.rank != ROOT:
            send.fill_(-1.0)
            return
        for lo, hi in self._spans(buffers.send_numel):
            send[lo:hi].copy_(self._sent(op, buffers, lo, hi))

    def matches(self, op: str, buffers: Buffers, recv: Any) -> bool:
        """Whether ``recv`` holds exactly what ``op`` must leave on this rank."""
        flat = recv.view(-1)
        if flat.numel() != buffers.recv_numel:
            return False
        return all(
            self.torch.equal(flat[lo:hi], self._expected(op, buffers, lo, hi))
            for lo, hi in self._spans(buffers.recv_numel)
        )

    def fill_cyclic(self, tensor: Any, salt: int) -> None:
        """``tensor[i] = i % 13 + salt`` (the send/recv pairs' payload)."""
        for lo, hi in self._spans(tensor.numel()):
            tensor[lo:hi].copy_(self._cyclic(lo, hi, salt))

    def is_cyclic(self, tensor: Any, salt: int) -> bool:
        return all(
            self.torch.equal(tensor[lo:hi], self._cyclic(lo, hi, salt)) for lo, hi in self._spans(tensor.numel())
        )


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

    def sync(self) -> None:
        if self.spec.backend == "nccl":
            self.torch.cuda.synchronize(self.device)

    def run(self, op: str, size: int, corrupt: bool) -> dict[str, Any]:
        torch, n = self.torch, self.spec.world_size
        buffers = buffers_for(op, size, n)
        send = torch.empty(buffers.send_numel, dtype=torch.float32, device=self.device)
        in_place = op in ("all_reduce", "broadcast")
        recv = send if in_place else torch.empty(buffers.recv_numel, dtype=torch.float32, device=self.device)
        call = _call(self.dist, op, send, recv)
        data = PatternData(torch, self.device, self.rank, n)
        data.fill(op, buffers, send)
        for _ in range(self.spec.warmup):
            call()
        data.fill(op, buffers, send)
        call()
        self.sync()
        if corrupt:
            recv.view(-1)[0] += 1
        correct = data.matches(op, buffers, recv)
        if op == "all_reduce":
            send.zero_()  # in-place sums of zeros stay exact however many iterations run
        mean_s = self._timed(call)
        return {"op": op, "size_bytes": buffers.size_bytes, "mean_s": mean_s, "correct": correct}

    def _timed(self, call: Callable[[], None]) -> float:
        self.dist.barrier()
        self.sync()
        start = time.perf_counter()
        for _ in range(self.spec.iterations):
            call()
        self.sync()
        elapsed = time.perf_counter() - start
        self.dist.barrier()
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


def init_rank(rank: int, spec: WorkerSpec, local_rank: int | None = None) -> _Rank:
    """Join the process group (``spec.init_method``), honouring an injected ``init`` fault.

    ``local_rank`` is given for a rank a launcher started: its CUDA device under NCCL is then picked
    by :func:`visible_device`; spawned ranks take ``spec.devices[rank]``. Raises :class:`RankFailed`.
    """
    try:
        faults = parse_faults(os.environ.get(FAULT_ENV, ""))
        first_op = spec.ops[0][0] if spec.ops else "init"
        _inject(fault_for(faults, rank, "init", first_op))
        return _init(rank, spec, local_rank)
    except BaseException as exc:
        raise RankFailed("init", exc) from exc


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
            _inject(fault)
            send(("start", rank, op))
            payload = state.run(op, size, corrupt=fault is not None and fault.kind == "corrupt")
            send(("result", rank, op, payload))
    except BaseException as exc:
        raise RankFailed(phase, exc) from exc


def worker_main(conn: Connection, rank: int, spec: WorkerSpec) -> None:
    """Entry point of one spawned rank."""
    os.environ.update(dict(spec.env))
    try:
        state = init_rank(rank, spec)
        conn.send(("ready", rank))
        run_ops(state, conn.send)
        try:
            state.dist.destroy_process_group()
        except BaseException as exc:
            raise RankFailed("shutdown", exc) from exc
        conn.send(("done", rank))
    except BaseException as exc:
        phase = exc.phase if isinstance(exc, RankFailed) else "init"
        cause = exc.__cause__ if isinstance(exc, RankFailed) and exc.__cause__ is not None else exc
        with contextlib.suppress(OSError, ValueError):
            conn.send(("error", rank, phase, f"{type(cause).__name__}: {cause}", traceback.format_exc()))
            conn.close()
        os._exit(1)  # skip interpreter teardown, which can block on a broken process group
    conn.close()
