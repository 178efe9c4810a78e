"""NVSwitch fabric registration and health of one GPU, as NVML reports it (part of the live probe).

Three generations of the call: ``nvmlDeviceGetGpuFabricInfoV`` with the v3 struct (health mask and
summary), the same call with the v2 struct (health mask only; drivers that answer the v3 version with
ArgumentVersionMismatch), and the deprecated ``nvmlDeviceGetGpuFabricInfo`` (state and status only,
all that R535 drivers have). What the driver does not report stays None: a driver too old to report
fabric health leaves ``health_problems`` None, which the checks record as an unknown.
"""

from __future__ import annotations

import ctypes
import types
import uuid as uuid_module
from collections.abc import Iterator
from typing import Any

from pytest_nvlink.model import FabricInfo
from pytest_nvlink.sources.live.fields import (
    FABRIC_HEALTH_FIELDS,
    FABRIC_HEALTH_SUMMARIES,
    FABRIC_INFO_V2,
    FABRIC_INFO_V3,
    FABRIC_STATES,
    nvml_error_name,
    nvml_reason,
)

NO_FABRIC_CALL = "nvidia-ml-py has no GPU fabric call"


class FabricInfoV3(ctypes.Structure):
    """``nvmlGpuFabricInfo_v3_t`` (nvml.h), for bindings older than nvidia-ml-py 12.560 that lack it.

    The layout matches nvidia-ml-py's ``c_nvmlGpuFabricInfo_v3_t``: ``state`` is declared unsigned int
    there and here although nvml.h says unsigned char; on little-endian machines both read the same.
    """

    _fields_ = (
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint32),
        ("healthSummary", ctypes.c_uint8),
    )

    def __init__(self) -> None:
        super().__init__(version=FABRIC_INFO_V3)


def _attempts(nvml: types.ModuleType) -> Iterator[tuple[str, Any]]:
    """(function name, struct instance) to try, newest first; each skipped where the bindings lack it."""
    if hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV"):
        yield "nvmlDeviceGetGpuFabricInfoV", getattr(nvml, "c_nvmlGpuFabricInfo_v3_t", FabricInfoV3)()
        v2 = getattr(nvml, "c_nvmlGpuFabricInfo_v2_t", None) or getattr(nvml, "c_nvmlGpuFabricInfoV_t", None)
        if v2 is not None:
            info = v2()
            info.version = FABRIC_INFO_V2  # the bindings' __init__ sets it; said here for bindings that do not
            yield "nvmlDeviceGetGpuFabricInfoV", info
    struct_v1 = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    if hasattr(nvml, "nvmlDeviceGetGpuFabricInfo") and struct_v1 is not None:
        yield "nvmlDeviceGetGpuFabricInfo", struct_v1()


def read_fabric(nvml: types.ModuleType, handle: Any, key: str, reasons: dict[str, str]) -> FabricInfo | None:
    """The fabric info of one GPU; None with ``reasons[key + ".fabric"]`` when no call answers. GpuIsLost propagates."""
    reason = NO_FABRIC_CALL
    for function, info in _attempts(nvml):
        try:
            getattr(nvml, function)(handle, ctypes.byref(info))  # the wrapper passes the pointer straight to C
        except nvml.NVMLError_NotSupported:
            return FabricInfo(state="not_supported")
        except (nvml.NVMLError_FunctionNotFound, nvml.NVMLError_ArgumentVersionMismatch) as exc:
            reason = nvml_reason(exc)  # an older driver: try the older struct or call
            continue
        except nvml.NVMLError_GpuIsLost:
            raise
        except nvml.NVMLError as exc:
            reason = nvml_reason(exc)
            break
        return fabric_from(nvml, info, key, reasons)
    reasons[f"{key}.fabric"] = reason
    return None


def fabric_from(nvml: types.ModuleType, info: Any, key: str, reasons: dict[str, str]) -> FabricInfo:
    state = FABRIC_STATES.get(int(info.state), f"unknown({info.state})")
    if state != "completed":
        return FabricInfo(state=state)  # status "must be checked only if state returns complete"
    mask = getattr(info, "healthMask", None)
    summary = getattr(info, "healthSummary", None)
    problems = decode_health(mask, summary)
    degraded = _degraded_bandwidth(mask)
    if problems is None:
        reasons[f"{key}.fabric.health"] = (
            "the driver reports no fabric health (nvmlDeviceGetGpuFabricInfo without healthMask: a driver before R550)"
            if mask is None
            else f"healthMask {int(mask):#x} and healthSummary {summary} report no health field (all NOT_SUPPORTED)"
        )
    elif degraded is None:
        reasons[f"{key}.fabric.degraded_bandwidth"] = (
            "the fabric info has no healthMask (nvmlDeviceGetGpuFabricInfo v1, driver before R550)"
            if mask is None
            else f"healthMask {int(mask):#x} does not state DEGRADED_BW"
        )
    return FabricInfo(
        state=state,
        status=nvml_error_name(nvml, int(info.status)),
        clique_id=int(info.cliqueId),
        cluster_uuid=_cluster_uuid(bytes(info.clusterUuid)),
        degraded_bandwidth=degraded,
        health_summary=_summary_name(summary),
        health_problems=problems,
    )


def decode_health(mask: Any, summary: Any = None) -> list[str] | None:
    """Every unhealthy item of a healthMask (and v3 healthSummary); [] healthy; None when nothing is reported."""
    if mask is None:
        return None
    problems: list[str] = []
    reported = False
    for name, shift, width, meanings in FABRIC_HEALTH_FIELDS:
        value = (int(mask) >> shift) & width
        if value == 0:
            continue  # NOT_SUPPORTED
        reported = True
        problem = meanings.get(value, f"{name}:unknown_value_{value}")
        if problem is not None:
            problems.append(problem)
    summary_name = _summary_name(summary)
    if summary_name is not None:
        reported = True
        if summary_name != "healthy":
            problems.append(f"summary:{summary_name}")
    return problems if reported else None


def _summary_name(summary: Any) -> str | None:
    if summary is None or int(summary) == 0:
        return None  # no v3 struct, or NOT_SUPPORTED
    return FABRIC_HEALTH_SUMMARIES.get(int(summary), f"unknown({int(summary)})")


def _degraded_bandwidth(mask: Any) -> bool | None:
    if mask is None:
        return None  # v1 struct: no health mask
    bits = int(mask) & 0x3  # DEGRADED_BW: shift 0, width 0x3
    return {1: True, 2: False}.get(bits)


def _cluster_uuid(raw: bytes) -> str | None:
    """The fabric cluster UUID, or None when all zero (no multi-node NVLink domain)."""
    if len(raw) != 16 or not any(raw):
        return None
    return str(uuid_module.UUID(bytes=raw))
