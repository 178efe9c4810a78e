"""Host-link copy engines without a GPU, for tests and the device check's ``--simulate``.

:class:`SimulatedHostEngineFactory` answers at a per-GPU rate without sleeping; it can make one GPU
slow, make one step raise, or make it hang forever (a GPU whose copies never complete).
:class:`TimelineHostEngineFactory` runs the real :class:`~pytest_nvlink.measure.host_copy.TorchHostEngine`
(its blocker, retries and per-lane events) on :mod:`pytest_nvlink.measure.cuda_simulated`'s timeline.
Both are picklable: the campaign builds them in its spawned child.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from pytest_nvlink.measure.host_copy import LaneTimes, TorchHostEngine

GB = 1e9


@dataclass
class SimulatedHostEngine:
    cuda_index: int
    nbytes: int
    gbps: float
    bidir_share: float
    hang_in: str | None
    fail_in: str | None
    name: str = "simulated host copies"

    def _lanes(self, step: str, iterations: int, lanes: int, share: float) -> LaneTimes:
        if step == self.hang_in:
            threading.Event().wait()  # a copy that never completes: only the campaign's deadline ends it
        if step == self.fail_in:
            raise RuntimeError(f"simulated copy failure on CUDA device {self.cuda_index} ({step})")
        seconds = iterations * self.nbytes / (self.gbps * share * GB)
        return LaneTimes((seconds,) * lanes, enqueue_s=20e-6 * iterations, block_s=0.002, spin_s=0.002)

    def h2d(self, iterations: int) -> LaneTimes:
        return self._lanes("h2d", iterations, 1, 1.0)

    def d2h(self, iterations: int) -> LaneTimes:
        return self._lanes("d2h", iterations, 1, 1.0)

    def bidirectional(self, iterations: int) -> LaneTimes:
        return self._lanes("bidir", iterations, 2, self.bidir_share)


@dataclass(frozen=True)
class SimulatedHostEngineFactory:
    """``slow``: (cuda_index, GB/s) exceptions; ``hang``/``fail``: (cuda_index, step) where a step hangs or raises."""

    gbps: float = 55.0
    bidir_share: float = 0.9  # each direction's share of its one-way rate while both run
    slow: tuple[tuple[int, float], ...] = ()
    hang: tuple[int, str] | None = None
    fail: tuple[int, str] | None = None

    def __call__(self, cuda_index: int, nbytes: int) -> SimulatedHostEngine:
        rate = dict(self.slow).get(cuda_index, self.gbps)
        hang_in = self.hang[1] if self.hang and self.hang[0] == cuda_index else None
        fail_in = self.fail[1] if self.fail and self.fail[0] == cuda_index else None
        return SimulatedHostEngine(cuda_index, nbytes, rate, self.bidir_share, hang_in, fail_in)


@dataclass(frozen=True)
class TimelineHostEngineFactory:
    """The real torch engine over a simulated CUDA timeline (``bytes_per_s`` per copy lane)."""

    bytes_per_s: float = 55e9

    def __call__(self, cuda_index: int, nbytes: int) -> TorchHostEngine:
        from pytest_nvlink.measure.cuda_simulated import SimulatedGpu, make_torch

        return TorchHostEngine(cuda_index, nbytes, torch_module=make_torch(SimulatedGpu(bytes_per_s=self.bytes_per_s)))
