"""Collective bandwidth: one spawned process group per session, watched by the parent.

``run_collectives`` starts ``world_size`` ranks (``worker.worker_main``), initialized once through a
fresh ``file://`` rendezvous in a temporary directory and reused for every op. The parent reads
each rank's pipe, and when a rank dies, raises, or stops answering within the per-op or per-session
limit it kills *all* ranks and turns the failed op and every op after it into error entries.

Each rank also bounds its own steps (``step_watch``): it reports the step it is in, and a step that
outlives the op's limit ends the rank with ``HUNG_EXIT`` after a ``hung`` message naming that step.
No step runs past the session limit either. The parent's own limits wait :data:`WATCH_MARGIN_S`
longer, so that the ranks say which step hung; they remain the backstop for a rank frozen whole.

With NCCL each rank writes ``NCCL_DEBUG=INFO`` output to its own ``NCCL_DEBUG_FILE``; the texts
are kept on :class:`CollectiveRun` and summarized into ``NcclAudit`` by ``parsers.nccl_log``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from pytest_nvlink.config.suites import Measure
from pytest_nvlink.measure import _proc
from pytest_nvlink.measure.busbw import MIB, bandwidth, buffers_for, format_size
from pytest_nvlink.measure.step_watch import hung_text
from pytest_nvlink.measure.worker import WorkerSpec, worker_main
from pytest_nvlink.model import CollectiveMeasurement, NcclAudit

WATCHED_NCCL_ENV: tuple[str, ...] = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE")
_OUR_NCCL_ENV = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_FILE"})
NCCL_DEBUG_SUBSYS = "INIT,BOOTSTRAP,ENV,GRAPH"
AUDITED_SUBSYS: tuple[str, ...] = ("INIT", "ENV", "GRAPH")  # what the transport audit reads
GRACE_S = 1.0  # after a first failure, how long to wait for the other ranks' stories
WATCH_MARGIN_S = 5.0  # the parent's limits wait this much longer than the ranks' own step watches

Progress = _proc.Progress


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective session: backend, ranks, and the (op, S bytes) list in run order."""

    backend: str  # "nccl" | "gloo"
    world_size: int
    sizes: tuple[tuple[str, int], ...]
    iterations: int = 20
    warmup: int = 5
    timeout_s: float = 600.0  # the whole session, spawn and init included
    op_timeout_s: float | None = None  # one op, all ranks; None: the session limit
    init_timeout_s: float | None = None  # spawn + import + init; None: the session limit
    devices: tuple[int, ...] = ()  # CUDA index of each rank (nccl); default 0..n-1
    env: tuple[tuple[str, str], ...] = ()  # extra variables for the ranks

    @classmethod
    def from_measure(
        cls, measure: Measure, backend: str, world_size: int, sizes_mib: Mapping[str, int], **options: Any
    ) -> CollectiveSpec:
        """Ops from ``measure.collectives``, each at ``sizes_mib[op]`` (thresholds' size_mib)."""
        sizes = tuple((op, sizes_mib[op] * MIB) for op in measure.collectives)
        return cls(
            backend=backend,
            world_size=world_size,
            sizes=sizes,
            iterations=measure.collective_iterations,
            warmup=measure.collective_warmup,
            timeout_s=float(measure.timeout_s),
            **options,
        )

    def rank_device(self, rank: int) -> str:
        if self.backend != "nccl":
            return "cpu"
        return f"GPU {self.devices[rank] if self.devices else rank}"


@dataclass
class CollectiveRun:
    measurements: list[CollectiveMeasurement]
    nccl: NcclAudit | None = None
    logs: dict[str, str] = field(default_factory=dict)  # NCCL_DEBUG_FILE name -> text
    pids: list[int] = field(default_factory=list)  # the ranks' process ids (all reaped on return)


# --- environment -----------------------------------------------------------------------------


def recorded_nccl_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The user's NCCL_* settings the ranks inherit (ours, NCCL_DEBUG and its file, left out)."""
    return {
        key: value for key, value in sorted(environ.items()) if key.startswith("NCCL_") and key not in _OUR_NCCL_ENV
    }


