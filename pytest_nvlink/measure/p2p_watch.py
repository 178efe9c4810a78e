"""The P2P campaign's watchdog: each pair has its own deadline, and a hung pair fails alone.

A hung CUDA copy cannot be cancelled: only ending the process that issued it frees the GPU. So the
campaign runs in a spawned child that tells the parent which pair it is measuring and which step
it is in (``("pair", a, b)``, ``("step", a, b, step)``, ``("pair_done", a, b)``, ``("round", i)``).
When a pair outlives its deadline the parent waits for the other pairs of its round to end or to
outlive theirs too, kills the child, records every figure those pairs still owed as failed (naming
the pair and the step it hung in) and starts a fresh child at the next round. A restart budget
and the campaign's overall timeout keep a machine where every pair hangs bounded in time.

This module knows nothing of CUDA or of how a pair is measured; ``p2p`` hands it a way to start a
child at a given round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess

from pytest_nvlink.measure import _proc
from pytest_nvlink.model import P2PMeasurement

Pair = tuple[int, int]
Key = tuple[int, int, str]
Progress = Callable[[str], None]
StartChild = Callable[[int], "tuple[SpawnProcess, Connection]"]  # first round -> (process, read end)


def pair_keys(a: int, b: int) -> list[Key]:
    """(src, dst, kind) of every figure one unordered pair yields, in the order they are measured."""
    keys = [(a, b, "unidirectional"), (a, b, "latency"), (b, a, "unidirectional"), (b, a, "latency")]
    return [*keys, (a, b, "bidirectional")]


@dataclass(frozen=True)
class WatchLimits:
    """How long one pair may take, how often the child may be replaced, and the whole campaign's bound."""

    pair_s: float
    restarts: int
    timeout_s: float


@dataclass
class _Child:
    """What the parent knows of one child: the round it is in, and its unfinished pairs (start, step)."""

    round: int
    active: dict[Pair, list[float | str]] = field(default_factory=dict)

    def overdue(self, now: float, pair_s: float) -> bool:
        """True once some pair is past its deadline and every unfinished pair is past it too."""
        late = [now - float(started) > pair_s for started, _ in self.active.values()]
        return bool(late) and all(late)

    def step(self, pair: Pair) -> str:
        return str(self.active[pair][1])


@dataclass
class Supervisor:
    """Runs the campaign child after child until every round is measured, failed, or out of time."""

    start: StartChild
    rounds: Sequence[Sequence[Pair]]
    limits: WatchLimits
    progress: Progress | None = None
    results: dict[Key, P2PMeasurement] = field(default_factory=dict)
    hung: list[str] = field(default_factory=list)

    def run(self) -> str | None:
        """Measure; returns the reason for whatever is still missing (None when nothing should be)."""
        deadline = time.monotonic() + self.limits.timeout_s
        first, restarts = 0, 0
        while True:
            process, conn = self.start(first)
            child = _Child(first)
            end = "interrupted"
            try:
                end = self._pump(conn, process, child, deadline)
                if end == "done":
                    process.join(10.0)  # let CUDA tear down before anything is killed
            finally:
                _proc.stop_all([process])
                conn.close()
            if end not in ("hung", "died") or (end == "died" and not child.active):
                return self._ending(end, process)
            self._fail_active(child, end, process)
            first = child.round + 1
            if first >= len(self.rounds):
                return None
            if restarts >= self.limits.restarts:
                return (
                    f"not measured: the P2P worker was restarted {restarts} times after hung pairs "
                    f"({', '.join(self.hung)}) and may be restarted no more"
                )
            restarts += 1

    def _ending(self, end: str, process: SpawnProcess) -> str | None:
        if end == "done":
            return None
        if end == "timeout":
            return f"timed out after {self.limits.timeout_s:g} s"
        if end == "died":
            return f"p2p worker died with {_proc.describe_exit(process.exitcode)}"
        return end  # the child's own fatal text, or "interrupted"

    def _fail_active(self, child: _Child, end: str, process: SpawnProcess) -> None:
        """Every figure an unfinished pair still owed fails with the pair, its step and what happened."""
        for (a, b), (_, step) in sorted(child.active.items()):
            if end == "hung":
                what = f"did not finish within its {self.limits.pair_s:.0f} s limit, stuck at {step}"
                then = "its worker was killed and the campaign went on with the next pair"
            else:
                what = f"lost its worker ({_proc.describe_exit(process.exitcode)}) at {step}"
                then = "the campaign went on with the next pair in a fresh worker"
            self.hung.append(f"CUDA devices {a} and {b} at {step}")
            sentence = f"not measured: the pair of CUDA devices {a} and {b} {what}; {then}"
            if self.progress is not None:
                self.progress(f"p2p pair gpu{a}<->gpu{b}: {what}; restarting the worker")
            for src, dst, kind in pair_keys(a, b):
                if (src, dst, kind) not in self.results:
                    unit = "us" if kind == "latency" else "GB/s"
                    self.results[(src, dst, kind)] = P2PMeasurement(src, dst, kind, None, unit, error=sentence)

    def _pump(self, conn: Connection, process: SpawnProcess, child: _Child, deadline: float) -> str:
        """Read the child's messages until it is done, or "timeout", "hung", "died", or a fatal text."""
        while True:
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            if child.overdue(now, self.limits.pair_s):
                return "hung"
            message = _proc.next_message(conn, process, min(deadline, now + 0.2))  # then check the pair again
            if message == "timeout":
                continue
            if isinstance(message, str):
                return message  # "died"
            end = self._handle(message, child)
            if end is not None:
                return end

    def _handle(self, message: tuple[object, ...], child: _Child) -> str | None:
        kind, args = message[0], message[1:]
        if kind == "done":
            return "done"
        if kind == "fatal":
            return f"p2p worker failed: {args[0]}"
        if kind == "progress" and self.progress is not None:
            self.progress(str(args[0]))
        elif kind == "result":
            assert isinstance(args[0], dict)
            measurement = P2PMeasurement(**args[0])
            self.results[(measurement.src, measurement.dst, measurement.kind)] = measurement
        elif kind == "round":
            child.round = int(str(args[0]))
        elif kind == "pair":
            child.active[_pair(args)] = [time.monotonic(), "the start of the pair"]
        elif kind == "step" and _pair(args) in child.active:
            child.active[_pair(args)][1] = str(args[2])
        elif kind == "pair_done":
            child.active.pop(_pair(args), None)
        return None


def _pair(args: tuple[object, ...]) -> Pair:
    return int(str(args[0])), int(str(args[1]))
