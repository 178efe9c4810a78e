"""A faithful fake of nvidia-ml-py's ``pynvml`` module, answering from a :class:`Node`.

It mirrors the real module where it matters to callers, including its traps:

* the same function names and parameter names, constants with the same values (including the
  tuple ``NVML_P2P_CAPS_INDEX_READ = (0,)``, on which ``nvmlDeviceGetP2PStatus`` raises
  ``ctypes.ArgumentError`` exactly like the real ctypes call);
* an ``NVMLError`` whose constructor maps a code to a generated subclass
  (``NVMLError(3)`` is an ``NVMLError_NotSupported``), and ``nvmlExceptionClass``;
* calls before ``nvmlInit`` (or after the last ``nvmlShutdown``) raise ``NVMLError_Uninitialized``;
* wrappers return ``str`` but struct ``char[]`` fields (``busId``) are ``bytes``; structs are real
  ctypes structures; fabric info must be passed as ``ctypes.byref(struct)``;
* ``nvmlDeviceGetFieldValues`` reports an unsupported field in that entry's ``nvmlReturn``
  instead of raising;
* NVLink ids past a GPU's real links answer ``InvalidArgument`` (the GB200 pitfall), and a GPU
  without NVLink answers ``NotSupported``.

A fact that is ``None`` in the node raises the NVML error named by the node's unknown reason for
it (``"NVML: Function Not Found"`` raises ``NVMLError_FunctionNotFound``), else a sensible default,
so that snapshot -> fake -> probe reproduces the snapshot.
"""

from __future__ import annotations

import ctypes
import functools
import string
import time
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pytest_nvlink.model import Gpu, Node, NvLinkInfo, normalize_pci_bus_id, nvlink_count_of_path

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
    "nvmlGpuFabricInfo_v2": 0x02000024,
    "NVML_GPU_NVLINK_BW_MODE_FULL": 0x0,
    "NVML_GPU_NVLINK_BW_MODE_OFF": 0x1,
    "NVML_GPU_NVLINK_BW_MODE_MIN": 0x2,
    "NVML_GPU_NVLINK_BW_MODE_HALF": 0x3,
    "NVML_GPU_NVLINK_BW_MODE_3QUARTER": 0x4,
}
CONSTANTS.update({f"NVML_ERROR_{name}": code for name, (code, _) in _ERRORS.items()})
C = CONSTANTS  # short alias for the code below

_ERROR_TEXT: dict[int, str] = {code: text for code, text in _ERRORS.values()}
_ERROR_BY_TEXT: dict[str, int] = {text: code for code, text in _ERRORS.values()}
_SCOPE_ALL = 0xFFFFFFFF
_SPEED_FIELDS: tuple[int, ...] = (84, 85, 86, 87, 88, 89, 132, 133, 134, 135, 136, 137)
_P2P_CAPABILITY_BY_INDEX: tuple[str, ...] = ("read", "write", "nvlink", "atomics", "read")  # PCI: like read
_P2P_CODES = {
    "ok": 0,
    "chipset_not_supported": 1,
    "gpu_not_supported": 2,
    "ioh_topology_not_supported": 3,
    "disabled_by_regkey": 4,
    "not_supported": 5,
    "unknown": 6,
}
_TOPOLOGY_LEVELS = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
_VIRTUALIZATION = {"none": 0, "passthrough": 1, "vgpu": 2, "host_vgpu": 3, "host_vsga": 4}
_GENERATION_TO_VERSION_ENUM = {1: 1, 2: 2, 3: 4, 4: 6, 5: 7, 6: 8}
_REMOTE_TYPES = {"gpu": 0x00, "ibmnpu": 0x01, "switch": 0x02, "unknown": 0xFF}
_ERROR_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data", "ecc_data")
_FABRIC_STATES = {"not_supported": 0, "not_started": 1, "in_progress": 2, "completed": 3}
_BW_MODES = {"full": 0, "off": 1, "min": 2, "half": 3, "3quarter": 4}
_H100_SXM_DEVICE_ID = 0x233010DE
_NVSWITCH_DEVICE_ID = 0x22A310DE

# --- errors: the same shape as pynvml's generated hierarchy ------------------------------------