def debug_subsys(given: str | None) -> str:
    """The user's NCCL_DEBUG_SUBSYS with the subsystems the audit reads put back (``^X``: all but X)."""
    if not given or not given.strip():
        return NCCL_DEBUG_SUBSYS
    text = given.strip()
    if text.startswith("^"):  # NCCL's "all but these": never exclude what the audit reads
        kept = [part for part in text[1:].split(",") if part.strip() and part.strip().upper() not in AUDITED_SUBSYS]
        return "^" + ",".join(kept) if kept else "ALL"
    parts = [part.strip() for part in text.split(",") if part.strip()]
    upper = {part.upper() for part in parts}
    if "ALL" in upper:
        return text
    return ",".join(parts + [name for name in AUDITED_SUBSYS if name not in upper])


def child_env(spec: CollectiveSpec, tmpdir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """Variables each rank sets before importing torch (on top of what it inherits)."""
    env = {"OMP_NUM_THREADS": environ.get("OMP_NUM_THREADS", "1")}
    if spec.backend == "nccl":
        env["NCCL_DEBUG"] = "INFO"
        env["NCCL_DEBUG_FILE"] = str(tmpdir / "nccl.%h.%p")
        env["NCCL_DEBUG_SUBSYS"] = debug_subsys(environ.get("NCCL_DEBUG_SUBSYS"))
    env.update(dict(spec.env))
    return env


# --- the watched process group -----------------------------------------------------------------


def shorten(text: str, limit: int = 240) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _ranks(ranks: Iterable[int]) -> str:
    listed = sorted(ranks)
    return f"rank {listed[0]}" if len(listed) == 1 else "ranks " + ",".join(map(str, listed))


class _Group:
    """The parent's view of the ranks: what each said, and whether the group is stuck or broken."""

    def __init__(self, spec: CollectiveSpec, worker: WorkerSpec, progress: Progress | None) -> None:
        self.spec, self.ops, self.n, self.progress = spec, worker.ops, spec.world_size, progress
        started = [
            _proc.start_child(worker_main, (rank, worker), name=f"pytest-nvlink-rank{rank}") for rank in range(self.n)
        ]
        self.processes = [process for process, _ in started]
        self.open: dict[Connection, int] = {conn: rank for rank, (_, conn) in enumerate(started)}
        self.ready: set[int] = set()
        self.entered: dict[str, set[int]] = {op: set() for op, _ in self.ops}
        self.results: dict[str, dict[int, dict[str, Any]]] = {op: {} for op, _ in self.ops}
        self.errors: dict[int, tuple[str, str]] = {}
        self.steps: dict[int, str] = {}  # each rank's step as it last reported it
        self.hung: dict[int, tuple[str, int, float]] = {}  # rank -> (step, order, limit) its watch gave up on
        self.done: set[int] = set()
        self.stage = -1  # -1: init; else index of the op in progress
        self.stage_started = self.session_started = time.monotonic()
        self.measurements: list[CollectiveMeasurement] = []

    # messages

    def receive(self, timeout: float) -> None:
        for conn in wait(list(self.open), timeout):
            assert isinstance(conn, Connection)
            while True:
                message = _proc.receive(conn)
                if message is None:
                    del self.open[conn]
                    break
                self._handle(message)
                if not conn.poll(0):
                    break

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind, rank = message[0], message[1]
        if kind == "ready":
            self.ready.add(rank)
        elif kind == "start":
            self.entered[message[2]].add(rank)
        elif kind == "result":
            self.results[message[2]][rank] = message[3]
        elif kind == "error":
            self.errors[rank] = (message[2], message[3])
        elif kind == "step":
            self.steps[rank] = message[2]
        elif kind == "hung":
            self.hung[rank] = (message[2], message[3], message[4])
        elif kind == "done":
            self.done.add(rank)

    def advance(self) -> None:
        while True:
            if self.stage == -1 and len(self.ready) == self.n:
                self.stage = 0
            elif 0 <= self.stage < len(self.ops) and len(self.results[self.ops[self.stage][0]]) == self.n:
                self._finish_op(*self.ops[self.stage])
                self.stage += 1
            else:
                return
            self.stage_started = time.monotonic()

    def _finish_op(self, op: str, size: int) -> None:
        payloads = list(self.results[op].values())
        measurement = measurement_of(self.spec, op, size, payloads)
        self.measurements.append(measurement)
        if self.progress is not None:
            self.progress(_progress_line(measurement))

    # problems

    def problem(self) -> str | None:
        dead = [r for r, p in enumerate(self.processes) if r not in self.done and not p.is_alive()]
        if self.errors or dead:
            self._grace()  # also reads a "done" that raced with the exit: then nothing failed
            failures = self._describe_failures()
            if failures:
                return failures
        now = time.monotonic()
        if now - self.session_started > self.spec.timeout_s + WATCH_MARGIN_S:
            return self._describe_timeout(self.spec.timeout_s + WATCH_MARGIN_S, "session limit")
        limit = self.spec.init_timeout_s if self.stage == -1 else self.spec.op_timeout_s
        if limit is not None and now - self.stage_started > limit + WATCH_MARGIN_S:
            return self._describe_timeout(limit + WATCH_MARGIN_S, None)
        return None

    def _grace(self) -> None:
        """Wait for the other ranks' stories, and for a dying rank to be seen dead.

        A killed rank's sockets close before it is reaped, so a peer's "connection closed" can arrive
        while the killed rank still reads alive; its pipe may be closed too. Waiting on liveness, not
        only on open pipes, lets the dead rank (the cause) be named first.
        """
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if self.open:
                self.receive(0.1)
            else:
                time.sleep(0.05)
            quiet = [
                r for r, p in enumerate(self.processes) if p.is_alive() and r not in self.errors | self.hung.keys()
            ]
            if not quiet:
                return

    def _phase_of(self, rank: int) -> str:
        if rank in self.steps and rank not in self.done:
            return self.steps[rank]
        if rank not in self.ready:
            return "process-group init"
        pending = [op for op, _ in self.ops if rank not in self.results[op]]
        return pending[0] if pending else "shutdown"

    def _describe_failures(self) -> str:
        """The dead first (the likely cause), then the hung from the one furthest behind, then the rest."""
        abrupt, raised = [], []
        hung = sorted(self.hung.items(), key=lambda item: (item[1][1], item[0]))
        stuck = [hung_text(self._who(rank), step, limit) for rank, (step, _, limit) in hung]
        for rank, process in enumerate(self.processes):
            who = self._who(rank)
            if rank in self.hung:
                continue
            if rank in self.errors:
                text = shorten(self.errors[rank][1])
                exit_text = "" if process.exitcode is None else f", {_proc.describe_exit(process.exitcode)}"
                raised.append(f"{who} raised {text} during {self._phase_of(rank)}{exit_text}")
            elif rank not in self.done and not process.is_alive():
                exit_text = _proc.describe_exit(process.exitcode)
                abrupt.append(f"{who} died with {exit_text} during {self._phase_of(rank)}")
        return "; ".join(abrupt + stuck + raised)

    def _who(self, rank: int) -> str:
        return f"rank {rank} ({self.spec.rank_device(rank)})"

    def _describe_timeout(self, limit: float, which: str | None) -> str:
        never: set[int] = set()
        if self.stage == -1:
            waiting = set(range(self.n)) - self.ready
            where = "during process-group init"
        elif self.stage >= len(self.ops):
            waiting = set(range(self.n)) - self.done
            where = "during shutdown"
        else:
            op, size = self.ops[self.stage]
            waiting = set(range(self.n)) - set(self.results[op])
            never = waiting - self.entered[op]
            where = f"in {op} at {format_size(buffers_for(op, size, self.n).size_bytes)}"
        text = f"timed out after {limit:g} s {where} ({_ranks(waiting)} not responding"
        if never and never != waiting:
            text += f"; {_ranks(never)} never entered {op}"
        return text + (f", {which})" if which else ")")

    def stop(self, clean: bool) -> None:
        if clean:
            for process in self.processes:
                process.join(10.0)
        _proc.stop_all(self.processes)
        for conn in self.open:
            conn.close()


def rank_time_s(payloads: Iterable[Mapping[str, Any]]) -> float:
    """Time per op as nccl-tests reports it by default: each rank's mean, averaged over the ranks.

    nccl-tests' ``-a/--average`` defaults to 1 = AVG ("report average iteration time
    <0=RANK0/1=AVG/2=MIN/3=MAX>", NVIDIA/nccl-tests src/common.cu); thresholds taken from its
    busbw column assume that, so the slowest rank alone would read low against them.
    """
    times = [float(payload["mean_s"]) for payload in payloads]
    return sum(times) / len(times) if times else 0.0


def measurement_of(spec: CollectiveSpec, op: str, size: int, payloads: list[dict[str, Any]]) -> CollectiveMeasurement:
    buffers = buffers_for(op, size, spec.world_size)
    seconds = rank_time_s(payloads)
    algbw, busbw = bandwidth(buffers, seconds) if seconds > 0 else (None, None)
    return CollectiveMeasurement(
        op=op,
        size_bytes=buffers.size_bytes,
        world_size=spec.world_size,
        time_us=seconds * 1e6,
        algbw_gbps=algbw,
        busbw_gbps=busbw,
        correct=all(bool(p["correct"]) for p in payloads),
        backend=spec.backend,
        source=f"torch.distributed/{spec.backend}",
    )


def _progress_line(m: CollectiveMeasurement) -> str:
    figures = f"busbw {m.busbw_gbps:.2f} GB/s, algbw {m.algbw_gbps:.2f} GB/s" if m.busbw_gbps is not None else ""
    check = "" if m.correct else ", WRONG RESULTS"
    return (
        f"collective {m.op} {format_size(m.size_bytes)} x{m.world_size} ({m.backend}): "
        f"{figures}, {m.time_us:.1f} us{check}"
    )


def _error_entry(spec: CollectiveSpec, op: str, size: int, error: str) -> CollectiveMeasurement:
    with contextlib.suppress(ValueError):
        size = buffers_for(op, size, spec.world_size).size_bytes
    return CollectiveMeasurement(
        op,
        size,
        spec.world_size,
        None,
        None,
        None,
        backend=spec.backend,
        error=error,
        source=f"torch.distributed/{spec.backend}",
    )


# --- NCCL logs -------------------------------------------------------------------------------


def read_logs(tmpdir: Path) -> dict[str, str]:
    return {path.name: path.read_text(errors="replace") for path in sorted(tmpdir.glob("nccl.*")) if path.is_file()}


def _last_warn(texts: Iterable[str]) -> str | None:
    warns = [
        line.split("NCCL WARN", 1)[1].strip() for text in texts for line in text.splitlines() if "NCCL WARN" in line
    ]
    return warns[-1] if warns else None


def nccl_audit(logs: Mapping[str, str], env: Mapping[str, str]) -> NcclAudit:
    """The parsed per-rank logs, with the inherited NCCL_* settings recorded in ``env``."""
    texts = [text for text in logs.values() if " NCCL " in text]
    source = f"NCCL_DEBUG_FILE ({len(texts)} rank logs)"
    try:
        if not texts:
            raise ValueError("no NCCL log lines were captured")
        parser: Any = importlib.import_module("pytest_nvlink.sources.evidence.parsers.nccl_log")
        audit: NcclAudit = parser.to_audit(parser.parse_many(texts), source)
    except Exception as exc:  # no parser, or it choked: keep the measurements anyway
        audit = NcclAudit(last_warn=_last_warn(texts), source=f"{source}; not parsed: {exc}")
    audit.env = {**audit.env, **env}
    return audit


# --- the session -------------------------------------------------------------------------------


def plan_ops(spec: CollectiveSpec) -> tuple[list[tuple[str, int]], dict[str, str]]:
    """The (op, size) pairs the ranks will run, and errors for those that cannot run at all."""
    runnable, refused = [], {}
    for op, size in spec.sizes:
        try:
            buffers_for(op, size, spec.world_size)
        except ValueError as exc:
            refused[op] = f"not run: {exc}"
            continue
        if op == "sendrecv" and spec.world_size < 2:
            refused[op] = "not run: sendrecv needs at least 2 ranks"
            continue
        runnable.append((op, size))
    return runnable, refused


def _worker_spec(spec: CollectiveSpec, ops: list[tuple[str, int]], tmpdir: Path) -> WorkerSpec:
    longest = max(spec.timeout_s, spec.op_timeout_s or 0.0, spec.init_timeout_s or 0.0)
    op_limit = spec.op_timeout_s or spec.timeout_s
    return WorkerSpec(
        backend=spec.backend,
        world_size=spec.world_size,
        init_method=(tmpdir / "rendezvous").as_uri(),
        ops=tuple(ops),
        iterations=spec.iterations,
        warmup=spec.warmup,
        pg_timeout_s=longest + 60.0,  # the parent's watchdog always fires first
        devices=spec.devices or tuple(range(spec.world_size)),
        env=tuple(child_env(spec, tmpdir, os.environ).items()),
        init_limit_s=spec.init_timeout_s or spec.timeout_s,
        op_limit_s=op_limit,
        ends_at=time.time() + spec.timeout_s,  # the ranks' watches end their steps by the session limit
    )


def _watch(group: _Group) -> str | None:
    """Drive the group to the end; the failure text, or None when every rank finished."""
    while len(group.done) < group.n:
        group.receive(0.2)
        group.advance()
        problem = group.problem()
        if problem is not None:
            return problem
    group.advance()
    return None


def run_collectives(spec: CollectiveSpec, progress: Progress | None = None) -> CollectiveRun:
    """Run every op of ``spec`` in one process group; always returns one entry per op."""
    ops, refused = plan_ops(spec)
    tmpdir = Path(tempfile.mkdtemp(prefix="pytest-nvlink-"))
    try:
        failure: str | None = None
        measured: dict[str, CollectiveMeasurement] = {}
        pids: list[int] = []
        if ops:
            if progress is not None:
                progress(f"collectives: starting {spec.world_size} {spec.backend} ranks")
            group = _Group(spec, _worker_spec(spec, ops, tmpdir), progress)
            try:
                failure = _watch(group)
            finally:
                group.stop(clean=failure is None)
            measured = {m.op: m for m in group.measurements}
            pids = [p.pid for p in group.processes if p.pid is not None]
        logs = read_logs(tmpdir)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    audit = nccl_audit(logs, recorded_nccl_env(os.environ)) if spec.backend == "nccl" else None
    if failure is not None and audit is not None and audit.last_warn:
        failure += f"; last NCCL WARN: {audit.last_warn}"
    return CollectiveRun(entries_for(spec, measured, refused, failure, audit), audit, logs, pids)


def entries_for(
    spec: CollectiveSpec,
    measured: dict[str, CollectiveMeasurement],
    refused: dict[str, str],
    failure: str | None,
    audit: NcclAudit | None,
) -> list[CollectiveMeasurement]:
    entries, first_failed = [], None
    for op, size in spec.sizes:
        if op in measured:
            entry = measured[op]
        elif op in refused:
            entry = _error_entry(spec, op, size, refused[op])
        elif first_failed is None:
            first_failed = op
            entry = _error_entry(spec, op, size, failure or "no result (the ranks exited early)")
        else:
            entry = _error_entry(spec, op, size, f"not run: {first_failed} failed first: {failure}")
        entry.nvls_available = audit.nvls_available if audit is not None else None
        entries.append(entry)
    return entries
