"""Which rank broke a launched job: every rank's step and heartbeat, kept in the rendezvous store.

A collective that fails on rank 0 says little about the cause ("connection closed by peer", a
timeout): the rank that died or hung is elsewhere. Each rank writes its current step and a
heartbeat counter into the job's rendezvous store (a TCPStore served by rank 0's process, so it
outlives the other ranks). After a failure rank 0 reads them: a rank whose heartbeat stopped is
named as the one that died or froze; a rank that is alive but never reached the step rank 0 was in
is named as the one that hung before it. The dead or hung rank is the cause and is named first.

Only ``torch.distributed``'s default store is used (``distributed_c10d._get_default_store``);
without it nothing is named and the failure reads as before.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

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

    def culprits(self, describe: Callable[[int], str], sleep: Callable[[float], None] = time.sleep) -> str | None:
        """The ranks that broke the job, in one sentence (rank 0, after a failure); None when none stands out."""
        if self.store is None:
            return None
        others = [rank for rank in range(self.world_size) if rank != self.rank]
        first = {rank: self._read("alive", rank) for rank in others}
        sleep(SILENT_AFTER_S)
        second = {rank: self._read("alive", rank) for rank in others}
        mine = self._read("step", self.rank)
        parts = []
        for rank in others:
            step = self._read("step", rank)
            if first[rank] == second[rank]:
                parts.append(f"{describe(rank)} stopped answering (died or froze; its last step: {step or 'none'})")
            elif step != mine:
                parts.append(f"{describe(rank)} is alive but did not reach {mine} (its last step: {step or 'none'})")
        return "; ".join(parts) or None
