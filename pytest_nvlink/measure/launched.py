"""Collectives over ranks that a launcher started (srun, torchrun): the same per-op code as the local harness.

Locally, ``collectives.run_collectives`` spawns the ranks and a parent watches them. Here every
rank is its own program: each joins the process group through ``init_method="env://"``, runs
``worker.run_ops`` (the very code the spawned ranks run) and hands its per-op payload to rank 0
with ``gather_object``; rank 0 alone turns them into :class:`CollectiveMeasurement` entries.

No parent watches a launched job. A rank that crashes makes the others' next collective fail, and
rank 0 records that op, and every op after it, as an error entry (fail closed). A rank that hangs
is ended by its own step watch (``step_watch``): every step (init, each op's steps, the gathers,
destroy) must end within ``op_timeout_s`` (init: ``init_timeout_s``); the watch records the step in
the rendezvous store and exits the rank with ``HUNG_EXIT``. On rank 0 it first names the hung
ranks and runs the command's ``finish`` (writing the results); torch's own process-group timeout
waits :data:`PG_MARGIN_S` longer.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_nvlink.measure import collectives as local
from pytest_nvlink.measure.collectives import CollectiveSpec
from pytest_nvlink.measure.launched_progress import RankProgress, default_store
from pytest_nvlink.measure.ranks import RankInfo
from pytest_nvlink.measure.step_watch import REPORT_S, REPORTING, Step, StepWatch, hung_text
from pytest_nvlink.measure.worker import (
    DESTROY_STEP,
    RankFailed,
    WorkerSpec,
    final_step,
    inert_watch,
    init_rank,
    op_step,
    op_where,
    run_ops,
)
from pytest_nvlink.model import CollectiveMeasurement, NcclAudit

ROOT = 0
PG_MARGIN_S = 60.0  # torch's process-group timeout waits this much longer than the ranks' own step watches
# A hung rank other than rank 0 stays this long after recording its step: rank 0, whose watch fires
# about the same time, reads it, and no peer's exit wakes rank 0's main thread into a second report.
LINGER_S = 5.0
# Under NCCL a rank's CUDA device is picked from what the process sees (worker.visible_device): its
# local rank when it sees every GPU of the node, cuda:0 when the launcher bound it to one GPU.


@dataclass
class Member:
    """One rank as every rank sees it after the first all-gather."""

    rank: int
    host: str
    local_rank: int
    cuda_index: int | None = None  # the CUDA device it opened (NCCL); None on gloo
    gpu_uuid: str | None = None  # which GPU that is, whatever the process's numbering


@dataclass
class Group:
    """This rank's handle on the launched process group (``state`` None: it could not join)."""

    info: RankInfo
    spec: CollectiveSpec
    ops: tuple[tuple[str, int], ...]
    refused: dict[str, str]
    state: Any = None
    members: list[Member] = field(default_factory=list)
    failure: str | None = None  # the first thing that broke the group, as rank 0 words it
    log_dir: Path | None = None  # NCCL only: this rank's NCCL_DEBUG_FILE folder
    recorded_env: dict[str, str] = field(default_factory=dict)  # the user's NCCL_* settings
    progress: RankProgress | None = None  # every rank's step and heartbeat, in the rendezvous store
    watch: StepWatch = field(default_factory=inert_watch)  # this rank's step and its deadline
    measured: dict[str, CollectiveMeasurement] = field(default_factory=dict)  # rank 0: the ops done so far
    finish: Callable[[Group], None] | None = None  # rank 0: writes the results when its own watch gives up
    _reporter: list[str] = field(default_factory=list)  # rank 0: who reports, "main" or "watch" (the first)
    _claim_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def is_root(self) -> bool:
        return self.info.rank == ROOT

    @property
    def dist(self) -> Any:
        return self.state.dist

    def step(self, what: str) -> None:
        """Enter a step outside the ops (a gather, destroy), bounded by the op limit."""
        self.watch.begin(final_step(worker_spec(self.spec, self.ops), what))

    def reporting(self) -> None:
        """Writing or reporting what is known: bounded, and nothing is left to report if it hangs.

        On rank 0 the watch may have given up on a step already and be writing the results: then
        this thread stops here and the watch ends the process when it is done.
        """
        if self.is_root and not self.claim("main"):
            threading.Event().wait()
        self.watch.begin(Step(REPORTING, "", 1 << 30, REPORT_S))

    def claim(self, who: str) -> bool:
        """Whether ``who`` reports rank 0's results: only one of the main thread and the watch does."""
        with self._claim_lock:
            if not self._reporter:
                self._reporter.append(who)
            return self._reporter[0] == who

    def fail(self, where: str, exc: BaseException, started: float) -> str:
        """Record the first failure; later ones only follow from it."""
        cause = exc.__cause__ if isinstance(exc, RankFailed) and exc.__cause__ is not None else exc
        text = (
            f"rank {self.info.rank} ({self.info.host}) failed in {where} after {time.monotonic() - started:.1f} s: "
            f"{type(cause).__name__}: {local.shorten(str(cause))} (a rank that crashed, hung or left the job "
            "shows up this way on the others; each rank's stderr says which)"
        )
        if self.failure is None:
            self.failure = text
        return text


