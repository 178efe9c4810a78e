"""A GPU's MIG mode as NVML reports it (part of the live probe).

``nvmlDeviceGetMigMode(handle)`` answers ``[current, pending]`` (a list, not a tuple: nvidia-ml-py
builds it from two ``c_uint`` outputs), each ``NVML_DEVICE_MIG_ENABLE`` or ``NVML_DEVICE_MIG_DISABLE``;
the pending mode is what applies after the next GPU reset. A GPU without MIG (anything before
Ampere, the L40S) answers NotSupported: it cannot be in MIG mode, so that reads as disabled.
"""

from __future__ import annotations

import types
from typing import Any

from pytest_nvlink.model import MIG_DISABLED, MIG_ENABLED
from pytest_nvlink.sources.live.fields import nvml_reason

# nvml.h / nvidia-ml-py: NVML_DEVICE_MIG_DISABLE = 0x0, NVML_DEVICE_MIG_ENABLE = 0x1.
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
MIG_MODES: dict[int, str] = {NVML_DEVICE_MIG_DISABLE: MIG_DISABLED, NVML_DEVICE_MIG_ENABLE: MIG_ENABLED}
NO_MIG_NOTE = "the GPU has no MIG (nvmlDeviceGetMigMode: Not Supported), so it cannot be in MIG mode: taken as disabled"


def read_mig_mode(
    nvml: types.ModuleType, handle: Any, key: str, reasons: dict[str, str]
) -> tuple[str | None, str | None]:
    """``(current, pending)`` MIG mode of one GPU; None with a reason under ``key`` where NVML cannot tell.

    GpuIsLost propagates, as from every other probe call, so that the GPU is reported lost.
    """
    function = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if function is None:
        reasons[key] = "nvidia-ml-py has no nvmlDeviceGetMigMode"
        return None, None
    try:
        answer = function(handle)
    except nvml.NVMLError_GpuIsLost:
        raise
    except nvml.NVMLError_NotSupported:
        reasons[key] = NO_MIG_NOTE  # a note on how the fact was decided, not an unknown
        return MIG_DISABLED, MIG_DISABLED
    except nvml.NVMLError as exc:
        reasons[key] = nvml_reason(exc)
        return None, None
    try:
        current, pending = (MIG_MODES.get(int(value)) for value in answer)
    except (TypeError, ValueError) as exc:
        reasons[key] = f"nvmlDeviceGetMigMode answered {answer!r}, not [current, pending]: {exc}"
        return None, None
    if current is None or pending is None:
        reasons[key] = f"nvmlDeviceGetMigMode answered unknown mode(s) {list(answer)!r}"
        return None, None
    return current, pending