class NVMLError(Exception):
    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    _errcode_to_string: ClassVar[dict[int, str]] = dict(_ERROR_TEXT)
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


class nvmlPciInfo_t(ctypes.Structure):
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

_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _raise(code: int) -> Any:
    raise NVMLError(code)


class _Handle:
    """An opaque device handle, like pynvml's ``c_nvmlDevice_t``."""

    __slots__ = ("_owner", "_position")

    def __init__(self, owner: FakeNvml, position: int) -> None:
        self._owner = owner
        self._position = position

    def __repr__(self) -> str:
        return "<fake_pynvml.c_nvmlDevice_t>"


@dataclass
class _Traffic:
    nvlink_tx: int = 0  # bytes; reported in KiB like the real counters
    nvlink_rx: int = 0
    pcie_tx: int = 0
    pcie_rx: int = 0


class _FieldFailure(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# Functions that work without nvmlInit.
_NO_INIT = {"nvmlInit", "nvmlInitWithFlags", "nvmlExceptionClass", "nvmlErrorString"}
# Functions that still answer for a lost GPU (the probe needs the bus id to name it).
_LOST_OK = {"nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v3"}


class FakeNvml:
    """The state behind one fake module. Public ``nvml*`` methods become the module's functions."""

    def __init__(
        self,
        node: Node | None,
        *,
        nvml_order: Iterable[int] | None = None,
        max_links: int = 36,
        missing_functions: Iterable[str] = (),
        library_missing: bool = False,
        driver_not_loaded: bool = False,
        unsupported_fields: Iterable[int] = (),
        lost_gpus: Iterable[int] = (),
        counters_no_permission: bool = False,
        pcie_levels: Mapping[tuple[int, int], str] | None = None,
        pcie_counter_bits: int | None = None,
        remote_bus_id_junk: bytes = b"",
    ) -> None:
        self.node = node if node is not None else Node(source="fake")
        by_index = {gpu.index: gpu for gpu in self.node.gpus}
        order = list(nvml_order) if nvml_order is not None else sorted(by_index)
        if sorted(order) != sorted(by_index):
            raise ValueError(f"nvml_order {order} is not a permutation of the GPU indices {sorted(by_index)}")
        self.gpus: list[Gpu] = [by_index[index] for index in order]
        self.max_links = max_links
        self.missing_functions = set(missing_functions)
        self.library_missing = library_missing
        self.driver_not_loaded = driver_not_loaded
        self.unsupported_fields = set(unsupported_fields)
        # A GPU the node marks unusable is one NVML reports as lost.
        self.lost_gpus = set(lost_gpus) | {gpu.index for gpu in self.gpus if gpu.problem}
        self.counters_no_permission = counters_no_permission
        self.pcie_levels = dict(pcie_levels or {})
        self.pcie_counter_bits = pcie_counter_bits
        self.remote_bus_id_junk = remote_bus_id_junk
        self.init_count = 0
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.injected: dict[tuple[str, int | None], int] = {}
        self.traffic: dict[int, _Traffic] = {gpu.index: _Traffic() for gpu in self.gpus}
        self._handles = [_Handle(self, position) for position in range(len(self.gpus))]

    # --- test controls ----------------------------------------------------------------------

    def inject_error(self, function: str, code: int, *, gpu: int | None = None) -> None:
        """Make ``function`` raise NVML error ``code`` (for NVML index ``gpu``, or for all)."""
        self.injected[(function, gpu)] = code

    def add_traffic(
        self,
        uuid: str,
        *,
        nvlink_bytes: int = 0,
        pcie_bytes: int = 0,
        nvlink_rx_bytes: int = 0,
        pcie_rx_bytes: int = 0,
    ) -> None:
        """Advance the GPU's cumulative counters: ``*_bytes`` are sent (TX), ``*_rx_bytes`` received."""
        traffic = self.traffic[self._gpu_by_uuid(uuid).index]
        traffic.nvlink_tx += nvlink_bytes
        traffic.pcie_tx += pcie_bytes
        traffic.nvlink_rx += nvlink_rx_bytes
        traffic.pcie_rx += pcie_rx_bytes

    def add_copy(self, src_uuid: str, dst_uuid: str, nbytes: int, *, via: str = "nvlink") -> None:
        """Account one copy of ``nbytes`` from src to dst over ``via`` ("nvlink" or "pcie")."""
        if via not in ("nvlink", "pcie"):
            raise ValueError(f"via must be 'nvlink' or 'pcie', not {via!r}")
        self.add_traffic(src_uuid, **{f"{via}_bytes": nbytes})
        self.add_traffic(dst_uuid, **{f"{via}_rx_bytes": nbytes})

    def calls_to(self, function: str) -> list[tuple[Any, ...]]:
        return [args for name, args in self.calls if name == function]

    # --- plumbing ---------------------------------------------------------------------------

    def wrap(self, name: str) -> Any:
        method = getattr(self, name)

        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args))
            if name not in _NO_INIT and self.init_count == 0:
                raise NVMLError(C["NVML_ERROR_UNINITIALIZED"])
            if name in self.missing_functions:
                raise NVMLError(C["NVML_ERROR_FUNCTION_NOT_FOUND"])
            position = self._position_of(name, args)
            code = self.injected.get((name, position), self.injected.get((name, None)))
            if code is not None:
                raise NVMLError(code)
            if position is not None and name not in _LOST_OK and self._lost(position):
                raise NVMLError(C["NVML_ERROR_GPU_IS_LOST"])
            return method(*args, **kwargs)

        return wrapper

    def _position_of(self, name: str, args: tuple[Any, ...]) -> int | None:
        if name == "nvmlDeviceGetHandleByIndex" and args and isinstance(args[0], int):
            return args[0]
        first = args[0] if args else None
        return first._position if isinstance(first, _Handle) else None

    def _lost(self, position: int) -> bool:
        return 0 <= position < len(self.gpus) and self.gpus[position].index in self.lost_gpus

    def _dev(self, handle: Any) -> Gpu:
        if not isinstance(handle, _Handle) or handle._owner is not self:
            raise ctypes.ArgumentError("argument 1: TypeError: Don't know how to convert parameter 1")
        return self.gpus[handle._position]

    def _gpu_by_uuid(self, uuid: str) -> Gpu:
        wanted = uuid.lower().removeprefix("gpu-")
        for gpu in self.gpus:
            if gpu.uuid and gpu.uuid.lower().removeprefix("gpu-") == wanted:
                return gpu
        raise KeyError(f"no GPU with uuid {uuid}")

    def _unknown(self, key: str, default: int) -> int:
        """The NVML error code to raise for a None fact: from the node's reason, else ``default``."""
        reason = self.node.unknown_reasons.get(key, "")
        return _ERROR_BY_TEXT.get(reason.removeprefix("NVML: "), default)

    def _fact(self, value: Any, key: str, default: int = C["NVML_ERROR_NOT_SUPPORTED"]) -> Any:
        return _raise(self._unknown(key, default)) if value is None else value

    def _gpu_fact(self, handle: Any, attribute: str) -> Any:
        gpu = self._dev(handle)
        return self._fact(getattr(gpu, attribute), f"gpu{gpu.index}.{attribute}")

    # --- init -------------------------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: int) -> None:
        if self.library_missing:
            raise NVMLError(C["NVML_ERROR_LIBRARY_NOT_FOUND"])
        if self.driver_not_loaded:
            raise NVMLError(C["NVML_ERROR_DRIVER_NOT_LOADED"])
        self.init_count += 1

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> None:
        self.init_count -= 1

    def nvmlErrorString(self, result: int) -> str:
        return _ERROR_TEXT.get(result, "Unknown Error")

    # --- system -----------------------------------------------------------------------------

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._fact(self.node.driver_version, "driver_version"))

    def nvmlSystemGetNVMLVersion(self) -> str:
        return str(self._fact(self.node.nvml_version, "nvml_version"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        version = self._fact(self.node.cuda_driver_version, "cuda_driver_version")
        major, minor = (int(part) for part in str(version).split(".")[:2])
        return major * 1000 + minor * 10

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.nvmlSystemGetCudaDriverVersion()

    def nvmlSystemGetNvlinkBwMode(self) -> int:
        return _BW_MODES[self._fact(self.node.nvlink_bw_mode, "nvlink_bw_mode")]

    # --- devices ----------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(C["NVML_ERROR_INVALID_ARGUMENT"])
        return self._handles[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for position, gpu in enumerate(self.gpus):
            if gpu.uuid == wanted:  # NVML wants the full "GPU-..." form
                return self._handles[position]
        raise NVMLError(C["NVML_ERROR_NOT_FOUND"])

    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str | bytes) -> _Handle:
        raw = pciBusId.decode() if isinstance(pciBusId, bytes) else pciBusId
        try:
            wanted = normalize_pci_bus_id(raw)
        except ValueError:
            raise NVMLError(C["NVML_ERROR_INVALID_ARGUMENT"]) from None
        for position, gpu in enumerate(self.gpus):
            if gpu.pci_bus_id == wanted:
                return self._handles[position]
        raise NVMLError(C["NVML_ERROR_NOT_FOUND"])

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return str(self._gpu_fact(handle, "name"))

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return str(self._gpu_fact(handle, "uuid"))

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        return str(self._gpu_fact(handle, "serial"))

    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> str:
        return str(self._gpu_fact(handle, "vbios"))

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        gpu = self._dev(handle)
        if gpu.numa_node is None and f"gpu{gpu.index}.numa_node" not in self.node.unknown_reasons:
            return -1  # NVML's answer for "no NUMA affinity"
        return int(self._gpu_fact(handle, "numa_node"))

    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> nvmlPciInfo_t:
        gpu = self._dev(handle)
        return _pci_info(self._gpu_fact(handle, "pci_bus_id"), _H100_SXM_DEVICE_ID, gpu)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> nvmlPciInfo_t:
        return self.nvmlDeviceGetPciInfo_v3(handle)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._gpu_fact(handle, "pcie_gen_current"))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._gpu_fact(handle, "pcie_gen_max"))

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._gpu_fact(handle, "pcie_gen_gpu_max"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._gpu_fact(handle, "pcie_width_current"))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return int(self._gpu_fact(handle, "pcie_width_max"))

    def nvmlDeviceGetVirtualizationMode(self, handle: Any) -> int:
        return _VIRTUALIZATION[self._gpu_fact(handle, "virtualization_mode")]

    # --- fabric -----------------------------------------------------------------------------

    def nvmlDeviceGetGpuFabricInfoV(self, device: Any, gpuFabricInfo: Any) -> int:
        gpu = self._dev(device)
        info = _deref(gpuFabricInfo, c_nvmlGpuFabricInfo_v2_t)
        if info.version != C["nvmlGpuFabricInfo_v2"]:
            raise NVMLError(C["NVML_ERROR_ARGUMENT_VERSION_MISMATCH"])
        self._fill_fabric(gpu, info)
        fabric = gpu.fabric
        assert fabric is not None
        info.healthMask = {True: 1, False: 2, None: 0}[fabric.degraded_bandwidth]
        return int(C["NVML_SUCCESS"])

    def nvmlDeviceGetGpuFabricInfo(self, device: Any, gpuFabricInfo: Any) -> int:
        gpu = self._dev(device)
        self._fill_fabric(gpu, _deref(gpuFabricInfo, c_nvmlGpuFabricInfo_t))
        return int(C["NVML_SUCCESS"])

    def _fill_fabric(self, gpu: Gpu, info: Any) -> None:
        fabric = self._fact(gpu.fabric, f"gpu{gpu.index}.fabric")
        if fabric.state == "not_supported":
            raise NVMLError(C["NVML_ERROR_NOT_SUPPORTED"])
        info.state = _FABRIC_STATES[fabric.state]
        info.status = _status_code(fabric.status)
        info.cliqueId = fabric.clique_id or 0
        raw = bytes.fromhex(fabric.cluster_uuid.replace("-", "")) if fabric.cluster_uuid else bytes(16)
        ctypes.memmove(info.clusterUuid, raw, 16)

    # --- NVLink -----------------------------------------------------------------------------

    def _link(self, device: Any, link: Any) -> tuple[Gpu, NvLinkInfo]:
        gpu = self._dev(device)
        if isinstance(link, bool) or not isinstance(link, int):
            raise ctypes.ArgumentError("argument 2: TypeError: Don't know how to convert parameter 2")
        links = {info.link: info for info in self._fact(gpu.nvlinks, f"gpu{gpu.index}.nvlinks")}
        if not links:
            raise NVMLError(C["NVML_ERROR_NOT_SUPPORTED"])  # the GPU has no NVLink
        if link not in links or not 0 <= link < self.max_links:
            raise NVMLError(C["NVML_ERROR_INVALID_ARGUMENT"])  # GB200: ids past the real links
        return gpu, links[link]

    def _link_fact(self, device: Any, link: Any, attribute: str) -> Any:
        gpu, info = self._link(device, link)
        return self._fact(getattr(info, attribute), f"gpu{gpu.index}.nvlink{link}.{attribute}")

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        return int(bool(self._link_fact(device, link, "active")))

    def nvmlDeviceGetNvLinkVersion(self, device: Any, link: int) -> int:
        return _GENERATION_TO_VERSION_ENUM[self._link_fact(device, link, "version")]

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        return _REMOTE_TYPES[self._link_fact(device=handle, link=link, attribute="remote_type")]

    def nvmlDeviceGetNvLinkCapability(self, device: Any, link: int, capability: int) -> int:
        _, info = self._link(device, link)
        return int(bool(info.active))

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> nvmlPciInfo_t:
        gpu, info = self._link(device, link)
        key = f"gpu{gpu.index}.nvlink{link}.remote_pci_bus_id"
        if info.remote_pci_bus_id is None and self.node.unknown_reasons.get(key, "").startswith("NVML: "):
            raise NVMLError(self._unknown(key, C["NVML_ERROR_UNKNOWN"]))
        device_id = _NVSWITCH_DEVICE_ID if info.remote_type == "switch" else _H100_SXM_DEVICE_ID
        pci = _pci_info(info.remote_pci_bus_id, device_id, None)
        if info.remote_pci_bus_id is None:
            pci.busId = self.remote_bus_id_junk  # VM guests: the far end is not visible
        return pci

    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int:
        gpu, info = self._link(device, link)
        if not 0 <= counter < len(_ERROR_COUNTERS):
            raise NVMLError(C["NVML_ERROR_INVALID_ARGUMENT"])
        errors = self._fact(info.errors, f"gpu{gpu.index}.nvlink{link}.errors")
        name = _ERROR_COUNTERS[counter]
        return int(errors[name]) if name in errors else _raise(C["NVML_ERROR_NOT_SUPPORTED"])

    # --- field values -----------------------------------------------------------------------

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> Any:
        gpu = self._dev(handle)
        values = (c_nvmlFieldValue_t * len(fieldIds))()
        for entry, field_id in zip(values, fieldIds, strict=True):
            try:
                entry.fieldId, entry.scopeId = field_id
            except TypeError:
                entry.fieldId = field_id
            entry.timestamp = time.time_ns() // 1000
            try:
                value_type, value = self._field(gpu, int(entry.fieldId), int(entry.scopeId))
            except _FieldFailure as failure:
                entry.nvmlReturn = failure.code  # per field, not raised: callers must check it
                continue
            entry.nvmlReturn = C["NVML_SUCCESS"]
            entry.valueType = value_type
            setattr(entry.value, _VALUE_MEMBER[value_type], value)
        return values

    def _field(self, gpu: Gpu, field_id: int, scope_id: int) -> tuple[int, int | float]:
        if field_id in self.unsupported_fields:
            raise _FieldFailure(C["NVML_ERROR_NOT_SUPPORTED"])
        if field_id in (197, 198):
            return self._pcie_counter(gpu, field_id)
        links = self._field_links(gpu)
        if field_id == 91:
            return 1, len(links)
        if field_id in (138, 139, 140, 141):
            return self._nvlink_counter(gpu, field_id, scope_id, links)
        if field_id == 90:
            speeds = [link.speed_gbps for link in links.values() if link.active and link.speed_gbps]
            return (1, round(speeds[0] * 1000)) if speeds else _raise_field(C["NVML_ERROR_NOT_SUPPORTED"])
        if field_id in _SPEED_FIELDS:  # unscoped per-link fields: the link is in the field id
            field_id, scope_id = 164, _SPEED_FIELDS.index(field_id)
        link = links.get(scope_id) if scope_id < self.max_links else None
        if link is None:
            raise _FieldFailure(C["NVML_ERROR_INVALID_ARGUMENT"])
        if field_id == 164:
            return 1, round((link.speed_gbps or 0.0) * 1000) if link.active else 0
        if field_id == 165:
            return 1, int(bool(link.active))
        if field_id == 166 and link.version is not None:
            return 1, _GENERATION_TO_VERSION_ENUM[link.version]
        raise _FieldFailure(C["NVML_ERROR_NOT_SUPPORTED"])

    def _field_links(self, gpu: Gpu) -> dict[int, NvLinkInfo]:
        if not gpu.nvlinks:
            raise _FieldFailure(C["NVML_ERROR_NOT_SUPPORTED"])
        return {link.link: link for link in gpu.nvlinks}

    def _nvlink_counter(self, gpu: Gpu, field_id: int, scope_id: int, links: dict[int, NvLinkInfo]) -> tuple[int, int]:
        if self.counters_no_permission:
            raise _FieldFailure(C["NVML_ERROR_NO_PERMISSION"])
        traffic = self.traffic[gpu.index]
        total_kib = (traffic.nvlink_tx if field_id in (138, 140) else traffic.nvlink_rx) // 1024
        if scope_id == _SCOPE_ALL:
            return 3, total_kib
        if scope_id not in links:
            raise _FieldFailure(C["NVML_ERROR_INVALID_ARGUMENT"])
        active = [link for link in links.values() if link.active]
        return 3, total_kib // len(active) if links[scope_id].active else 0  # spread evenly

    def _pcie_counter(self, gpu: Gpu, field_id: int) -> tuple[int, int]:
        if self.counters_no_permission:
            raise _FieldFailure(C["NVML_ERROR_NO_PERMISSION"])
        traffic = self.traffic[gpu.index]
        value = traffic.pcie_tx if field_id == 197 else traffic.pcie_rx
        if self.pcie_counter_bits is not None:
            value %= 1 << self.pcie_counter_bits  # "Value can be wrapped"
        return 3, value

    # --- pairs ------------------------------------------------------------------------------

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        a, b = self._dev(device1), self._dev(device2)
        if a is b:
            return int(C["NVML_TOPOLOGY_INTERNAL"])
        low, high = sorted((a.index, b.index))
        path = self._fact(self.node.path(low, high), f"pair{low}-{high}.path")
        if nvlink_count_of_path(path) is not None:
            # NVML reports only the PCIe path; NVLink pairs need the PCIe level underneath.
            path = self.pcie_levels.get((low, high)) or ("NODE" if a.numa_node == b.numa_node else "SYS")
        return _TOPOLOGY_LEVELS[path]

    def nvmlDeviceGetP2PStatus(self, device1: Any, device2: Any, p2pIndex: Any) -> int:
        if isinstance(p2pIndex, bool) or not isinstance(p2pIndex, int):
            # What ctypes says when handed pynvml.NVML_P2P_CAPS_INDEX_READ, the tuple (0,).
            raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
        a, b = self._dev(device1), self._dev(device2)
        if not 0 <= p2pIndex < len(_P2P_CAPABILITY_BY_INDEX):
            raise NVMLError(C["NVML_ERROR_INVALID_ARGUMENT"])
        capability = _P2P_CAPABILITY_BY_INDEX[p2pIndex]
        status = self.node.p2p_status(a.index, b.index)
        value = status.get(capability) if status is not None else None
        return _P2P_CODES[self._fact(value, f"p2p{a.index}-{b.index}.{capability}", C["NVML_ERROR_UNKNOWN"])]


