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


def wall_clock_us() -> int:
    """Now on the clock NVML stamps field values with (microseconds since 1970)."""
    return time.time_ns() // 1000


def _stamps(sample: TrafficSample) -> tuple[tuple[str, int], ...]:
    # Only readers over nvmlDeviceGetFieldValues know when a value was refreshed; others carry none.
    stamps: tuple[tuple[str, int], ...] = getattr(sample, "stamps", ())
    return stamps


def _stale(samples: Sequence[TrafficSample], gpus: Sequence[int], since_us: int | None) -> str | None:
    """The first counter whose last refresh is not newer than ``since_us``, described; None if all are."""
    if since_us is None:
        return None
    for gpu, sample in zip(gpus, samples, strict=True):
        for label, stamp in _stamps(sample):
            if stamp <= since_us:
                return f"{label} (CUDA device {gpu}) still dated {(since_us - stamp) / 1e6:.3f} s before they ended"
    return None


def _agree(old: Sequence[TrafficSample], new: Sequence[TrafficSample], tolerance_bytes: int) -> bool:
    before, after = _nvlink_total(old), _nvlink_total(new)
    return before is not None and after is not None and abs(after - before) <= tolerance_bytes


def settled_counters(
    reader: CounterReader | None,
    gpus: Sequence[int],
    tolerance_bytes: int,
    plan: SettleTiming,
    *,
    since_us: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[TrafficSample] | str:
    """Read until every counter was refreshed after ``since_us`` and two such reads agree.

    ``since_us`` is the end of the copies (the host clock taken after their sync, on NVML's clock:
    microseconds since 1970). NVML refreshes counters on its own schedule and stamps each value with
    the refresh: a read dated before the copies ended misses their bytes, however often it repeats.
    Two consecutive fresh reads must then agree within ``tolerance_bytes`` (the counter has caught
    up). A sample without timestamps can only be judged by agreement. Bounded by ``settle_max_s``: a
    counter that never refreshes, or never settles (other traffic on the links), makes the proof
    unknown rather than a guess.
    """
    previous: Sequence[TrafficSample] | None = None
    waited = 0.0
    while True:
        current = _read_counters(reader, gpus)
        if isinstance(current, str) or _nvlink_total(current) is None:
            return current
        stale = _stale(current, gpus, since_us)
        if stale is None and previous is not None and _agree(previous, current, tolerance_bytes):
            return current
        if waited >= plan.settle_max_s:
            break
        previous = current if stale is None else None
        sleep(plan.settle_interval_s)
        waited += plan.settle_interval_s
    if stale is not None:
        return f"NVML counter not refreshed {plan.settle_max_s:g} s after the copies ended: {stale}"
    return f"NVLink counters still moving {plan.settle_max_s:g} s after the proof copy (other traffic on the links?)"


def unstamped_note(samples: Sequence[TrafficSample] | str, plan: SettleTiming) -> str | None:
    """Why a proof's counters could only be settled by agreement (their reader gives no timestamps)."""
    if isinstance(samples, str) or all(_stamps(sample) for sample in samples):
        return None
    return (
        f"counters read without timestamps: settled on two reads {plan.settle_interval_s:g} s apart agreeing, "
        "which a slower counter refresh would undercount"
    )


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
