"""Every step of a rank has a deadline: a step that outlives it is reported and the rank exits.

torch bounds a collective only through its own watchdog (NCCL's: the process group's timeout, 10
minutes by default), and eager NCCL init (``device_id``) has no timeout at all:
``init_process_group(timeout=)`` covers the rendezvous store, not the communicator's creation. A
rank that hangs there, or in a kernel that never finishes, would block the job for good.

So each rank runs a :class:`StepWatch`. The rank announces each step as it starts (process-group
init; per op its start, warmup, data check, barriers, timed iterations; destroy), with a deadline
from the plan. One thread publishes the current step (so a rank that dies leaves its last step
behind, in the parent's pipe or the rendezvous store); another waits for the deadline, and when it
passes calls ``on_hung`` (bounded by :data:`REPORT_S`) and ends the process with
:data:`HUNG_EXIT`. The main thread may be stuck in C code: the watch never needs it.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

HUNG_EXIT = 124  # as timeout(1): a step outlived its deadline and the rank's own watch ended it
REPORT_S = 60.0  # how long on_hung may take (rank 0 writes the results there) before the rank exits anyway
REPORTING = "reporting"  # the step after a failure: bounded too, but nothing is left to report when it hangs


@dataclass(frozen=True)
class Step:
    """One step of a rank: where (``all_gather at 64 KiB``), what (``data check``), its order and limit."""

    where: str
    what: str
    order: int  # its position in the plan: among hung ranks, the one with the lowest is behind the others
    limit_s: float

    @property
    def text(self) -> str:
        return f"{self.where} ({self.what})" if self.what else self.where


Publish = Callable[[Step], None]
OnHung = Callable[[Step], None]


class StepWatch:
    """The current step of this rank, published as it changes and bounded by its deadline.

    ``active=False`` gives a watch that only remembers the step (no threads): for code run outside
    a rank process. ``exit_process`` and ``clock`` are for tests.
    """

    def __init__(
        self,
        publish: Publish,
        on_hung: OnHung,
        *,
        active: bool = True,
        exit_process: Callable[[int], object] = os._exit,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish, self._on_hung, self._exit, self._clock = publish, on_hung, exit_process, clock
        self._cond = threading.Condition()
        self.step: Step | None = None
        self._deadline = math.inf
        self._version = self._published = 0
        self._closed = not active
        if active:
            threading.Thread(target=self._watch, name="pytest-nvlink-step-watch", daemon=True).start()
            threading.Thread(target=self._publish_changes, name="pytest-nvlink-step-publish", daemon=True).start()

    def begin(self, step: Step, deadline: float | None = None) -> None:
        """Enter ``step``; it must end by ``deadline`` (this watch's clock), else within its limit from now."""
        with self._cond:
            self.step = step
            self._deadline = self._clock() + step.limit_s if deadline is None else deadline
            self._version += 1
            self._cond.notify_all()

    def deadline_in(self, limit_s: float) -> float:
        return self._clock() + limit_s

    def settle(self, timeout_s: float = 2.0) -> None:
        """Wait (bounded) until the current step is published: a fault that kills the rank calls this first."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while not self._closed and self._published != self._version and time.monotonic() < end:
                self._cond.wait(0.05)

    def close(self) -> None:
        """No step any more: nothing is watched or published after this."""
        with self._cond:
            self._closed = True
            self._deadline = math.inf
            self._cond.notify_all()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._closed:
                    return
                left = self._deadline - self._clock()
                if left <= 0:
                    step = self.step
                    break
                self._cond.wait(min(left, 1.0))
        if step is not None:
            reporter = threading.Thread(target=self._report, args=(step,), name="pytest-nvlink-hung", daemon=True)
            reporter.start()
            reporter.join(REPORT_S)
        self._exit(HUNG_EXIT)

    def _report(self, step: Step) -> None:
        with contextlib.suppress(Exception):
            self._on_hung(step)

    def _publish_changes(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._published == self._version:
                    self._cond.wait()
                if self._closed:
                    return
                step, version = self.step, self._version
            if step is not None:
                with contextlib.suppress(Exception):
                    self._publish(step)
            with self._cond:
                self._published = version
                self._cond.notify_all()


def hung_text(describe: str, step_text: str, limit_s: float) -> str:
    """``rank 1 (cpu) hung in all_gather at 64 KiB (data check) for over 3 s (...)``: one hung rank, in words."""
    return f"{describe} hung in {step_text} for over {limit_s:g} s (its step watchdog ended it, exit code {HUNG_EXIT})"
