"""The NVLinks of one GPU, as NVML reports them (part of the live probe)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pytest_nvlink.model import Node, NvLinkInfo
from pytest_nvlink.sources.live.fields import (
    FI_NVLINK_GET_SPEED,
    FI_NVLINK_LINK_COUNT,
    FI_NVLINK_SPEED_MBPS_COMMON,
    FI_NVLINK_SPEED_MBPS_PER_LINK,
    NVLINK_REMOTE_TYPES,
    NVLINK_VERSION_TO_GENERATION,
    FieldReading,
    bus_id_of,
    nvml_error_name,
    nvml_reason,
    read_fields,
)
from pytest_nvlink.sources.live.link_errors import counter_set, read_link_errors_of

NVML_FEATURE_ENABLED = 1
# Links to try when the driver does not report its link count; older bindings say 18.
FALLBACK_MAX_LINKS = 18


class ProbeCalls(Protocol):
    """What the link reader needs from the probe: guarded NVML calls that record reasons."""

    nvml: Any
    node: Node

    def call(self, key: str, function: str, *args: Any) -> Any: ...

    def fields(self, key: str, handle: Any, requests: list[tuple[int, int]]) -> list[FieldReading] | None: ...


class LinkReader:
    """The NVLinks of one GPU."""

    def __init__(self, prober: ProbeCalls, key: str, handle: Any) -> None:
        self.prober = prober
        self.nvml = prober.nvml
        self.reasons = prober.node.unknown_reasons
        self.key = key
        self.handle = handle
        self.counter_set: str | None = None  # asked once, at the first active link
        self.asked_counter_set = False

    def read(self) -> list[NvLinkInfo]:
        count = self._link_count()
        if count == 0:
            return []
        links = self._scan() if count is None else [self._link(number) for number in range(count)]
        active = [link for link in links if link.active]
        self._speeds(active)
        for link in active:
            self._details(link)
        return links

    def _link_count(self) -> int | None:
        """The driver's own link count; None when it cannot say (then the links are scanned)."""
        try:
            (reading,) = read_fields(self.nvml, self.handle, [(FI_NVLINK_LINK_COUNT, 0)])
        except self.nvml.NVMLError_GpuIsLost:
            raise
        except self.nvml.NVMLError:
            return None
        # Per-field result: the call succeeds even when this field is not supported.
        if reading.ok and isinstance(reading.value, int) and reading.value >= 0:
            return reading.value
        return None

    def _scan(self) -> list[NvLinkInfo]:
        """Fallback when the link count is unknown: try every link id up to the bindings' maximum."""
        maximum = getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", FALLBACK_MAX_LINKS)
        links = []
        for number in range(maximum if isinstance(maximum, int) else FALLBACK_MAX_LINKS):
            try:
                state = self.nvml.nvmlDeviceGetNvLinkState(self.handle, number)
            except self.nvml.NVMLError_NotSupported:
                if number == 0:
                    return []  # the GPU has no NVLink at all
                continue
            except self.nvml.NVMLError_InvalidArgument:
                continue  # beyond this GPU's links: GB200 answers InvalidArgument, not NotSupported
            except self.nvml.NVMLError_GpuIsLost:
                raise
            except self.nvml.NVMLError as exc:
                self.reasons[f"{self.key}.nvlink{number}.active"] = nvml_reason(exc)
                links.append(NvLinkInfo(link=number))
                continue
            links.append(NvLinkInfo(link=number, active=int(state) == NVML_FEATURE_ENABLED))
        return links

    def _link(self, number: int) -> NvLinkInfo:
        state = self.prober.call(f"{self.key}.nvlink{number}.active", "nvmlDeviceGetNvLinkState", self.handle, number)
        return NvLinkInfo(link=number, active=None if state is None else int(state) == NVML_FEATURE_ENABLED)

    def _speeds(self, active: list[NvLinkInfo]) -> None:
        failures = self._read_speeds(active, lambda link: (FI_NVLINK_GET_SPEED, link.link))
        missing = [link for link in active if link.speed_gbps is None]
        # Older drivers lack the scoped field: per-link fields exist for links 0-11 only.
        failures.update(self._read_speeds(missing, _legacy_speed_field))
        for link in active:
            if link.speed_gbps is None:
                reason = failures.get(link.link, "NVML reports no link speed")
                self.reasons[f"{self.key}.nvlink{link.link}.speed_gbps"] = reason

    def _read_speeds(self, links: list[NvLinkInfo], request: Callable[[NvLinkInfo], tuple[int, int]]) -> dict[int, str]:
        """Fill ``speed_gbps`` from one field read; returns why each remaining link has none."""
        if not links:
            return {}
        key = f"{self.key}.nvlink_speed"
        readings = self.prober.fields(key, self.handle, [request(link) for link in links])
        if readings is None:
            reason = self.reasons.pop(key)
            return {link.link: reason for link in links}
        failures = {}
        for link, reading in zip(links, readings, strict=True):
            if reading.ok and reading.value:
                link.speed_gbps = float(reading.value) / 1000.0  # MBps -> GB/s
            else:
                name = nvml_error_name(self.nvml, reading.nvml_return)
                failures[link.link] = f"NVML field {reading.field_id}: {name}"
        return failures

    def _details(self, link: NvLinkInfo) -> None:
        key = f"{self.key}.nvlink{link.link}"
        version = self.prober.call(f"{key}.version", "nvmlDeviceGetNvLinkVersion", self.handle, link.link)
        if version is not None:
            link.version = NVLINK_VERSION_TO_GENERATION.get(int(version))
            if link.version is None:
                self.reasons[f"{key}.version"] = f"NVML returned unknown NVLink version enum {version}"
        remote_type = self.prober.call(
            f"{key}.remote_type", "nvmlDeviceGetNvLinkRemoteDeviceType", self.handle, link.link
        )
        if remote_type is not None:
            link.remote_type = NVLINK_REMOTE_TYPES.get(int(remote_type), "unknown")
        remote = self.prober.call(
            f"{key}.remote_pci_bus_id", "nvmlDeviceGetNvLinkRemotePciInfo", self.handle, link.link
        )
        if remote is not None:
            link.remote_pci_bus_id = bus_id_of(remote)
            if link.remote_pci_bus_id is None:
                self.reasons[f"{key}.remote_pci_bus_id"] = "remote end not visible (empty bus id; usual in VMs)"
        link.errors = self._errors(key, link.link)

    def _errors(self, key: str, number: int) -> dict[str, int] | None:
        if not self.asked_counter_set:
            self.counter_set, self.asked_counter_set = counter_set(self.nvml, self.handle), True
        result = read_link_errors_of(self.nvml, self.handle, number, self.counter_set)
        for name, reason in result.failures.items():
            self.reasons[f"{key}.errors.{name}"] = reason
        if not result.values:
            self.reasons[f"{key}.errors"] = result.reason
            return None
        return result.values


def _legacy_speed_field(link: NvLinkInfo) -> tuple[int, int]:
    if link.link < len(FI_NVLINK_SPEED_MBPS_PER_LINK):
        return FI_NVLINK_SPEED_MBPS_PER_LINK[link.link], 0
    return FI_NVLINK_SPEED_MBPS_COMMON, 0