def _raise_field(code: int) -> Any:
    raise _FieldFailure(code)


def _deref(argument: Any, struct_type: type[ctypes.Structure]) -> Any:
    """The struct behind ``ctypes.byref(struct)`` or ``ctypes.pointer(struct)``."""
    if isinstance(argument, ctypes.Structure):
        raise TypeError("pass the struct as ctypes.byref(info): pynvml hands it to C unchanged")
    target = getattr(argument, "_obj", None)  # ctypes.byref
    if target is None and isinstance(argument, ctypes._Pointer):
        target = argument.contents
    if not isinstance(target, struct_type):
        raise ctypes.ArgumentError(f"expected a pointer to {struct_type.__name__}")
    return target


def _pci_info(bus_id: str | None, device_id: int, gpu: Gpu | None) -> nvmlPciInfo_t:
    info = nvmlPciInfo_t()
    info.pciDeviceId = device_id
    if bus_id is None:
        return info
    domain_text, bus_text, rest = bus_id.split(":")
    domain, bus, device = int(domain_text, 16), int(bus_text, 16), int(rest.split(".")[0], 16)
    info.domain, info.bus, info.device = domain, bus, device
    info.busId = (C["NVML_DEVICE_PCI_BUS_ID_FMT"] % (domain, bus, device)).encode()
    info.busIdLegacy = (C["NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT"] % (domain, bus, device)).encode()
    return info


