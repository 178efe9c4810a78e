"""GPU-to-GPU copy bandwidth and latency, pair by pair, each pair bounded by its own deadline.

The timing, scheduling and counter logic talks to a :class:`CopyEngine`; :class:`TorchCopyEngine`
is the thin CUDA implementation (torch is imported only when it is built, in the child process).
:func:`run_p2p` runs the campaign in a spawned child that reports each pair's steps; the parent
(``p2p_watch``) kills the child when a pair outlives its deadline, fails that pair alone and goes
on with the next one in a fresh child, so a hung CUDA call costs one pair, not the campaign.

GPU numbers here are **CUDA indices** (what torch calls ``cuda:N``), not NVML indices.
A bidirectional figure counts both directions (2 x bytes / the union of both directions' windows,
p2pBandwidthLatencyTest's definition) and is stored once per unordered pair, with ``src < dst``;
``P2PMeasurement.bidirectional_sum`` records that it is a sum.

The path proof does not reuse the timed window (a few ms, too short to trust NVML's counter
refresh): after the timing, a proof copy of at least ``proof_seconds`` runs between two counter
reads, and each read is repeated until every counter's NVML timestamp is newer than the end of the
copies before it and two such reads agree (the counters have caught up).
The proof copy is not timed, so it runs unblocked, in chunks of at most ``PROOF_CHUNK`` copies
with a sync between them: queued behind one blocker, a second of copies (~1,400 on H100) would
fill CUDA's launch queue and block the host, which no reference does (nvbandwidth loops 16 times).
"""

from __future__ import annotations

import math
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from typing import Any, Protocol

from pytest_nvlink.config.suites import Measure
from pytest_nvlink.measure import _proc
from pytest_nvlink.measure.cuda_engine import LATENCY_BYTES, CudaCopyEngine
from pytest_nvlink.measure.p2p_counters import (
    CounterReader,
    CounterReaderFactory,
    counter_deltas,
    settled_counters,
    unstamped_note,
    wall_clock_us,
)
from pytest_nvlink.measure.p2p_watch import Supervisor, WatchLimits, pair_keys
from pytest_nvlink.model import P2PMeasurement

GB = 1e9
MIB = 1 << 20
MAX_PROOF_ITERATIONS = 100_000
PROOF_CHUNK = 16  # copies queued at once by the path proof: nvbandwidth's loop count
TorchCopyEngine = CudaCopyEngine  # the name callers know; it prefers cudaMemcpyPeerAsync over copy_
KINDS: tuple[str, ...] = ("unidirectional", "bidirectional", "latency")

Progress = Callable[[str], None]


class CopyEngine(Protocol):
    """Something that copies device buffers and says how long it took (seconds, all iterations)."""

    name: str

    def copy(self, src: int, dst: int, nbytes: int, iterations: int) -> float: ...
    def copy_bidirectional(self, a: int, b: int, nbytes: int, iterations: int) -> float: ...
    def can_access_peer(self, src: int, dst: int) -> bool | None: ...


EngineFactory = Callable[[], CopyEngine]  # picklable; called in the child


@dataclass(frozen=True)
class P2PPlan:
    """What to measure: every ordered pair of ``gpus``, sizes and counts from ``Suite.measure``."""

    gpus: tuple[int, ...]
    nbytes: int
    iterations: int
    warmup: int
    latency_iterations: int
    concurrent: bool = False
    latency_bytes: int = LATENCY_BYTES
    proof_seconds: float = 1.0  # traffic behind the path proof; NVML counters refresh on their own clock
    settle_interval_s: float = 0.05  # between counter re-reads after the proof copy
    settle_max_s: float = 1.0  # give up waiting for a fresh read and two agreeing reads after this long
    # A pair's deadline: this floor (CUDA peer setup, blocker calibration and retries, counter reads)
    # plus its planned bytes at ``pair_min_gbps``, far below any real link: a pair slower than that is hung.
    pair_floor_s: float = 60.0
    pair_min_gbps: float = 1.0
    max_restarts: int = 8  # fresh workers after hung pairs; past it the remaining pairs are not measured

    @classmethod
    def from_measure(cls, gpus: Sequence[int], measure: Measure) -> P2PPlan:
        return cls(
            gpus=tuple(gpus),
            nbytes=measure.p2p_size_mib * MIB,
            iterations=measure.p2p_iterations,
            warmup=measure.p2p_warmup,
            latency_iterations=measure.latency_iterations,
            concurrent=measure.pair_mode == "concurrent",
            pair_floor_s=float(measure.p2p_pair_floor_s),
        )

    def ordered_pair_count(self) -> int:
        return len(self.gpus) * (len(self.gpus) - 1)

    def pair_limit_s(self) -> float:
        """How long one pair may take: both directions, latency, bidirectional, proofs and counter reads."""
        copies = self.iterations + self.warmup
        planned = 4 * self.nbytes * copies + 2 * self.latency_bytes * (self.latency_iterations + self.warmup)
        proofs = 2 * (self.proof_seconds + 2 * (self.settle_max_s + self.settle_interval_s))
        return self.pair_floor_s + planned / (self.pair_min_gbps * GB) + proofs


