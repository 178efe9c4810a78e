"""How the fake NVML answers the NVLink-C2C field values, from the served node's ``Gpu.c2c``.

A GPU whose node records C2C links (a Grace-Hopper or Grace-Blackwell GPU) answers the count, and each
link's status and speed with the link as ``scopeId``; a GPU without (an x86 host's H100) answers
NotSupported, as the real driver does. A link whose status the node leaves unknown answers
NVML_ERROR_UNKNOWN; an inactive link has no speed ("C2C Link Speed in MBps for active links").
"""

from __future__ import annotations

from fake_nvml_api import C

from pytest_nvlink.model import Gpu

C2C_FIELDS = (
    C["NVML_FI_DEV_C2C_LINK_COUNT"],
    C["NVML_FI_DEV_C2C_LINK_GET_STATUS"],
    C["NVML_FI_DEV_C2C_LINK_GET_MAX_BW"],
)


def c2c_field(gpu: Gpu, field_id: int, scope_id: int) -> tuple[int, int] | int:
    """``(valueType, value)`` of one C2C field, or the NVML error code it answers."""
    c2c = gpu.c2c
    if c2c is None:
        return int(C["NVML_ERROR_NOT_SUPPORTED"])
    if field_id == C["NVML_FI_DEV_C2C_LINK_COUNT"]:
        return 1, int(c2c.link_count if c2c.link_count is not None else len(c2c.links))
    link = next((entry for entry in c2c.links if entry.link == scope_id), None)
    if link is None:
        return int(C["NVML_ERROR_INVALID_ARGUMENT"])
    if field_id == C["NVML_FI_DEV_C2C_LINK_GET_STATUS"]:
        return (1, int(link.active)) if link.active is not None else int(C["NVML_ERROR_UNKNOWN"])
    if not link.active or link.max_bandwidth_gbps is None:
        return int(C["NVML_ERROR_NOT_SUPPORTED"])
    return 1, round(link.max_bandwidth_gbps * 1000)  # GB/s -> MBps