def worker_spec(spec: CollectiveSpec, ops: tuple[tuple[str, int], ...]) -> WorkerSpec:
    """The spawned ranks' spec, with the env rendezvous; the step watches fire before torch's timeout."""
    op_limit = spec.op_timeout_s or spec.timeout_s
    init_limit = spec.init_timeout_s or spec.timeout_s
    return WorkerSpec(
        backend=spec.backend,
        world_size=spec.world_size,
        init_method="env://",
        ops=ops,
        iterations=spec.iterations,
        warmup=spec.warmup,
        pg_timeout_s=max(op_limit, init_limit) + PG_MARGIN_S,
        init_limit_s=init_limit,
        op_limit_s=op_limit,
    )


def join(info: RankInfo, spec: CollectiveSpec, finish: Callable[[Group], None] | None = None) -> Group:
    """Join the job's process group and learn every rank's host; a failure is kept, not raised.

    ``finish`` (rank 0): what writes the results should rank 0's own watch give up on a step.
    """
    ops, refused = local.plan_ops(spec)
    group = Group(info, spec, tuple(ops), refused, finish=finish)
    group.watch = StepWatch(lambda step: _publish(group, step), lambda step: _on_hung(group, step))
    if spec.backend == "nccl":  # as the local harness: NCCL's INFO log says which transports it used
        group.recorded_env = local.recorded_nccl_env(os.environ)
        group.log_dir = Path(tempfile.mkdtemp(prefix="pytest-nvlink-nccl-"))
        os.environ.update(local.child_env(spec, group.log_dir, os.environ))
        # torch's default tears the process down on a watchdog timeout, before rank 0 can write
        # anything: abort the communicator and raise in this rank instead (CleanUpOnly).
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
    started = time.monotonic()
    try:
        group.state = init_rank(info.rank, worker_spec(spec, group.ops), local_rank=info.local_rank, watch=group.watch)
        group.progress = RankProgress(default_store(group.dist), info.rank, info.world_size)
        group.members = [Member(**json.loads(text)) for text in all_gather_json(group, _identity(group))]
    except BaseException as exc:
        group.reporting()
        group.fail("process-group init", exc, started)
        group.state = None
        return group
    group.failure = contradiction(group.members)
    return group


def contradiction(members: list[Member]) -> str | None:
    """Two ranks claiming one GPU slot: the launcher's local ranks or the host names are wrong."""
    seen: dict[tuple[str, int], int] = {}
    for member in members:
        key = (member.host, member.local_rank)
        if key in seen:
            return (
                f"ranks {seen[key]} and {member.rank} both say they are local rank {member.local_rank} on host "
                f"{member.host}; LOCAL_RANK/SLURM_LOCALID or the host names (PYTEST_NVLINK_HOST, SLURMD_NODENAME) "
                "contradict each other"
            )
        seen[key] = member.rank
    by_uuid: dict[str, int] = {}
    for member in members:
        if member.gpu_uuid is None:
            continue
        if member.gpu_uuid in by_uuid:
            return (
                f"ranks {by_uuid[member.gpu_uuid]} and {member.rank} both opened GPU {member.gpu_uuid}; "
                "the launcher gave two tasks one GPU (check --gpus-per-task / --gpu-bind / CUDA_VISIBLE_DEVICES)"
            )
        by_uuid[member.gpu_uuid] = member.rank
    return None


def _identity(group: Group) -> dict[str, Any]:
    info, device = group.info, group.state.device
    cuda_index = device.index if getattr(device, "type", None) == "cuda" else None
    return {
        "rank": info.rank,
        "host": info.host,
        "local_rank": info.local_rank,
        "cuda_index": cuda_index,
        "gpu_uuid": group.state.gpu_uuid,
    }


