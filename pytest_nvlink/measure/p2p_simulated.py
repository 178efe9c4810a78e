"""Copy engines and counters without a GPU, for tests and harness-overhead benchmarks.

A :class:`SimulatedCopyEngine` is its own picklable factory: ``run_p2p`` builds it in the spawned
child, where :class:`SimulatedCounters` reads what it copied.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_nvlink.measure.p2p import GB
from pytest_nvlink.measure.p2p_counters import CounterReader, NoTraffic, TrafficSample

_ACTIVE_SIMULATION: list[SimulatedCopyEngine] = []  # the engine built in this (child) process


@dataclass
class SimulatedCopyEngine:
    """A copy engine without a GPU, for tests and harness-overhead benchmarks.

    Copies "run" at ``gbps`` (plus ``latency_us`` each) without sleeping; ``slow_pairs`` gives
    (src, dst, GB/s) exceptions; ``hang_on`` makes the copy from src to dst block forever in step
    ``hang_at`` (``hang_all``: every copy), ``fail_on`` makes it raise, as a broken link might.
    Every copy is counted per source GPU on NVLink, or on PCIe for the pairs in ``via_pcie``;
    :class:`SimulatedCounters` reads those counts.
    """

    gbps: float = 100.0
    latency_us: float = 2.0
    hang_on: tuple[int, int] | None = None
    hang_all: bool = False  # every copy hangs, as on a machine whose P2P is broken everywhere
    hang_at: str = "enqueue"  # or "sync": the step a hung copy stops in
    fail_on: tuple[int, int] | None = None
    peer: bool = True
    name: str = "simulated"
    slow_pairs: tuple[tuple[int, int, float], ...] = ()
    via_pcie: tuple[tuple[int, int], ...] = ()
    bidirectional_sum: bool = True
    sent: dict[int, list[int]] = field(default_factory=dict)  # gpu -> [NVLink TX bytes, PCIe TX bytes]
    step: Callable[[str], None] | None = field(default=None, repr=False, compare=False)  # set by the campaign

    def _at(self, step: str, src: int, dst: int) -> None:
        if self.step is not None:
            self.step(step)
        if step == self.hang_at and (self.hang_all or (src, dst) == self.hang_on):
            threading.Event().wait()  # forever: only killing the process ends it, as with a hung CUDA stream

    def copy(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
        self._at("enqueue", src, dst)
        if (src, dst) == self.fail_on:
            raise RuntimeError(f"simulated failure copying gpu{src}->gpu{dst}")
        counts = self.sent.setdefault(src, [0, 0])
        counts[1 if (src, dst) in self.via_pcie else 0] += nbytes * iterations
        gbps = next((rate for a, b, rate in self.slow_pairs if (a, b) == (src, dst)), self.gbps)
        self._at("sync", src, dst)
        return iterations * (nbytes / (gbps * GB) + self.latency_us * 1e-6)

    def copy_bidirectional(self, a: int, b: int, nbytes: int, iterations: int) -> float:
        # Both directions start together; the union ends with the slower one.
        return max(self.copy(a, b, nbytes, iterations), self.copy(b, a, nbytes, iterations))

    def can_access_peer(self, src: int, dst: int) -> bool | None:
        return self.peer

    def __call__(self) -> SimulatedCopyEngine:
        """A simulated engine is its own (picklable) factory."""
        _ACTIVE_SIMULATION[:] = [self]
        return self


@dataclass(frozen=True)
class SimulatedSample:
    nvlink_tx_bytes: int | None
    nvlink_rx_bytes: int | None
    pcie_tx_bytes: int | None
    pcie_rx_bytes: int | None
    note: str | None = None
    stamps: tuple[tuple[str, int], ...] = ()  # simulated counters are current when read


@dataclass(frozen=True)
class SimulatedCounters:
    """A counter reader factory over what the simulated engine of the same process copied."""

    def __call__(self) -> CounterReader:
        if not _ACTIVE_SIMULATION:
            return NoTraffic.reader("no simulated copy engine in this process")
        engine = _ACTIVE_SIMULATION[-1]

        def read(gpu: int) -> TrafficSample:
            nvlink, pcie = engine.sent.get(gpu, [0, 0])
            now_us = -(-time.time_ns() // 1000)  # rounded up: newer than any moment taken before this read
            return SimulatedSample(nvlink, 0, pcie, 0, stamps=(("simulated counters", now_us),))

        return read