# --- scheduling ------------------------------------------------------------------------------


def round_robin_rounds(n: int) -> list[list[tuple[int, int]]]:
    """Circle method: every unordered pair of 0..n-1 exactly once, in rounds of disjoint pairs.

    Even n gives n-1 rounds of n/2 pairs; odd n gives n rounds of (n-1)/2 pairs (one GPU sits out).
    """
    if n < 2:
        return []
    slots: list[int | None] = [*range(n), None] if n % 2 else list(range(n))
    size = len(slots)
    rounds = []
    for _ in range(size - 1):
        pairs = [(slots[i], slots[size - 1 - i]) for i in range(size // 2)]
        rounds.append(sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None))
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return rounds


def schedule(plan: P2PPlan) -> list[list[tuple[int, int]]]:
    """Rounds of unordered GPU pairs: concurrent rounds, or one pair per round in sorted order."""
    gpus = plan.gpus
    if plan.concurrent:
        return [[(gpus[a], gpus[b]) for a, b in rnd] for rnd in round_robin_rounds(len(gpus))]
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    return [[pair] for pair in pairs]


def expected_keys(plan: P2PPlan) -> list[tuple[int, int, str]]:
    """(src, dst, kind) of every measurement the campaign should produce, in schedule order."""
    return [key for rnd in schedule(plan) for a, b in rnd for key in pair_keys(a, b)]


# --- steps: which pair and step each campaign thread is in, told to the parent ----------------


class _Steps:
    """The pair and step of each campaign thread, sent to the parent that bounds every pair."""

    def __init__(self, send: Callable[..., None] | None = None) -> None:
        self._send = send
        self._local = threading.local()

    def _tell(self, *message: Any) -> None:
        if self._send is not None:
            self._send(*message)

    def pair(self, a: int, b: int) -> None:
        self._local.pair = (a, b)
        self._tell("pair", a, b)

    def phase(self, what: str) -> None:
        self._local.phase = what
        pair = getattr(self._local, "pair", None)  # None: a pair measured on its own, outside a campaign
        if pair is not None:
            self._tell("step", *pair, what)

    def engine(self, step: str) -> None:
        """The engine's own step inside the current phase ("enqueue", "sync")."""
        pair = getattr(self._local, "pair", None)
        if pair is not None:
            self._tell("step", *pair, f"{getattr(self._local, 'phase', 'copy')}: {step}")

    def pair_done(self, a: int, b: int) -> None:
        self._tell("pair_done", a, b)

    def round(self, index: int) -> None:
        self._tell("round", index)


# --- one pair --------------------------------------------------------------------------------


@dataclass
class _Pair:
    plan: P2PPlan
    engine: CopyEngine
    reader: CounterReader | None
    steps: _Steps = field(default_factory=_Steps)

    def _base(self, src: int, dst: int, kind: str, unit: str) -> P2PMeasurement:
        return P2PMeasurement(src, dst, kind, None, unit, source=self.engine.name)

    def peer(self, src: int, dst: int) -> bool | None:
        try:
            return self.engine.can_access_peer(src, dst)
        except Exception:
            return None

    def unidirectional(self, src: int, dst: int) -> P2PMeasurement:
        plan, result = self.plan, self._base(src, dst, "unidirectional", "GB/s")
        result.can_access_peer = self.peer(src, dst)
        self.steps.phase(f"gpu{src}->gpu{dst} unidirectional copy")
        try:
            self.engine.copy(src, dst, plan.nbytes, plan.warmup)
            seconds = self.engine.copy(src, dst, plan.nbytes, plan.iterations)
        except Exception as exc:
            result.error = f"copy failed: {type(exc).__name__}: {exc}"
            return result
        result.source = self.engine.name  # the route that produced the figure (after any fallback)
        result.value = _gbps(plan.nbytes * plan.iterations, seconds)
        self._prove_path(result, src, dst, seconds / plan.iterations if plan.iterations else 0.0)
        return result

    def _prove_path(self, result: P2PMeasurement, src: int, dst: int, seconds_per_copy: float) -> None:
        """Counters around a proof copy of >= ``proof_seconds``; ``bytes_copied`` is that copy's size."""
        plan = self.plan
        if self.reader is None:
            result.counters_note = "no traffic counter reader configured"
            return
        chunks = proof_chunks(plan.proof_seconds, seconds_per_copy, plan.iterations)
        nbytes = plan.nbytes * sum(chunks)
        copy = getattr(self.engine, "copy_unblocked", None) or self.engine.copy
        try:
            # The timed copies have synced: a read dated before now could still miss their bytes.
            self.steps.phase(f"gpu{src}->gpu{dst} counter read")
            before = settled_counters(self.reader, (src, dst), _tolerance(nbytes), plan, since_us=wall_clock_us())
            self.steps.phase(f"gpu{src}->gpu{dst} proof copy")
            for chunk in chunks:
                copy(src, dst, plan.nbytes, chunk)
            ended = wall_clock_us()  # every chunk has synced
            self.steps.phase(f"gpu{src}->gpu{dst} counter read")
            after = settled_counters(self.reader, (src, dst), _tolerance(nbytes), plan, since_us=ended)
        except Exception as exc:
            result.counters_note = f"proof copy failed: {type(exc).__name__}: {exc}"
            return
        result.bytes_copied = nbytes
        result.nvlink_bytes, result.pcie_bytes, note = counter_deltas(before, after)
        notes = [note, unstamped_note(before, plan) or unstamped_note(after, plan)]
        result.counters_note = "; ".join(text for text in notes if text) or None

    def bidirectional(self, a: int, b: int) -> P2PMeasurement:
        plan, result = self.plan, self._base(a, b, "bidirectional", "GB/s")
        result.can_access_peer = self.peer(a, b)
        self.steps.phase(f"gpu{a}<->gpu{b} bidirectional copy")
        try:
            self.engine.copy_bidirectional(a, b, plan.nbytes, plan.warmup)
            seconds = self.engine.copy_bidirectional(a, b, plan.nbytes, plan.iterations)
        except Exception as exc:
            result.error = f"copy failed: {type(exc).__name__}: {exc}"
            return result
        result.source = self.engine.name
        result.bytes_copied = 2 * plan.nbytes * plan.iterations
        result.value = _gbps(result.bytes_copied, seconds)
        result.bidirectional_sum = bool(getattr(self.engine, "bidirectional_sum", True))
        return result

    def latency(self, src: int, dst: int) -> P2PMeasurement:
        plan, result = self.plan, self._base(src, dst, "latency", "us")
        result.can_access_peer = self.peer(src, dst)
        self.steps.phase(f"gpu{src}->gpu{dst} latency copy")
        try:
            self.engine.copy(src, dst, plan.latency_bytes, min(plan.warmup, plan.latency_iterations))
            seconds = self.engine.copy(src, dst, plan.latency_bytes, plan.latency_iterations)
        except Exception as exc:
            result.error = f"copy failed: {type(exc).__name__}: {exc}"
            return result
        result.source = self.engine.name
        result.bytes_copied = plan.latency_bytes * plan.latency_iterations
        result.value = seconds / plan.latency_iterations * 1e6
        return result


def proof_chunks(proof_seconds: float, seconds_per_copy: float, iterations: int) -> list[int]:
    """Copies per chunk for a proof of at least ``proof_seconds`` (at least ``iterations`` copies)."""
    wanted = math.ceil(proof_seconds / seconds_per_copy) if seconds_per_copy > 0 else iterations
    total = min(max(iterations, wanted), MAX_PROOF_ITERATIONS)
    full, rest = divmod(total, PROOF_CHUNK)
    return [PROOF_CHUNK] * full + ([rest] if rest else [])


def _tolerance(nbytes: int) -> int:
    """Two counter reads "agree" within 1 % of the proof copy (at least 1 MiB of background traffic)."""
    return max(MIB, nbytes // 100)


def _gbps(nbytes: int, seconds: float) -> float | None:
    return nbytes / seconds / GB if seconds > 0 else None


# --- the campaign ----------------------------------------------------------------------------


@dataclass
class _Reporter:
    total: int
    progress: Progress | None
    emit: Callable[[P2PMeasurement], None] | None
    done: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pair(self, uni: P2PMeasurement) -> None:
        with self.lock:
            self.done += 1
            figure = f"{uni.value:.1f} GB/s" if uni.value is not None else f"error: {uni.error}"
            line = f"p2p pair {self.done}/{self.total} gpu{uni.src}->gpu{uni.dst}: {figure}"
            if self.progress is not None:
                self.progress(line)

    def result(self, measurement: P2PMeasurement) -> None:
        if self.emit is not None:
            with self.lock:
                self.emit(measurement)


def _measure_pair(pair: _Pair, reporter: _Reporter, a: int, b: int) -> list[P2PMeasurement]:
    pair.steps.pair(a, b)
    results = []
    for src, dst in ((a, b), (b, a)):
        uni = pair.unidirectional(src, dst)
        reporter.result(uni)
        reporter.pair(uni)
        lat = pair.latency(src, dst)
        reporter.result(lat)
        results += [uni, lat]
    bidi = pair.bidirectional(a, b)
    reporter.result(bidi)
    pair.steps.pair_done(a, b)
    return [*results, bidi]


def run_campaign(
    plan: P2PPlan,
    engine: CopyEngine,
    reader: CounterReader | None = None,
    progress: Progress | None = None,
    emit: Callable[[P2PMeasurement], None] | None = None,
    *,
    first_round: int = 0,
    send: Callable[..., None] | None = None,
) -> list[P2PMeasurement]:
    """Measure every pair in this process, from ``first_round`` on; concurrent rounds run their pairs in threads.

    ``emit`` receives each measurement as soon as it exists (the child streams them this way);
    ``send`` is told each round, pair and step (the parent bounds every pair by them).
    """
    steps = _Steps(send)
    if hasattr(engine, "step"):  # an engine that says when it enqueues and when it waits
        setattr(engine, "step", steps.engine)  # noqa: B010 - optional, not part of CopyEngine
    pair = _Pair(plan, engine, reader, steps)
    rounds = schedule(plan)
    reporter = _Reporter(plan.ordered_pair_count(), progress, emit)
    reporter.done = sum(2 * len(rnd) for rnd in rounds[:first_round])  # "pair k/N" counts on after a restart
    results: list[P2PMeasurement] = []
    for index in range(first_round, len(rounds)):
        rnd = rounds[index]
        steps.round(index)
        if len(rnd) == 1:
            results += _measure_pair(pair, reporter, *rnd[0])
            continue
        with ThreadPoolExecutor(max_workers=len(rnd), thread_name_prefix="p2p") as pool:
            futures = [pool.submit(_measure_pair, pair, reporter, a, b) for a, b in rnd]
            for future in futures:
                results += future.result()
    return results


# --- the child process; ``p2p_watch`` bounds each pair from the parent ---------------------------


def p2p_child(
    conn: Connection,
    plan: P2PPlan,
    engine_factory: EngineFactory,
    counter_factory: CounterReaderFactory | None,
    first_round: int = 0,
) -> None:
    """Child entry point: build the engine and reader here, stream results back as plain dicts."""
    lock = threading.Lock()

    def send(*message: Any) -> None:
        with lock:
            conn.send(message)

    try:
        engine = engine_factory()
        reader = counter_factory() if counter_factory is not None else None
        run_campaign(
            plan,
            engine,
            reader,
            lambda line: send("progress", line),
            lambda m: send("result", asdict(m)),
            first_round=first_round,
            send=send,
        )
    except BaseException as exc:
        send("fatal", f"{type(exc).__name__}: {exc}", traceback.format_exc())
        raise
    send("done")
    conn.close()


def run_p2p(
    plan: P2PPlan,
    engine_factory: EngineFactory,
    *,
    timeout_s: float,
    counter_factory: CounterReaderFactory | None = None,
    progress: Progress | None = None,
) -> list[P2PMeasurement]:
    """Run the campaign in spawned children, each pair bounded by ``plan.pair_limit_s()`` and the whole
    by ``timeout_s``; a hung pair fails alone and a fresh child goes on with the next round."""

    def start(first_round: int) -> tuple[SpawnProcess, Connection]:
        args = (plan, engine_factory, counter_factory, first_round)
        return _proc.start_child(p2p_child, args, name="pytest-nvlink-p2p")

    limits = WatchLimits(plan.pair_limit_s(), plan.max_restarts, timeout_s)
    supervisor = Supervisor(start, schedule(plan), limits, progress)
    problem = supervisor.run()
    return _complete(plan, supervisor.results, problem or "not measured")


def _complete(plan: P2PPlan, results: dict[tuple[int, int, str], P2PMeasurement], problem: str) -> list[P2PMeasurement]:
    """Every expected measurement, in schedule order; missing ones carry ``problem`` as error."""
    ordered = []
    for src, dst, kind in expected_keys(plan):
        found = results.get((src, dst, kind))
        if found is None:
            unit = "us" if kind == "latency" else "GB/s"
            found = P2PMeasurement(src, dst, kind, None, unit, error=problem)
        ordered.append(found)
    return ordered
