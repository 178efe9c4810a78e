"""NVLink-C2C, the host link of Grace-Hopper/Grace-Blackwell GPUs, as NVML's field values report it.

``NVML_FI_DEV_C2C_LINK_COUNT`` says how many C2C links the GPU has; ``_GET_STATUS`` (1 = active) and
``_GET_MAX_BW`` (MBps) are read per link with the link as ``scopeId``, as NCCL's topology code and
UCX read them. A GPU on a PCIe host answers NotSupported: it has no C2C, which is no failure
(``Gpu.c2c`` stays None). Any other error leaves the GPU's C2C state unknown, with the reason.
"""

from __future__ import annotations

import types
from typing import Any

from pytest_nvlink.model.host_link import C2CInfo, C2CLink
from pytest_nvlink.sources.live.fields import (
    FI_C2C_LINK_COUNT,
    FI_C2C_LINK_GET_MAX_BW,
    FI_C2C_LINK_GET_STATUS,
    NVML_ERROR_NOT_SUPPORTED,
    FieldReading,
    nvml_error_name,
    nvml_reason,
    read_fields,
)

MAX_C2C_LINKS = 64  # a count above this is a driver answering junk, not links to read one by one


def read_c2c(nvml: types.ModuleType, handle: Any, key: str, reasons: dict[str, str]) -> C2CInfo | None:
    """The GPU's C2C links, or None: no C2C (NotSupported, or zero links), or unreadable (reason under ``key.c2c``)."""
    count = _read(nvml, handle, [(FI_C2C_LINK_COUNT, 0)], f"{key}.c2c", reasons)
    if count is None:
        return None
    reading = count[0]
    if reading.nvml_return == NVML_ERROR_NOT_SUPPORTED:
        return None
    if not reading.ok:
        reasons[f"{key}.c2c"] = f"NVML field {FI_C2C_LINK_COUNT} (C2C link count): {_name(nvml, reading)}"
        return None
    links = int(reading.value or 0)
    if links == 0:
        return None
    if links > MAX_C2C_LINKS:
        reasons[f"{key}.c2c"] = f"NVML reports {links} C2C links, more than the {MAX_C2C_LINKS} any GPU has"
        return None
    info = C2CInfo(link_count=links, links=[C2CLink(link) for link in range(links)])
    requests = [(field, link) for link in range(links) for field in (FI_C2C_LINK_GET_STATUS, FI_C2C_LINK_GET_MAX_BW)]
    readings = _read(nvml, handle, requests, f"{key}.c2c_links", reasons)
    if readings is None:
        return info
    for link, (status, bandwidth) in zip(info.links, zip(readings[::2], readings[1::2], strict=True), strict=True):
        _fill(nvml, link, (status, bandwidth), f"{key}.c2c{link.link}", reasons)
    return info


def _fill(
    nvml: types.ModuleType,
    link: C2CLink,
    readings: tuple[FieldReading, FieldReading],
    key: str,
    reasons: dict[str, str],
) -> None:
    status, bandwidth = readings
    if status.ok:
        link.active = int(status.value or 0) == 1
    else:
        reasons[f"{key}.active"] = f"NVML field {FI_C2C_LINK_GET_STATUS} (C2C link status): {_name(nvml, status)}"
    if bandwidth.ok and bandwidth.value is not None:
        link.max_bandwidth_gbps = float(bandwidth.value) / 1000.0  # MBps -> GB/s
    elif bandwidth.ok and link.active is not False:
        reasons[f"{key}.max_bandwidth_gbps"] = f"NVML field {FI_C2C_LINK_GET_MAX_BW} (C2C link speed) answered no value"
    elif link.active is not False:  # "for active links": an inactive link has no speed to report
        reasons[f"{key}.max_bandwidth_gbps"] = (
            f"NVML field {FI_C2C_LINK_GET_MAX_BW} (C2C link speed): {_name(nvml, bandwidth)}"
        )


def _read(
    nvml: types.ModuleType, handle: Any, requests: list[tuple[int, int]], key: str, reasons: dict[str, str]
) -> list[FieldReading] | None:
    try:
        return read_fields(nvml, handle, requests)
    except nvml.NVMLError_GpuIsLost:
        raise
    except nvml.NVMLError_NotSupported:
        return None  # the whole call refused: no C2C on this GPU
    except nvml.NVMLError as exc:
        reasons[key] = nvml_reason(exc)
        return None


def _name(nvml: types.ModuleType, reading: FieldReading) -> str:
    return nvml_error_name(nvml, reading.nvml_return)