def _status_code(status: str | None) -> int:
    if status in (None, "success"):
        return 0
    return int(C.get(f"NVML_ERROR_{str(status).upper()}", C["NVML_ERROR_UNKNOWN"]))


def make_fake_pynvml(
    node: Node | None,
    *,
    missing_functions: Iterable[str] = (),
    absent_functions: Iterable[str] = (),
    library_missing: bool = False,
    driver_not_loaded: bool = False,
    max_links: int = 36,
    nvml_order: Iterable[int] | None = None,
    unsupported_fields: Iterable[int] = (),
    lost_gpus: Iterable[int] = (),
    counters_no_permission: bool = False,
    pcie_levels: Mapping[tuple[int, int], str] | None = None,
    pcie_counter_bits: int | None = None,
    remote_bus_id_junk: bytes = b"",
) -> types.ModuleType:
    """A module that behaves like ``pynvml`` on the machine ``node`` describes.

    ``missing_functions`` raise NVMLError_FunctionNotFound (an older driver); ``absent_functions``
    are not in the module at all (older bindings). ``nvml_order`` lists node GPU indices in NVML
    enumeration order. ``lost_gpus`` are node GPU indices whose calls raise GpuIsLost.
    The fake's state is ``module.fake_state``; ``module.add_traffic`` / ``add_copy`` advance the
    traffic counters and ``module.inject_error`` makes a function fail.
    """
    state = FakeNvml(
        node,
        nvml_order=nvml_order,
        max_links=max_links,
        missing_functions=missing_functions,
        library_missing=library_missing,
        driver_not_loaded=driver_not_loaded,
        unsupported_fields=unsupported_fields,
        lost_gpus=lost_gpus,
        counters_no_permission=counters_no_permission,
        pcie_levels=pcie_levels,
        pcie_counter_bits=pcie_counter_bits,
        remote_bus_id_junk=remote_bus_id_junk,
    )
    module = types.ModuleType("pynvml", "Fake pynvml (tests/fake_pynvml.py)")
    module.__dict__.update(CONSTANTS)
    module.__dict__.update(ERROR_CLASSES)
    module.__dict__.update(
        NVML_NVLINK_MAX_LINKS=max_links,
        c_nvmlGpuFabricInfo_t=c_nvmlGpuFabricInfo_t,
        c_nvmlGpuFabricInfo_v2_t=c_nvmlGpuFabricInfo_v2_t,
        c_nvmlGpuFabricInfoV_t=c_nvmlGpuFabricInfoV_t,
    )
    for value in (NVMLError, nvmlExceptionClass, nvmlPciInfo_t, c_nvmlValue_t, c_nvmlFieldValue_t):
        setattr(module, value.__name__, value)
    for name in dir(FakeNvml):
        if name.startswith("nvml"):
            setattr(module, name, state.wrap(name))
    for name in absent_functions:
        delattr(module, name)
    module.__dict__.update(
        fake_state=state,
        add_traffic=state.add_traffic,
        add_copy=state.add_copy,
        inject_error=state.inject_error,
    )
    return module
