"""Which rank broke a launched job: every rank's step and heartbeat, kept in the rendezvous store.

A collective that fails on rank 0 says little about the cause ("connection closed by peer", a
timeout): the rank that died or hung is elsewhere. Each rank writes its current step and a
heartbeat counter into the job's rendezvous store (a TCPStore served by rank 0's process, so it
outlives the other ranks). After a failure rank 0 reads them: a rank whose heartbeat stopped is
named as the one that died or froze; a rank that is alive but never reached the step rank 0 was in
is named as the one that hung before it. A rank whose own step watch gave up (``step_watch``)
leaves the step it hung in and its limit. The dead rank is named first, then the hung ones from the
one furthest behind: they are the likely cause.

Only ``torch.distributed``'s default store is used (``distributed_c10d._get_default_store``);
without it nothing is named and the failure reads as before.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from pytest_nvlink.measure.step_watch import Step, hung_text

PREFIX = "pytest-nvlink"
HEARTBEAT_S = 0.5
SILENT_AFTER_S = 2.5  # a heartbeat unchanged this long: the rank is dead or frozen


def default_store(dist: Any) -> Any | None:
    try:
        from torch.distributed import distributed_c10d  # the ranks' process only

        return distributed_c10d._get_default_store()
    except Exception:
        return None


class RankProgress:
    """This rank's step and heartbeat in the store, and (rank 0) everyone's, read back."""

    def __init__(self, store: Any | None, rank: int, world_size: int) -> None:
        self.store: Any = store
        self.rank, self.world_size = rank, world_size
        self._stop = threading.Event()
        if store is not None:
            self.mark("joined")
            threading.Thread(target=self._beat, name="pytest-nvlink-heartbeat", daemon=True).start()

    def _key(self, what: str, rank: int) -> str:
        return f"{PREFIX}/{what}/{rank}"

    def _beat(self) -> None:
        beats = 0
        while not self._stop.wait(HEARTBEAT_S):
            beats += 1
            with contextlib.suppress(Exception):
                self.store.set(self._key("alive", self.rank), str(beats))

    def mark(self, step: str) -> None:
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.set(self._key("step", self.rank), step)

    def hung(self, step: Step) -> None:
        """This rank's watch gave up on ``step`` (called from the watch, before the rank exits)."""
        if self.store is not None:
            record = {"step": step.text, "order": step.order, "limit_s": step.limit_s}
            with contextlib.suppress(Exception):
                self.store.set(self._key("hung", self.rank), json.dumps(record))

    def _hung_record(self, rank: int) -> tuple[int, str, float] | None:
        try:
            record = json.loads(self._read("hung", rank) or "null")
            return (int(record["order"]), str(record["step"]), float(record["limit_s"])) if record else None
        except (ValueError, TypeError, KeyError):
            return None

    def stop(self) -> None:
        self._stop.set()

    def _read(self, what: str, rank: int) -> str | None:
        key = self._key(what, rank)
        try:
            if not self.store.check([key]):
                return None
            return bytes(self.store.get(key)).decode()
        except Exception:
            return None

    def culprits(
        self, describe: Callable[[int], str], sleep: Callable[[float], None] = time.sleep, own: Step | None = None
    ) -> str | None:
        """The ranks that broke the job, in one sentence (rank 0, after a failure); None when none stands out.

        ``own``: the step rank 0's own watch gave up on, named among the hung ranks.
        """
        if self.store is None:
            return None
        others = [rank for rank in range(self.world_size) if rank != self.rank]
        first = {rank: self._read("alive", rank) for rank in others}
        sleep(SILENT_AFTER_S)  # also lets the other ranks' watches, which fire about now, record their steps
        second = {rank: self._read("alive", rank) for rank in others}
        mine = own.text if own is not None else self._read("step", self.rank)
        dead, behind = [], []
        hung = [(own.order, self.rank, own.text, own.limit_s)] if own is not None else []
        for rank in others:
            step, record = self._read("step", rank), self._hung_record(rank)
            if record is not None:
                hung.append((record[0], rank, record[1], record[2]))
            elif first[rank] == second[rank]:
                dead.append(f"{describe(rank)} stopped answering (died or froze; its last step: {step or 'none'})")
            elif step != mine:
                behind.append(f"{describe(rank)} is alive but did not reach {mine} (its last step: {step or 'none'})")
        stuck = [hung_text(describe(rank), step, limit) for _, rank, step, limit in sorted(hung)]
        return "; ".join(dead + stuck + behind) or None