def all_gather_json(group: Group, value: object) -> list[str]:
    """Every rank's ``value`` as JSON text, in rank order (plain text crosses the wire, never objects)."""
    gathered: list[Any] = [None] * group.info.world_size
    group.dist.all_gather_object(gathered, json.dumps(value))
    return [str(text) for text in gathered]


def gather_json(group: Group, value: object) -> list[Any] | None:
    """Every rank's ``value`` on rank 0, parsed back from JSON; None on the other ranks."""
    gathered: list[Any] | None = [None] * group.info.world_size if group.is_root else None
    group.dist.gather_object(json.dumps(value), gathered, dst=ROOT)
    return None if gathered is None else [json.loads(str(text)) for text in gathered]


def run_collectives(group: Group) -> list[CollectiveMeasurement]:
    """Every rank runs the suite's ops; rank 0 returns one entry per op (others an empty list)."""
    if group.state is not None and group.failure is None:
        started = time.monotonic()
        try:
            run_ops(group.state, _collector(group))
        except BaseException as exc:
            group.reporting()
            phase = exc.phase if isinstance(exc, RankFailed) else "collectives"
            group.fail(_phase_text(group, phase), exc, started)
            name_the_cause(group)
    if not group.is_root:
        return []
    return local.entries_for(group.spec, group.measured, group.refused, group.failure, None)


def describe_rank(group: Group, rank: int) -> str:
    """``rank 1 (host b, GPU GPU-…)``: who, where and on which GPU, as the first all-gather said."""
    member = next((m for m in group.members if m.rank == rank), None)
    if member is None:
        return f"rank {rank}"
    gpu = f", GPU {member.gpu_uuid} (cuda:{member.cuda_index})" if member.gpu_uuid else ""
    return f"rank {rank} ({member.host}{gpu})"


def name_the_cause(group: Group) -> None:
    """Rank 0: put the rank that died or hung (the cause) in front of what rank 0 itself saw."""
    if not group.is_root or group.progress is None or group.failure is None:
        return
    culprits = group.progress.culprits(lambda rank: describe_rank(group, rank))
    if culprits:
        group.failure = f"{culprits}; {group.failure}"


def _publish(group: Group, step: Step) -> None:
    if group.progress is not None:
        group.progress.mark(step.text)


def _on_hung(group: Group, step: Step) -> None:
    """This rank's watch gave up on ``step``: record it; rank 0 names the hung ranks and finishes."""
    if step.where == REPORTING:
        return
    if group.progress is not None:
        group.progress.hung(step)
    if not group.is_root:
        time.sleep(LINGER_S)
        return
    if not group.claim("watch"):  # the main thread is reporting a failure: let it finish (bounded by REPORT_S)
        threading.Event().wait()
    named = None
    if group.progress is not None:
        named = group.progress.culprits(lambda rank: describe_rank(group, rank), own=step)
    group.failure = named or hung_text(describe_rank(group, group.info.rank), step.text, step.limit_s)
    if group.finish is not None:
        group.finish(group)


def _phase_text(group: Group, phase: str) -> str:
    size = dict(group.ops).get(phase)
    return phase if size is None else op_where(phase, size, group.info.world_size)


def _collector(group: Group) -> Callable[[tuple[Any, ...]], None]:
    sizes, spec = dict(group.ops), worker_spec(group.spec, group.ops)

    def send(message: tuple[Any, ...]) -> None:
        if message[0] != "result":
            return
        op, payload = message[2], message[3]
        group.watch.begin(op_step(spec, op, "gather"))
        payloads = gather_json(group, payload)
        if payloads is not None:
            group.measured[op] = local.measurement_of(group.spec, op, sizes[op], payloads)

    return send


def leave(group: Group) -> None:
    """Destroy the process group when it is healthy; a broken one is left to process exit."""
    if group.state is not None and group.failure is None:
        group.step(DESTROY_STEP)
        group.dist.destroy_process_group()
    group.watch.close()


def nccl_audit(group: Group) -> NcclAudit | None:
    """Rank 0: every rank's NCCL log parsed into one audit (its own alone when the group broke); None on gloo."""
    if group.log_dir is None:
        return None
    logs = local.read_logs(group.log_dir)
    shutil.rmtree(group.log_dir, ignore_errors=True)
    if group.state is not None and group.failure is None:
        started = time.monotonic()
        group.step("gathering the NCCL logs")
        try:
            gathered = gather_json(group, logs)
        except Exception as exc:
            group.fail("gathering the NCCL logs", exc, started)
        else:
            logs = {name: text for item in gathered or [] for name, text in item.items()} or logs
    return local.nccl_audit(logs, group.recorded_env) if group.is_root else None
