"""The part of the fake ``pynvml`` that copies nvidia-ml-py's own definitions.

Constants, the generated ``NVMLError`` hierarchy and the ctypes structures live here, apart from
the fake's behaviour (``fake_nvml_state``), so that ``test_fake_pynvml`` can compare them with the
real module and so that each file stays small. Import them through ``fake_pynvml``.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import string
from typing import Any, ClassVar

# --- constants, copied from nvidia-ml-py 13.615.71 (test_fake_pynvml compares them) -------------

_ERRORS: dict[str, tuple[int, str]] = {
    "UNINITIALIZED": (1, "Uninitialized"),
    "INVALID_ARGUMENT": (2, "Invalid Argument"),
    "NOT_SUPPORTED": (3, "Not Supported"),
    "NO_PERMISSION": (4, "Insufficient Permissions"),
    "ALREADY_INITIALIZED": (5, "Already Initialized"),
    "NOT_FOUND": (6, "Not Found"),
    "INSUFFICIENT_SIZE": (7, "Insufficient Size"),
    "INSUFFICIENT_POWER": (8, "Insufficient External Power"),
    "DRIVER_NOT_LOADED": (9, "Driver Not Loaded"),
    "TIMEOUT": (10, "Timeout"),
    "IRQ_ISSUE": (11, "Interrupt Request Issue"),
    "LIBRARY_NOT_FOUND": (12, "NVML Shared Library Not Found"),
    "FUNCTION_NOT_FOUND": (13, "Function Not Found"),
    "CORRUPTED_INFOROM": (14, "Corrupted infoROM"),
    "GPU_IS_LOST": (15, "GPU is lost"),
    "RESET_REQUIRED": (16, "GPU requires restart"),
    "OPERATING_SYSTEM": (17, "The operating system has blocked the request."),
    "LIB_RM_VERSION_MISMATCH": (18, "RM has detected an NVML/RM version mismatch."),
    "IN_USE": (19, "In Use"),
    "MEMORY": (20, "Insufficient Memory"),
    "NO_DATA": (21, "No Data"),
    "VGPU_ECC_NOT_SUPPORTED": (22, "vGPU ECC Not Supported"),
    "INSUFFICIENT_RESOURCES": (23, "Insufficient Resources"),
    "FREQ_NOT_SUPPORTED": (24, "Frequency Not Supported"),
    "ARGUMENT_VERSION_MISMATCH": (25, "Argument Version Mismatch"),
    "DEPRECATED": (26, "Deprecated"),
    "NOT_READY": (27, "Not Ready"),
    "GPU_NOT_FOUND": (28, "GPU Not Found"),
    "INVALID_STATE": (29, "Invalid State"),
    "RESET_TYPE_NOT_SUPPORTED": (30, "Reset Type Not Supported"),
    "UNKNOWN": (999, "Unknown Error"),
}

CONSTANTS: dict[str, Any] = {
    "NVML_SUCCESS": 0,
    "NVML_FEATURE_DISABLED": 0,
    "NVML_FEATURE_ENABLED": 1,
    "NVML_NVLINK_MAX_LINKS": 36,
    "NVML_NVLINK_ERROR_DL_REPLAY": 0,
    "NVML_NVLINK_ERROR_DL_RECOVERY": 1,
    "NVML_NVLINK_ERROR_DL_CRC_FLIT": 2,
    "NVML_NVLINK_ERROR_DL_CRC_DATA": 3,
    "NVML_NVLINK_ERROR_DL_ECC_DATA": 4,
    "NVML_NVLINK_ERROR_COUNT": 5,
    "NVML_NVLINK_CAP_P2P_SUPPORTED": 0,
    "NVML_NVLINK_DEVICE_TYPE_GPU": 0x00,
    "NVML_NVLINK_DEVICE_TYPE_IBMNPU": 0x01,
    "NVML_NVLINK_DEVICE_TYPE_SWITCH": 0x02,
    "NVML_NVLINK_DEVICE_TYPE_UNKNOWN": 0xFF,
    "NVML_VALUE_TYPE_DOUBLE": 0,
    "NVML_VALUE_TYPE_UNSIGNED_INT": 1,
    "NVML_VALUE_TYPE_UNSIGNED_LONG": 2,
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": 3,
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": 4,
    "NVML_VALUE_TYPE_SIGNED_INT": 5,
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": 6,
    "NVML_VALUE_TYPE_COUNT": 7,
    "NVML_NVLINK_VERSION_INVALID": 0,
    "NVML_NVLINK_VERSION_1_0": 1,
    "NVML_NVLINK_VERSION_2_0": 2,
    "NVML_NVLINK_VERSION_2_2": 3,
    "NVML_NVLINK_VERSION_3_0": 4,
    "NVML_NVLINK_VERSION_3_1": 5,
    "NVML_NVLINK_VERSION_4_0": 6,
    "NVML_NVLINK_VERSION_5_0": 7,
    "NVML_NVLINK_VERSION_6_0": 8,
    "NVML_TOPOLOGY_INTERNAL": 0,
    "NVML_TOPOLOGY_SINGLE": 10,
    "NVML_TOPOLOGY_MULTIPLE": 20,
    "NVML_TOPOLOGY_HOSTBRIDGE": 30,
    "NVML_TOPOLOGY_NODE": 40,
    "NVML_TOPOLOGY_CPU": 40,
    "NVML_TOPOLOGY_SYSTEM": 50,
    "NVML_P2P_CAPS_INDEX_READ": (0,),  # sic: the trailing-comma bug of nvidia-ml-py
    "NVML_P2P_CAPS_INDEX_WRITE": 1,
    "NVML_P2P_CAPS_INDEX_NVLINK": 2,
    "NVML_P2P_CAPS_INDEX_ATOMICS": 3,
    "NVML_P2P_CAPS_INDEX_PROP": 4,
    "NVML_P2P_CAPS_INDEX_PCI": 4,
    "NVML_P2P_CAPS_INDEX_UNKNOWN": 5,
    "NVML_P2P_STATUS_OK": 0,
    "NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED": 1,
    "NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED": 1,
    "NVML_P2P_STATUS_GPU_NOT_SUPPORTED": 2,
    "NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED": 3,
    "NVML_P2P_STATUS_DISABLED_BY_REGKEY": 4,
    "NVML_P2P_STATUS_NOT_SUPPORTED": 5,
    "NVML_P2P_STATUS_UNKNOWN": 6,
    "NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE": 32,
    "NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE": 16,
    "NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT": "%04X:%02X:%02X.0",
    "NVML_DEVICE_PCI_BUS_ID_FMT": "%08X:%02X:%02X.0",
    "NVML_NVLINK_STATE_INACTIVE": 0x0,
    "NVML_NVLINK_STATE_ACTIVE": 0x1,
    "NVML_NVLINK_STATE_SLEEP": 0x2,
    "NVML_DEVICE_MIG_DISABLE": 0x0,
    "NVML_DEVICE_MIG_ENABLE": 0x1,
    "NVML_GPU_VIRTUALIZATION_MODE_NONE": 0,
    "NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH": 1,
    "NVML_GPU_VIRTUALIZATION_MODE_VGPU": 2,
    "NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU": 3,
    "NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA": 4,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L0": 84,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L1": 85,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L2": 86,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L3": 87,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L4": 88,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L5": 89,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON": 90,
    "NVML_FI_DEV_NVLINK_LINK_COUNT": 91,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L6": 132,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L7": 133,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L8": 134,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L9": 135,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L10": 136,
    "NVML_FI_DEV_NVLINK_SPEED_MBPS_L11": 137,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX": 138,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX": 139,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX": 140,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX": 141,
    "NVML_FI_DEV_NVLINK_GET_SPEED": 164,
    "NVML_FI_DEV_NVLINK_GET_STATE": 165,
    "NVML_FI_DEV_NVLINK_GET_VERSION": 166,
    "NVML_FI_DEV_C2C_LINK_COUNT": 170,
    "NVML_FI_DEV_C2C_LINK_GET_STATUS": 171,
    "NVML_FI_DEV_C2C_LINK_GET_MAX_BW": 172,
    "NVML_FI_DEV_PCIE_COUNT_TX_BYTES": 197,
    "NVML_FI_DEV_PCIE_COUNT_RX_BYTES": 198,
    "NVML_GPU_FABRIC_UUID_LEN": 16,
    "NVML_GPU_FABRIC_STATE_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_STATE_NOT_STARTED": 1,
    "NVML_GPU_FABRIC_STATE_IN_PROGRESS": 2,
    "NVML_GPU_FABRIC_STATE_COMPLETED": 3,
    "NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE": 1,
    "NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE": 2,
    "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW": 0,
    "NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW": 0x3,
    "NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE": 1,
    "NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE": 2,
    "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY": 2,
    "NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_RECOVERY": 0x3,
    "NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE": 1,
    "NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE": 2,
    "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY": 4,
    "NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY": 0x3,
    "NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE": 1,
    "NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE": 2,
    "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY": 6,
    "NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_ACCESS_TIMEOUT_RECOVERY": 0x3,
    "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE": 1,
    "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INCORRECT_SYSGUID": 2,
    "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INCORRECT_CHASSIS_SN": 3,
    "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NO_PARTITION": 4,
    "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS": 5,
    "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INCOMPATIBLE_GPU_FW": 6,
    "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INVALID_LOCATION": 7,
    "NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_GPU_STATE_INVALID": 8,
    "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION": 8,
    "NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION": 0xF,
    "NVML_GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_TRUE": 1,
    "NVML_GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_FALSE": 2,
    "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_PARTITION_ASSIGNED": 12,
    "NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_PARTITION_ASSIGNED": 0x3,
    "NVML_GPU_FABRIC_HEALTH_MASK_GFM_STATE_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_HEALTH_MASK_GFM_STATE_CONNECTED": 1,
    "NVML_GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED": 2,
    "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_GFM_STATE": 14,
    "NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_GFM_STATE": 0x3,
    "NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY": 1,
    "NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY": 2,
    "NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY": 3,
    "nvmlGpuFabricInfo_v2": 0x02000024,
    "nvmlGpuFabricInfo_v3": 0x3000028,
    "NVML_DEVICE_ARCH_KEPLER": 2,
    "NVML_DEVICE_ARCH_MAXWELL": 3,
    "NVML_DEVICE_ARCH_PASCAL": 4,
    "NVML_DEVICE_ARCH_VOLTA": 5,
    "NVML_DEVICE_ARCH_TURING": 6,
    "NVML_DEVICE_ARCH_AMPERE": 7,
    "NVML_DEVICE_ARCH_ADA": 8,
    "NVML_DEVICE_ARCH_HOPPER": 9,
    "NVML_DEVICE_ARCH_BLACKWELL": 10,
    "NVML_DEVICE_ARCH_RUBIN": 13,
    "NVML_DEVICE_ARCH_UNKNOWN": 0xFFFFFFFF,
    "NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL": 160,
    "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY": 161,
    "NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY": 162,
    "NVML_FI_DEV_NVLINK_ERROR_DL_CRC": 163,
    "NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS": 206,
    "NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS": 207,
    "NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS": 208,
    "NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS": 209,
    "NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS": 210,
    "NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS": 211,
    "NVML_FI_DEV_NVLINK_COUNT_XMIT_DISCARDS": 212,
    "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS": 213,
    "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS": 214,
    "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS": 215,
    "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS": 219,
    "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER": 220,
    "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS": 221,
    "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER": 222,
    "NVML_GPU_NVLINK_BW_MODE_FULL": 0x0,
    "NVML_GPU_NVLINK_BW_MODE_OFF": 0x1,
    "NVML_GPU_NVLINK_BW_MODE_MIN": 0x2,
    "NVML_GPU_NVLINK_BW_MODE_HALF": 0x3,
    "NVML_GPU_NVLINK_BW_MODE_3QUARTER": 0x4,
    # Event types (nvidia-ml-py "Event structures"; nvmlEventMigConfigChange has no "Type" in its name there).
    "nvmlEventTypeSingleBitEccError": 0x0000000000000001,
    "nvmlEventTypeDoubleBitEccError": 0x0000000000000002,
    "nvmlEventTypePState": 0x0000000000000004,
    "nvmlEventTypeXidCriticalError": 0x0000000000000008,
    "nvmlEventTypeClock": 0x0000000000000010,
    "nvmlEventTypePowerSourceChange": 0x0000000000000080,
    "nvmlEventMigConfigChange": 0x0000000000000100,
    "nvmlEventTypeSingleBitEccErrorStorm": 0x0000000000000200,
    "nvmlEventTypeDramRetirementEvent": 0x0000000000000400,
    "nvmlEventTypeDramRetirementFailure": 0x0000000000000800,
    "nvmlEventTypeNonFatalPoisonError": 0x0000000000001000,
    "nvmlEventTypeFatalPoisonError": 0x0000000000002000,
    "nvmlEventTypeGpuUnavailableError": 0x0000000000004000,
    "nvmlEventTypeGpuRecoveryAction": 0x0000000000008000,
    "nvmlEventTypeNone": 0x0000000000000000,
}
CONSTANTS["nvmlEventTypeAll"] = functools.reduce(
    operator.or_, (value for name, value in CONSTANTS.items() if name.startswith("nvmlEvent")), 0
)
CONSTANTS.update({f"NVML_ERROR_{name}": code for name, (code, _) in _ERRORS.items()})
C = CONSTANTS  # short alias for the code below

ERROR_TEXT: dict[int, str] = {code: text for code, text in _ERRORS.values()}
ERROR_BY_TEXT: dict[str, int] = {text: code for code, text in _ERRORS.values()}


# --- errors: the same shape as pynvml's generated hierarchy ------------------------------------


class NVMLError(Exception):
    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    _errcode_to_string: ClassVar[dict[int, str]] = dict(ERROR_TEXT)
    value: int

    def __new__(cls, value: int) -> NVMLError:
        # Like pynvml: NVMLError(3) builds the generated subclass NVMLError_NotSupported.
        target = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(target)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _error_class_name(constant_suffix: str) -> str:
    return "NVMLError_" + string.capwords(constant_suffix, "_").replace("_", "")


def _make_error_classes() -> dict[str, type[NVMLError]]:
    classes = {}
    for suffix, (code, _) in _ERRORS.items():

        def new(typ: type[NVMLError], *args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(typ, _code)

        cls = type(_error_class_name(suffix), (NVMLError,), {"__new__": new})
        NVMLError._valClassMapping[code] = cls
        classes[cls.__name__] = cls
    return classes


ERROR_CLASSES = _make_error_classes()


def nvmlExceptionClass(nvmlErrorCode: int) -> type[NVMLError]:
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._valClassMapping[nvmlErrorCode]


# --- structures: real ctypes, same layouts as pynvml --------------------------------------------


class _PrintableStructure(ctypes.Structure):
    """Like pynvml's base of every struct: ``char[]`` fields read back as ``str``, decoded strictly.

    Real nvidia-ml-py decodes with ``bytes.decode()`` (UTF-8, strict) on attribute access, so
    a garbage bus id from a VM raises ``UnicodeDecodeError`` when the field is read.
    """

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        return value.decode() if isinstance(value, bytes) else value


class nvmlPciInfo_t(_PrintableStructure):
    _fields_: ClassVar = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


class c_nvmlValue_t(ctypes.Union):
    _fields_: ClassVar = [
        ("dVal", ctypes.c_double),
        ("uiVal", ctypes.c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", ctypes.c_ulonglong),
        ("sllVal", ctypes.c_longlong),
        ("siVal", ctypes.c_int),
        ("usVal", ctypes.c_ushort),
    ]


class c_nvmlFieldValue_t(ctypes.Structure):
    _fields_: ClassVar = [
        ("fieldId", ctypes.c_uint32),
        ("scopeId", ctypes.c_uint32),
        ("timestamp", ctypes.c_int64),
        ("latencyUsec", ctypes.c_int64),
        ("valueType", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_uint),
        ("value", c_nvmlValue_t),
    ]


class c_nvmlGpuFabricInfo_t(ctypes.Structure):
    _fields_: ClassVar = [
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


class c_nvmlGpuFabricInfo_v2_t(ctypes.Structure):
    _fields_: ClassVar = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint32),
    ]

    def __init__(self) -> None:
        super().__init__(version=C["nvmlGpuFabricInfo_v2"])


c_nvmlGpuFabricInfoV_t = c_nvmlGpuFabricInfo_v2_t


class c_nvmlGpuFabricInfo_v3_t(ctypes.Structure):
    _fields_: ClassVar = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint32),
        ("healthSummary", ctypes.c_uint8),
    ]

    def __init__(self) -> None:
        super().__init__(version=C["nvmlGpuFabricInfo_v3"])


# --- events: opaque handles and the data a wait returns, as pynvml declares them -------------------


class struct_c_nvmlDevice_t(ctypes.Structure):
    pass  # opaque, as in pynvml


c_nvmlDevice_t = ctypes.POINTER(struct_c_nvmlDevice_t)


class struct_c_nvmlEventSet_t(ctypes.Structure):
    pass  # opaque, as in pynvml


c_nvmlEventSet_t = ctypes.POINTER(struct_c_nvmlEventSet_t)


class c_nvmlEventData_t(_PrintableStructure):
    _fields_: ClassVar = [
        ("device", c_nvmlDevice_t),
        ("eventType", ctypes.c_ulonglong),
        ("eventData", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]
