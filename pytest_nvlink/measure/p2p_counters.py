"""NVLink and PCIe traffic counters read around a P2P copy: the samples, their deltas, and waiting
for a lagging counter to settle before the path proof reads it.

A counter problem never loses a bandwidth figure: it becomes a note on the measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


class TrafficSample(Protocol):
    """Cumulative byte counters of one GPU (``nvml_counters.Traffic`` fits); None = not reported."""

    @property
    def nvlink_tx_bytes(self) -> int | None: ...
    @property
    def nvlink_rx_bytes(self) -> int | None: ...
    @property
    def pcie_tx_bytes(self) -> int | None: ...
    @property
    def pcie_rx_bytes(self) -> int | None: ...
    @property
    def note(self) -> str | None: ...


CounterReader = Callable[[int], TrafficSample]  # CUDA index -> sample
CounterReaderFactory = Callable[[], CounterReader]  # picklable; called in the child


@dataclass(frozen=True)
class NoTraffic:
    """A sample that reports nothing, and why."""

    note: str
    nvlink_tx_bytes: int | None = None
    nvlink_rx_bytes: int | None = None
    pcie_tx_bytes: int | None = None
    pcie_rx_bytes: int | None = None

    @classmethod
    def reader(cls, note: str) -> CounterReader:
        """A reader that answers every GPU with this note."""
        sample = cls(note)
        return lambda gpu: sample


class SettleTiming(Protocol):
    """How long to wait for the counters to agree after a proof copy (``p2p.P2PPlan`` has both)."""

    @property
    def settle_interval_s(self) -> float: ...
    @property
    def settle_max_s(self) -> float: ...


def _read_counters(reader: CounterReader | None, gpus: Sequence[int]) -> list[TrafficSample] | str:
    if reader is None:
        return "no traffic counter reader configured"
    try:
        return [reader(gpu) for gpu in gpus]
    except Exception as exc:  # a counter problem must not lose the bandwidth figure
        return f"counter read failed: {type(exc).__name__}: {exc}"


def _tx_delta(
    before: Sequence[TrafficSample], after: Sequence[TrafficSample], attr: str
) -> tuple[int | None, str | None]:
    total = 0
    for gpu_before, gpu_after in zip(before, after, strict=True):
        old, new = getattr(gpu_before, attr), getattr(gpu_after, attr)
        if old is None or new is None:
            note = gpu_after.note or gpu_before.note
            return None, note or f"{attr.replace('_', ' ')} not reported"
        if new < old:
            return None, f"{attr.replace('_', ' ')} went backwards (wrapped or reset)"
        total += new - old
    return total, None


def _nvlink_total(samples: Sequence[TrafficSample]) -> int | None:
    values = [sample.nvlink_tx_bytes for sample in samples]
    return None if any(value is None for value in values) else sum(v for v in values if v is not None)


def settled_counters(
    reader: CounterReader | None,
    gpus: Sequence[int],
    tolerance_bytes: int,
    plan: SettleTiming,
    sleep: Callable[[float], None] = time.sleep,
) -> list[TrafficSample] | str:
    """Read until two consecutive reads' NVLink totals differ by at most ``tolerance_bytes``.

    A counter that lags (NVML refreshes on its own schedule) reads short right after the copy; one
    that never settles (other traffic on the links) makes the proof unknown rather than a guess.
    """
    previous = _read_counters(reader, gpus)
    if isinstance(previous, str) or _nvlink_total(previous) is None:
        return previous
    waited = 0.0
    while waited < plan.settle_max_s:
        sleep(plan.settle_interval_s)
        waited += plan.settle_interval_s
        current = _read_counters(reader, gpus)
        if isinstance(current, str):
            return current
        old, new = _nvlink_total(previous), _nvlink_total(current)
        if old is not None and new is not None and abs(new - old) <= tolerance_bytes:
            return current
        previous = current
    return f"NVLink counters still moving {plan.settle_max_s:g} s after the proof copy (other traffic on the links?)"


def counter_deltas(
    before: Sequence[TrafficSample] | str, after: Sequence[TrafficSample] | str
) -> tuple[int | None, int | None, str | None]:
    """(NVLink TX bytes, PCIe TX bytes, note) summed over the GPUs, from samples around a copy."""
    if isinstance(before, str) or isinstance(after, str):
        return None, None, before if isinstance(before, str) else str(after)
    nvlink, nvlink_note = _tx_delta(before, after, "nvlink_tx_bytes")
    pcie, pcie_note = _tx_delta(before, after, "pcie_tx_bytes")
    notes = [note for note in (nvlink_note, pcie_note) if note]
    return nvlink, pcie, "; ".join(dict.fromkeys(notes)) or None
