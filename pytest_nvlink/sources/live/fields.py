"""NVML constants we rely on and a safe reader for ``nvmlDeviceGetFieldValues``.

The numeric values are copied from nvidia-ml-py / ``nvml.h`` on purpose instead of being read from
the ``pynvml`` module: some of the module's constants are wrong (``NVML_P2P_CAPS_INDEX_READ`` is
the tuple ``(0,)``) and others change between releases (``NVML_NVLINK_MAX_LINKS`` is 18 or 36).
"""

from __future__ import annotations

import ctypes
import importlib
import types
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_nvlink.model import normalize_pci_bus_id

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4

# Field ids (nvml.h). Scoped fields take the NVLink id as scopeId; UINT_MAX sums all links.
FI_NVLINK_SPEED_MBPS_PER_LINK: tuple[int, ...] = (84, 85, 86, 87, 88, 89, 132, 133, 134, 135, 136, 137)
FI_NVLINK_SPEED_MBPS_COMMON = 90
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB, cumulative
FI_NVLINK_THROUGHPUT_DATA_RX = 139  # KiB, cumulative
FI_NVLINK_GET_SPEED = 164  # MBps, scopeId = link
FI_PCIE_COUNT_TX_BYTES = 197  # bytes, cumulative, may wrap
FI_PCIE_COUNT_RX_BYTES = 198
SCOPE_ALL_LINKS = 0xFFFFFFFF
# NVLink-C2C (Grace <-> GPU), nvml.h: "Number of C2C Links present on the device", "C2C Link Status
# 0=INACTIVE 1=ACTIVE", "C2C Link Speed in MBps for active links"; status and speed take the link as scopeId.
FI_C2C_LINK_COUNT = 170
FI_C2C_LINK_GET_STATUS = 171
FI_C2C_LINK_GET_MAX_BW = 172  # MBps
# NVLink 5 error counters (nvml.h NVML_FI_DEV_NVLINK_COUNT_*, scopeId = link), cumulative since driver load.
FI_NVLINK_COUNT_MALFORMED_PACKET_ERRORS = 206
FI_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS = 207
FI_NVLINK_COUNT_RCV_ERRORS = 208
FI_NVLINK_COUNT_RCV_REMOTE_ERRORS = 209
FI_NVLINK_COUNT_RCV_GENERAL_ERRORS = 210
FI_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS = 211
FI_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS = 214
FI_NVLINK_COUNT_LINK_RECOVERY_EVENTS = 215
FI_NVLINK_COUNT_EFFECTIVE_ERRORS = 219
FI_NVLINK_COUNT_SYMBOL_ERRORS = 221
# model.NVLINK5_ERROR_COUNTER_NAMES key -> field id.
NVLINK5_ERROR_FIELDS: dict[str, int] = {
    "symbol": FI_NVLINK_COUNT_SYMBOL_ERRORS,
    "effective": FI_NVLINK_COUNT_EFFECTIVE_ERRORS,
    "link_recovery": FI_NVLINK_COUNT_LINK_RECOVERY_EVENTS,
    "link_recovery_failed": FI_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS,
    "malformed_packet": FI_NVLINK_COUNT_MALFORMED_PACKET_ERRORS,
    "buffer_overrun": FI_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS,
    "rcv": FI_NVLINK_COUNT_RCV_ERRORS,
    "rcv_remote": FI_NVLINK_COUNT_RCV_REMOTE_ERRORS,
    "rcv_general": FI_NVLINK_COUNT_RCV_GENERAL_ERRORS,
    "local_link_integrity": FI_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS,
}
# nvmlDeviceArchitecture_t: Blackwell and later carry NVLink 5+ and its counters; Kepler..Hopper the DL set.
DEVICE_ARCH_HOPPER = 9
DEVICE_ARCH_BLACKWELL = 10
DEVICE_ARCH_RUBIN = 13
NVLINK5_ARCHITECTURES: frozenset[int] = frozenset({DEVICE_ARCH_BLACKWELL, DEVICE_ARCH_RUBIN})
DL_ARCHITECTURES: frozenset[int] = frozenset(range(2, DEVICE_ARCH_HOPPER + 1))

# nvmlValueType_t -> the member of the c_nvmlValue_t union that holds the value.
_VALUE_MEMBERS: dict[int, str] = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}

