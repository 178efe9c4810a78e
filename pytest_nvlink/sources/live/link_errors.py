"""NVLink error counters of one link: the counter set the GPU's architecture has, else the one that answers.

Up to Hopper, NVML counts data-link errors (``nvmlDeviceGetNvLinkErrorCounter``: replay, recovery,
CRC, ECC). nvml.h marks those "unsupported for Blackwell+", where the NVLink 5 counters are field
values (``NVML_FI_DEV_NVLINK_COUNT_*`` with the link as scopeId). The set is picked by
``nvmlDeviceGetArchitecture``; when the architecture is unknown, or its set answers nothing on a link,
the other set is tried, so a GPU is never judged on zeros of counters it does not have.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

from pytest_nvlink.sources.live.fields import (
    DL_ARCHITECTURES,
    NVLINK5_ARCHITECTURES,
    NVLINK5_ERROR_FIELDS,
    NVLINK_ERROR_COUNTERS,
    NVML_ERROR_NOT_SUPPORTED,
    nvml_error_name,
    nvml_reason,
    read_fields,
)

DL = "dl"
NVLINK5 = "nvlink5"


@dataclass
class LinkErrors:
    """What one link's counters answered: values, and why a counter the link has could not be read."""

    values: dict[str, int] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # counter -> reason (an error other than NotSupported)
    unsupported: dict[str, str] = field(default_factory=dict)  # counter -> reason (NotSupported: not on this link)
    reason: str = "no error counter is supported"  # why nothing was read, when nothing was


def counter_set(nvml: types.ModuleType, handle: Any) -> str | None:
    """``"nvlink5"`` (Blackwell and later), ``"dl"`` (earlier), or None when NVML does not say."""
    function = getattr(nvml, "nvmlDeviceGetArchitecture", None)
    if function is None:
        return None
    try:
        architecture = int(function(handle))
    except nvml.NVMLError_GpuIsLost:
        raise
    except nvml.NVMLError:
        return None
    if architecture in NVLINK5_ARCHITECTURES:
        return NVLINK5
    return DL if architecture in DL_ARCHITECTURES else None


def read_link_errors_of(nvml: types.ModuleType, handle: Any, link: int, preferred: str | None) -> LinkErrors:
    """The error counters of one link: the preferred set, else the other one if the preferred answers nothing."""
    order = (preferred, NVLINK5 if preferred == DL else DL) if preferred else (DL, NVLINK5)
    first: LinkErrors | None = None
    for family in order:
        result = _read_dl(nvml, handle, link) if family == DL else _read_nvlink5(nvml, handle, link)
        if result.values:
            return result
        first = first or result
    assert first is not None
    return first


def _read_dl(nvml: types.ModuleType, handle: Any, link: int) -> LinkErrors:
    result = LinkErrors()
    for name, counter in NVLINK_ERROR_COUNTERS.items():
        try:
            result.values[name] = int(nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
        except nvml.NVMLError_GpuIsLost:
            raise
        except nvml.NVMLError_NotSupported as exc:
            result.reason = result.unsupported[name] = nvml_reason(exc)  # not here: leave its key out
        except nvml.NVMLError as exc:
            result.reason = result.failures[name] = nvml_reason(exc)
    return result


def _read_nvlink5(nvml: types.ModuleType, handle: Any, link: int) -> LinkErrors:
    result = LinkErrors()
    try:
        readings = read_fields(nvml, handle, [(field_id, link) for field_id in NVLINK5_ERROR_FIELDS.values()])
    except nvml.NVMLError_GpuIsLost:
        raise
    except nvml.NVMLError as exc:
        result.reason = nvml_reason(exc)
        return result
    for name, reading in zip(NVLINK5_ERROR_FIELDS, readings, strict=True):
        if reading.ok and isinstance(reading.value, int):
            result.values[name] = reading.value
            continue
        why = f"NVML field {reading.field_id}: {nvml_error_name(nvml, reading.nvml_return)}"
        result.reason = why
        unread = result.unsupported if reading.nvml_return == NVML_ERROR_NOT_SUPPORTED else result.failures
        unread[name] = why
    return result
