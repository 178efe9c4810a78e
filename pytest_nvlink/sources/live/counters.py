"""NVLink and PCIe traffic counters, read before and after a copy to see which wire carried it.

A P2P copy that silently falls back to PCIe still succeeds, only slower; the counter deltas say
so directly: NVLink bytes near the copy size means NVLink, a large PCIe delta means a fallback.
Reading never raises: a counter that cannot be read is None and ``note`` says why.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from pytest_nvlink.model import normalize_pci_bus_id
from pytest_nvlink.sources.live.fields import (
    FI_NVLINK_LINK_COUNT,
    FI_NVLINK_THROUGHPUT_DATA_RX,
    FI_NVLINK_THROUGHPUT_DATA_TX,
    FI_PCIE_COUNT_RX_BYTES,
    FI_PCIE_COUNT_TX_BYTES,
    NVML_ERROR_NO_PERMISSION,
    SCOPE_ALL_LINKS,
    FieldReading,
    import_pynvml,
    nvml_error_name,
    nvml_reason,
    read_fields,
)
from pytest_nvlink.sources.live.link_errors import counter_set, read_link_errors_of

NO_PERMISSION_NOTE = "NVML counters need admin (RmProfilingAdminOnly)"

# (Traffic attribute, field request, bytes per counter unit). NVLink throughput counts KiB.
_COUNTERS: tuple[tuple[str, tuple[int, int], int], ...] = (
    ("nvlink_tx_bytes", (FI_NVLINK_THROUGHPUT_DATA_TX, SCOPE_ALL_LINKS), 1024),
    ("nvlink_rx_bytes", (FI_NVLINK_THROUGHPUT_DATA_RX, SCOPE_ALL_LINKS), 1024),
    ("pcie_tx_bytes", (FI_PCIE_COUNT_TX_BYTES, 0), 1),
    ("pcie_rx_bytes", (FI_PCIE_COUNT_RX_BYTES, 0), 1),
)
_NAMES = tuple(name for name, _, _ in _COUNTERS)


@dataclass(frozen=True)
class Traffic:
    """Cumulative byte counters of one GPU (or a delta of two readings)."""

    nvlink_tx_bytes: int | None = None
    nvlink_rx_bytes: int | None = None
    pcie_tx_bytes: int | None = None
    pcie_rx_bytes: int | None = None
    note: str | None = None
    # (which counter, when NVML last refreshed it: microseconds since 1970) for every value read; the
    # path proof waits until each one is newer than the end of its copies (a stale read undercounts).
    stamps: tuple[tuple[str, int], ...] = ()

    def value(self, name: str) -> int | None:
        result: int | None = getattr(self, name)
        return result


def read_traffic(nvml: types.ModuleType, handle: Any) -> Traffic:
    """Read the four counters of one GPU in a single NVML call."""
    try:
        readings = read_fields(nvml, handle, [request for _, request, _ in _COUNTERS])
    except nvml.NVMLError_NoPermission:
        return Traffic(note=NO_PERMISSION_NOTE)
    except nvml.NVMLError as exc:
        return Traffic(note=f"NVML counters unreadable: {exc}")
    values: dict[str, int | None] = {}
    notes: list[str] = []
    stamps: list[tuple[str, int]] = []
    for (name, request, unit), answer in zip(_COUNTERS, readings, strict=True):
        parts = [answer]
        if not answer.ok and request[1] == SCOPE_ALL_LINKS and answer.nvml_return != NVML_ERROR_NO_PERMISSION:
            parts = _per_link(nvml, handle, request[0]) or parts
        if all(part.ok and isinstance(part.value, int) for part in parts):
            values[name] = sum(int(part.value or 0) for part in parts) * unit
            stamps += [(_label(name, part), part.timestamp_us) for part in parts if part.timestamp_us is not None]
        else:
            values[name] = None
            notes.append(_why(nvml, name, parts[0]))
    return _traffic(values, _join(notes), tuple(stamps))


def _traffic(values: dict[str, int | None], note: str | None, stamps: tuple[tuple[str, int], ...] = ()) -> Traffic:
    nvlink_tx, nvlink_rx, pcie_tx, pcie_rx = (values[name] for name in _NAMES)
    return Traffic(nvlink_tx, nvlink_rx, pcie_tx, pcie_rx, note=note, stamps=stamps)


def _label(name: str, reading: FieldReading) -> str:
    if not name.startswith("nvlink"):
        return f"{name} (NVML field {reading.field_id})"
    scope = "all links" if reading.scope_id == SCOPE_ALL_LINKS else f"link {reading.scope_id}"
    return f"{name} (NVML field {reading.field_id}, {scope})"


def _per_link(nvml: types.ModuleType, handle: Any, field_id: int) -> list[FieldReading] | None:
    """Links 0..N-1, to be summed, for drivers that refuse the all-links scope (scopeId = UINT_MAX).

    N is NVML's own link count (FI_NVLINK_LINK_COUNT); None when that or any link cannot be read.
    """
    try:
        count = read_fields(nvml, handle, [(FI_NVLINK_LINK_COUNT, 0)])[0]
        if not count.ok or not isinstance(count.value, int) or count.value <= 0:
            return None
        links = read_fields(nvml, handle, [(field_id, link) for link in range(count.value)])
    except nvml.NVMLError:
        return None
    if not all(link.ok and isinstance(link.value, int) for link in links):
        return None
    return links


def _why(nvml: types.ModuleType, name: str, reading: FieldReading) -> str:
    if reading.nvml_return == NVML_ERROR_NO_PERMISSION:
        return NO_PERMISSION_NOTE
    return f"{name}: NVML field {reading.field_id} {nvml_error_name(nvml, reading.nvml_return)}"


def _join(notes: Iterable[str | None]) -> str | None:
    unique = list(dict.fromkeys(note for note in notes if note))
    return "; ".join(unique) or None


def traffic_delta(before: Traffic, after: Traffic) -> Traffic:
    """``after - before`` per counter; None where either side is unknown or the counter went back."""
    values: dict[str, int | None] = {}
    notes = [before.note, after.note]
    for name in _NAMES:
        start, end = before.value(name), after.value(name)
        if start is None or end is None:
            values[name] = None
        elif end < start:
            values[name] = None  # the PCIe counters may wrap; a reset looks the same
            notes.append(f"{name}: counter went backwards (wrapped or reset)")
        else:
            values[name] = end - start
    return _traffic(values, _join(notes))


def handle_for(nvml: types.ModuleType, gpu: str) -> Any:
    """An NVML handle for a GPU named by PCI bus id or UUID (with or without ``GPU-``).

    torch reports UUIDs without the ``GPU-`` prefix that NVML requires. Raises NVMLError.
    """
    try:
        bus_id = normalize_pci_bus_id(gpu)
    except ValueError:
        bus_id = None
    if bus_id is not None:
        return nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
    name = gpu.strip()
    if not name.upper().startswith(("GPU-", "MIG-")):
        name = f"GPU-{name}"
    return nvml.nvmlDeviceGetHandleByUUID(name)


class TrafficCounters:
    """Counters of several GPUs, with NVML initialized while the ``with`` block runs.

    ::

        with TrafficCounters([uuid_a, uuid_b]) as counters:
            before = counters.read()
            ...copy...
            after = counters.read()
        delta = traffic_delta(before[uuid_a], after[uuid_a])
    """

    def __init__(self, gpus: Iterable[str], nvml: types.ModuleType | None = None) -> None:
        self.gpus = list(gpus)
        self._nvml = nvml
        self._initialized = False
        self._handles: dict[str, Any] = {}
        self._notes: dict[str, str] = {}

    def __enter__(self) -> TrafficCounters:
        note = self._start()
        if note is not None:
            self._notes = dict.fromkeys(self.gpus, note)
            return self
        nvml = self._nvml
        assert nvml is not None
        for gpu in self.gpus:
            try:
                self._handles[gpu] = handle_for(nvml, gpu)
            except nvml.NVMLError as exc:
                self._notes[gpu] = f"NVML cannot open GPU {gpu}: {exc}"
        return self

    def _start(self) -> str | None:
        if self._nvml is None:
            try:
                self._nvml = import_pynvml()
            except ImportError as exc:
                return f"nvidia-ml-py is not installed ({exc})"
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            return f"NVML unavailable: {exc}"
        self._initialized = True
        return None

    def read(self) -> dict[str, Traffic]:
        """Current counters of every GPU, keyed as the GPUs were named."""
        result = {}
        for gpu in self.gpus:
            handle = self._handles.get(gpu)
            if handle is None or self._nvml is None:
                result[gpu] = Traffic(note=self._notes.get(gpu, "counters not open (use TrafficCounters in a with)"))
            else:
                result[gpu] = read_traffic(self._nvml, handle)
        return result

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._initialized and self._nvml is not None:
            self._initialized = False
            self._handles.clear()
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                return  # nothing left to release


def read_link_errors(
    nvml: types.ModuleType, handle: Any, links: Iterable[int]
) -> tuple[dict[int, dict[str, int]], dict[str, str]]:
    """Every NVLink error counter of the given links: ``({link: {counter: value}}, {"nvlink7.replay": why})``.

    The counters are the set the GPU's architecture has (the DL set up to Hopper, the NVLink 5 set on
    Blackwell and later). A counter that cannot be read is left out and its reason returned; reading
    never raises.
    """
    values: dict[int, dict[str, int]] = {}
    reasons: dict[str, str] = {}
    links = list(links)
    try:
        family = counter_set(nvml, handle) if links else None
    except nvml.NVMLError as exc:  # GpuIsLost: every counter of the GPU is unreadable
        return {link: {} for link in links}, {f"nvlink{link}.errors": nvml_reason(exc) for link in links}
    for link in links:
        try:
            result = read_link_errors_of(nvml, handle, link, family)
        except nvml.NVMLError as exc:
            values[link] = {}
            reasons[f"nvlink{link}.errors"] = nvml_reason(exc)
            continue
        values[link] = result.values
        unread = {**result.unsupported, **result.failures}
        reasons.update({f"nvlink{link}.{name}": why for name, why in unread.items()})
        if not result.values:
            reasons[f"nvlink{link}.errors"] = result.reason
    return values, reasons