# P2P capability indices. Literal ints: pynvml's NVML_P2P_CAPS_INDEX_READ is the tuple (0,).
P2P_INDEX: dict[str, int] = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
P2P_STATUS_NAMES: dict[int, str] = {
    0: "ok",
    1: "chipset_not_supported",
    2: "gpu_not_supported",
    3: "ioh_topology_not_supported",
    4: "disabled_by_regkey",
    5: "not_supported",
    6: "unknown",
}

# nvmlGpuTopologyLevel_t -> nvidia-smi topo -m class.
TOPOLOGY_CLASSES: dict[int, str] = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

# nvmlNvlinkVersion_t is an enum, not the generation: A100 answers 5 (= NVLink 3.1).
NVLINK_VERSION_TO_GENERATION: dict[int, int] = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}

NVLINK_REMOTE_TYPES: dict[int, str] = {0x00: "gpu", 0x01: "ibmnpu", 0x02: "switch", 0xFF: "unknown"}

# nvmlNvLinkErrorCounter_t index -> model.ERROR_COUNTER_NAMES key.
NVLINK_ERROR_COUNTERS: dict[str, int] = {
    "replay": 0,
    "recovery": 1,
    "crc_flit": 2,
    "crc_data": 3,
    "ecc_data": 4,
}

VIRTUALIZATION_MODES: dict[int, str] = {
    0: "none",
    1: "passthrough",
    2: "vgpu",
    3: "host_vgpu",
    4: "host_vsga",
}

FABRIC_STATES: dict[int, str] = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
FABRIC_HEALTH_DEGRADED_BW_SHIFT = 0
FABRIC_HEALTH_DEGRADED_BW_WIDTH = 0x3
FABRIC_HEALTH_DEGRADED_BW_TRUE = 1
FABRIC_HEALTH_DEGRADED_BW_FALSE = 2
# Every field of the fabric healthMask (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*): name, shift, width, and
# value -> problem name (None: healthy). 0 is NOT_SUPPORTED in every field; a value not listed is a problem.
FABRIC_HEALTH_FIELDS: tuple[tuple[str, int, int, dict[int, str | None]], ...] = (
    ("degraded_bandwidth", 0, 0x3, {1: "degraded_bandwidth", 2: None}),
    ("route_recovery", 2, 0x3, {1: "route_recovery", 2: None}),
    ("route_unhealthy", 4, 0x3, {1: "route_unhealthy", 2: None}),
    ("access_timeout_recovery", 6, 0x3, {1: "access_timeout_recovery", 2: None}),
    (
        "incorrect_configuration",
        8,
        0xF,
        {
            1: None,  # NONE
            2: "incorrect_configuration:incorrect_sysguid",
            3: "incorrect_configuration:incorrect_chassis_sn",
            4: "incorrect_configuration:no_partition",
            5: "incorrect_configuration:insufficient_nvlinks",
            6: "incorrect_configuration:incompatible_gpu_fw",
            7: "incorrect_configuration:invalid_location",
            8: "incorrect_configuration:gpu_state_invalid",
        },
    ),
    # PARTITION_ASSIGNED replaced INCORRECT_CONFIGURATION_NO_PARTITION: a GPU in no partition has no NVLink peers.
    ("partition_assigned", 12, 0x3, {1: None, 2: "partition_not_assigned"}),
    # The global fabric manager (multi-node NVLink) lost: routes can no longer be recovered.
    ("gfm_state", 14, 0x3, {1: None, 2: "gfm_disconnected"}),
)
# nvmlGpuFabricInfo_v3_t.healthSummary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*); 0 = NOT_SUPPORTED.
FABRIC_HEALTH_SUMMARIES: dict[int, str] = {1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
FABRIC_INFO_V2 = 0x02000024  # nvmlGpuFabricInfo_v2: NVML_STRUCT_VERSION(GpuFabricInfo, 2), sizeof 0x24
FABRIC_INFO_V3 = 0x03000028  # nvmlGpuFabricInfo_v3, sizeof 0x28 (adds healthSummary)

NVLINK_BW_MODES: dict[int, str] = {0: "full", 1: "off", 2: "min", 3: "half", 4: "3quarter"}


@dataclass(frozen=True)
class FieldReading:
    """One entry of a field-value answer; ``value`` is None unless ``nvml_return`` is success.

    ``timestamp_us`` is the entry's ``timestamp`` (nvml.h: "CPU Timestamp of this value in microseconds
    since 1970"): when the driver last refreshed the value, which can lag the read. None when it is unset.
    """

    field_id: int
    scope_id: int
    nvml_return: int
    value: int | float | None
    timestamp_us: int | None = None

    @property
    def ok(self) -> bool:
        return self.nvml_return == NVML_SUCCESS and self.value is not None


def decode_field_value(entry: Any) -> int | float | None:
    """The value of one ``c_nvmlFieldValue_t``, picked from the union by its valueType."""
    member = _VALUE_MEMBERS.get(int(entry.valueType))
    if member is None:
        return None
    value = getattr(entry.value, member)
    return float(value) if member == "dVal" else int(value)


def read_fields(nvml: types.ModuleType, handle: object, requests: Sequence[tuple[int, int]]) -> list[FieldReading]:
    """Read ``(fieldId, scopeId)`` pairs in one call.

    The call as a whole succeeds when any field could be read, so every entry's own
    ``nvmlReturn`` is checked here. An NVMLError of the call as a whole propagates.
    """
    if not requests:
        return []
    answer = nvml.nvmlDeviceGetFieldValues(handle, [tuple(request) for request in requests])
    readings = []
    for (field_id, scope_id), entry in zip(requests, answer, strict=True):
        code = int(entry.nvmlReturn)
        value = decode_field_value(entry) if code == NVML_SUCCESS else None
        stamp = int(getattr(entry, "timestamp", 0) or 0)
        readings.append(FieldReading(field_id, scope_id, code, value, stamp if stamp > 0 else None))
    return readings


def nvml_error_name(nvml: types.ModuleType, code: int) -> str:
    """``"success"`` or the lower-case NVML error name (``NVML_ERROR_NOT_READY`` -> ``"not_ready"``)."""
    if code == NVML_SUCCESS:
        return "success"
    for name in dir(nvml):
        if name.startswith("NVML_ERROR_") and getattr(nvml, name) == code:
            return name.removeprefix("NVML_ERROR_").lower()
    return f"error_{code}"


def nvml_reason(exc: BaseException) -> str:
    """The unknown-reason text for an NVML exception, e.g. ``"NVML: Not Supported"``."""
    return f"NVML: {exc}"


def text(value: object) -> str:
    """NVML strings are str from nvidia-ml-py's wrappers but bytes in structs and old bindings."""
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return str(value)


def started_nvml(nvml: types.ModuleType | None) -> tuple[types.ModuleType | None, str | None]:
    """``nvml`` (``pynvml`` imported when None) after ``nvmlInit``, and None; else what was had, and why not."""
    if nvml is None:
        try:
            nvml = import_pynvml()
        except ImportError as exc:
            return None, f"nvidia-ml-py is not installed ({exc})"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return nvml, f"NVML unavailable: {exc}"
    return nvml, None


def import_pynvml() -> types.ModuleType:
    """``import pynvml`` (from nvidia-ml-py); ImportError when it is not installed."""
    # The deprecated `pynvml` distribution, if installed next to nvidia-ml-py, makes every
    # `import pynvml` warn; under -W error that would look like a missing library.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pynvml package is deprecated.*", category=FutureWarning)
        return importlib.import_module("pynvml")


def bus_id_of(pci_info: Any) -> str | None:
    """Normalized bus id of an ``nvmlPciInfo_t``; None when it is empty or garbage (VM guests)."""
    for field_name in ("busId", "busIdLegacy"):
        try:
            # nvidia-ml-py's structures decode char[] fields strictly as UTF-8 on attribute access
            # (_PrintableStructure.__getattribute__), so a VM's garbage bus id raises right here.
            raw = getattr(pci_info, field_name, b"")
            return normalize_pci_bus_id(text(raw))
        except (ValueError, UnicodeDecodeError):  # UnicodeDecodeError is a ValueError; said for the reader
            continue
    return None


def raw_bus_id(pci_info: Any) -> bytes:
    """The undecoded ``busId`` bytes of an ``nvmlPciInfo_t`` (for messages; never raises on garbage)."""
    for name, field_type in getattr(type(pci_info), "_fields_", ()):
        if name == "busId":
            offset = getattr(type(pci_info), name).offset
            return bytes(memoryview(pci_info).cast("B")[offset : offset + ctypes.sizeof(field_type)]).split(b"\0")[0]
    return b""
