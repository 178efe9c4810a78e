"""The state and behaviour behind one fake ``pynvml`` module: :class:`FakeNvml`.

Its public ``nvml*`` methods become the module's functions (``make_fake_pynvml`` in
``fake_pynvml`` wraps them); it answers from a :class:`Node` with the traps of the real library
that the ``fake_pynvml`` docstring lists. Kept apart from the copied definitions
(``fake_nvml_api``) so that each file stays small.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fake_nvml_api import (
    ERROR_BY_TEXT,
    ERROR_TEXT,
    C,
    NVMLError,
    c_nvmlFieldValue_t,
    c_nvmlGpuFabricInfo_t,
    nvmlPciInfo_t,
    struct_c_nvmlDevice_t,
)
from fake_nvml_c2c import C2C_FIELDS, c2c_field
from fake_nvml_events import EventsMixin
from fake_nvml_mig import MigMixin

from pytest_nvlink.model import FabricInfo, Gpu, Node, NvLinkInfo, normalize_pci_bus_id, nvlink_count_of_path

# --- how the fake encodes the node's facts as NVML values ---------------------------------------

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
# NVML_FI_DEV_NVLINK_COUNT_* field ids -> the model's NVLink 5 counter names; they answer on these only.
_NVLINK5_ERROR_FIELDS = {
    C["NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS"]: "symbol",
    C["NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS"]: "effective",
    C["NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS"]: "link_recovery",
    C["NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS"]: "link_recovery_failed",
    C["NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS"]: "malformed_packet",
    C["NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS"]: "buffer_overrun",
    C["NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS"]: "rcv",
    C["NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS"]: "rcv_remote",
    C["NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS"]: "rcv_general",
    C["NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS"]: "local_link_integrity",
}
_NVLINK5_ARCHITECTURES = {C["NVML_DEVICE_ARCH_BLACKWELL"], C["NVML_DEVICE_ARCH_RUBIN"]}
_ARCHITECTURE_BY_NAME = (
    ("GB300", "BLACKWELL"),
    ("GB200", "BLACKWELL"),
    ("B300", "BLACKWELL"),
    ("B200", "BLACKWELL"),
    ("GH200", "HOPPER"),
    ("H100", "HOPPER"),
    ("H200", "HOPPER"),
    ("H800", "HOPPER"),
    ("A100", "AMPERE"),
    ("A800", "AMPERE"),
    ("L40", "ADA"),
)
_FABRIC_STATES = {"not_supported": 0, "not_started": 1, "in_progress": 2, "completed": 3}
_BW_MODES = {"full": 0, "off": 1, "min": 2, "half": 3, "3quarter": 4}
_H100_SXM_DEVICE_ID = 0x233010DE
_NVSWITCH_DEVICE_ID = 0x22A310DE

_TRAFFIC_FIELDS = frozenset({138, 139, 140, 141, 197, 198})  # NVLink throughput, PCIe byte counters
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _raise(code: int) -> Any:
    raise NVMLError(code)


class _Handle:
    """An opaque device handle, like pynvml's ``c_nvmlDevice_t``."""

    __slots__ = ("_as_parameter_", "_device", "_owner", "_position")

    def __init__(self, owner: FakeNvml, position: int) -> None:
        self._owner = owner
        self._position = position
        # What ctypes passes for it, as for pynvml's POINTER(struct_c_nvmlDevice_t): event data points here too.
        self._device = struct_c_nvmlDevice_t()
        self._as_parameter_ = ctypes.pointer(self._device)

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


class FakeNvml(EventsMixin, MigMixin):
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
        raw_fields: Mapping[tuple[int, int | None], int] | None = None,
        counter_lag_reads: int = 0,
        background_bytes_per_read: int = 0,
        counter_refresh_s: float | None = None,
        aggregate_scope_fails: bool = False,
        fabric_versions: Iterable[int] = (C["nvmlGpuFabricInfo_v2"], C["nvmlGpuFabricInfo_v3"]),
        architectures: Mapping[int, int] | None = None,
        no_xid_events: Iterable[int] = (),
        field_errors: Mapping[int, int] | None = None,
        remote_bus_ids: Mapping[str, str] | None = None,
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
        self.field_errors = dict(field_errors or {})  # fieldId -> the NVML error its entry answers
        # A GPU the node marks unusable is one NVML reports as lost.
        self.lost_gpus = set(lost_gpus) | {gpu.index for gpu in self.gpus if gpu.problem}
        self.counters_no_permission = counters_no_permission
        self.pcie_levels = dict(pcie_levels or {})
        self.pcie_counter_bits = pcie_counter_bits
        self.remote_bus_id_junk = remote_bus_id_junk
        # A VM guest: the bus id a link's far end reports (the host's) for each guest bus id that differs.
        self.remote_bus_ids = dict(remote_bus_ids or {})
        # (fieldId, scopeId or None for any) -> the raw value NVML would answer, bypassing the
        # fake's own encoding of the node: tests anchor units on values documented elsewhere.
        self.raw_fields = dict(raw_fields or {})
        # Imperfect NVLink counters, as the path proof must expect them: a read shows the traffic of
        # ``counter_lag_reads`` reads ago, every read adds background traffic (other processes,
        # NVLink keep-alive), and some drivers refuse the all-links scope.
        self.counter_lag_reads = counter_lag_reads
        self.background_bytes_per_read = background_bytes_per_read
        # The driver refreshes the traffic counters on its own clock: with a period set, their values
        # and timestamps change only at a refresh (the first read a period after the last one), so a
        # read right after a copy can show the counters from before it, dated before it.
        self.counter_refresh_s = counter_refresh_s
        self.refreshed: dict[int, tuple[int, _Traffic]] = {}  # NVML index -> (timestamp us, counters then)
        self.aggregate_scope_fails = aggregate_scope_fails
        # The fabric-info struct versions the driver knows (R550: v2 only), and node GPU index -> the
        # nvmlDeviceArchitecture_t it answers where the GPU's name and links do not say it.
        self.fabric_versions = set(fabric_versions)
        self.architectures = dict(architectures or {})
        self.published: dict[int, list[tuple[int, int]]] = {}
        self.init_count = 0
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.injected: dict[tuple[str, int | None], int] = {}
        self.traffic: dict[int, _Traffic] = {gpu.index: _Traffic() for gpu in self.gpus}
        self.error_growth: dict[tuple[int, int, str], int] = {}
        self.error_reads: dict[tuple[int, int, str], int] = {}
        self._handles = [_Handle(self, position) for position in range(len(self.gpus))]
        self._init_events(no_xid_events=set(no_xid_events))

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

    def grow_errors_on_read(self, gpu: int, link: int, counter: str, step: int) -> None:
        """Make an NVLink error counter grow by ``step`` at every read after the first (errors during a run).

        The probe's read sees the node's total; the campaign's before and after reads then differ by ``step``.
        """
        self.error_growth[(gpu, link, counter)] = step

    def _error_growth(self, gpu: int, link: int, counter: str) -> int:
        key = (gpu, link, counter)
        if key not in self.error_growth:
            return 0
        reads = self.error_reads.get(key, 0)
        self.error_reads[key] = reads + 1
        return reads * self.error_growth[key]

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
        return ERROR_BY_TEXT.get(reason.removeprefix("NVML: "), default)

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
        return ERROR_TEXT.get(result, "Unknown Error")

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
        # GPU memory as a NUMA node: NotSupported on x86 hosts (the shipped snapshots' case).
        return int(self._gpu_fact(handle, "gpu_memory_numa_node"))

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
        info = _deref_versioned(gpuFabricInfo)
        # NVML reads the version first; a driver older than the struct answers ArgumentVersionMismatch.
        if info.version not in self.fabric_versions:
            raise NVMLError(C["NVML_ERROR_ARGUMENT_VERSION_MISMATCH"])
        self._fill_fabric(gpu, info)
        fabric = gpu.fabric
        assert fabric is not None
        info.healthMask = _health_mask(fabric)
        if info.version == C["nvmlGpuFabricInfo_v3"]:
            info.healthSummary = _health_summary(fabric)
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
        remote = self.remote_bus_ids.get(info.remote_pci_bus_id or "", info.remote_pci_bus_id)
        pci = _pci_info(remote, device_id, None)
        if info.remote_pci_bus_id is None:
            pci.busId = self.remote_bus_id_junk  # VM guests: the far end is not visible
        return pci

    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int:
        gpu, info = self._link(device, link)
        if not 0 <= counter < len(_ERROR_COUNTERS):
            raise NVMLError(C["NVML_ERROR_INVALID_ARGUMENT"])
        if self._architecture(gpu) in _NVLINK5_ARCHITECTURES:
            raise NVMLError(C["NVML_ERROR_NOT_SUPPORTED"])  # nvml.h: the DL counters are "unsupported for Blackwell+"
        errors = self._fact(info.errors, f"gpu{gpu.index}.nvlink{link}.errors")
        name = _ERROR_COUNTERS[counter]
        if name not in errors:
            _raise(C["NVML_ERROR_NOT_SUPPORTED"])
        return int(errors[name]) + self._error_growth(gpu.index, link, name)

    def nvmlDeviceGetArchitecture(self, device: Any) -> int:
        return self._architecture(self._dev(device))

    def _architecture(self, gpu: Gpu) -> int:
        """What NVML answers: the test's override, else the GPU's product name, else its NVLink generation."""
        if gpu.index in self.architectures:
            return self.architectures[gpu.index]
        name = (gpu.name or "").upper()
        for marker, architecture in _ARCHITECTURE_BY_NAME:
            if marker in name:
                return int(C[f"NVML_DEVICE_ARCH_{architecture}"])
        versions = {link.version for link in gpu.nvlinks or [] if link.version}
        by_generation = {3: "AMPERE", 4: "HOPPER", 5: "BLACKWELL", 6: "RUBIN"}
        generation = by_generation.get(max(versions)) if versions else None
        return int(C[f"NVML_DEVICE_ARCH_{generation or 'UNKNOWN'}"])

    # --- field values -----------------------------------------------------------------------

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> Any:
        gpu = self._dev(handle)
        counters_at = self._sample_counters(gpu.index)  # one counter sample per call, as one NVML read
        values = (c_nvmlFieldValue_t * len(fieldIds))()
        for entry, field_id in zip(values, fieldIds, strict=True):
            try:
                entry.fieldId, entry.scopeId = field_id
            except TypeError:
                entry.fieldId = field_id
            # microseconds since 1970, when the value was last refreshed (nvml.h nvmlFieldValue_t)
            entry.timestamp = counters_at if int(entry.fieldId) in _TRAFFIC_FIELDS else time.time_ns() // 1000
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
        if field_id in self.field_errors:
            raise _FieldFailure(self.field_errors[field_id])
        for key in ((field_id, scope_id), (field_id, None)):
            if key in self.raw_fields:
                return 3 if field_id in (138, 139, 197, 198) else 1, self.raw_fields[key]
        if field_id in (197, 198):
            return self._pcie_counter(gpu, field_id)
        if field_id in C2C_FIELDS:
            answer = c2c_field(gpu, field_id, scope_id)
            return answer if isinstance(answer, tuple) else _raise_field(answer)
        links = self._field_links(gpu)
        if field_id in _NVLINK5_ERROR_FIELDS:
            return self._nvlink5_error(gpu, links, field_id, scope_id)
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

    def _nvlink5_error(self, gpu: Gpu, links: dict[int, NvLinkInfo], field_id: int, scope_id: int) -> tuple[int, int]:
        """An NVLink 5 error counter (scopeId = link): only Blackwell and later have them."""
        if self._architecture(gpu) not in _NVLINK5_ARCHITECTURES:
            raise _FieldFailure(C["NVML_ERROR_NOT_SUPPORTED"])
        link = links.get(scope_id) if scope_id < self.max_links else None
        if link is None:
            raise _FieldFailure(C["NVML_ERROR_INVALID_ARGUMENT"])
        name = _NVLINK5_ERROR_FIELDS[field_id]
        if link.errors is None:
            raise _FieldFailure(
                self._unknown(f"gpu{gpu.index}.nvlink{link.link}.errors", C["NVML_ERROR_NOT_SUPPORTED"])
            )
        if name not in link.errors:
            raise _FieldFailure(C["NVML_ERROR_NOT_SUPPORTED"])
        return 3, int(link.errors[name]) + self._error_growth(gpu.index, link.link, name)

    def _field_links(self, gpu: Gpu) -> dict[int, NvLinkInfo]:
        if not gpu.nvlinks:
            raise _FieldFailure(C["NVML_ERROR_NOT_SUPPORTED"])
        return {link.link: link for link in gpu.nvlinks}

    def _nvlink_counter(self, gpu: Gpu, field_id: int, scope_id: int, links: dict[int, NvLinkInfo]) -> tuple[int, int]:
        if self.counters_no_permission:
            raise _FieldFailure(C["NVML_ERROR_NO_PERMISSION"])
        tx, rx = self._published_nvlink(gpu.index)
        total_kib = (tx if field_id in (138, 140) else rx) // 1024
        if scope_id == _SCOPE_ALL:
            if self.aggregate_scope_fails:
                raise _FieldFailure(C["NVML_ERROR_INVALID_ARGUMENT"])
            return 3, total_kib
        if scope_id not in links:
            raise _FieldFailure(C["NVML_ERROR_INVALID_ARGUMENT"])
        active = [link for link in links.values() if link.active]
        return 3, total_kib // len(active) if links[scope_id].active else 0  # spread evenly

    def _published_nvlink(self, index: int) -> tuple[int, int]:
        """The NVLink (TX, RX) bytes a read sees now: lagging, with background traffic added."""
        history = self.published.setdefault(index, [])
        return history[max(0, len(history) - 1 - self.counter_lag_reads)] if history else (0, 0)

    def _sample_counters(self, index: int) -> int:
        """Refresh the traffic counters if due; the timestamp (us) of the values a read sees now."""
        now_us = time.time_ns() // 1000
        last = self.refreshed.get(index)
        if self.counter_refresh_s is not None and last is not None and now_us - last[0] < self.counter_refresh_s * 1e6:
            return last[0]
        self._publish_counters(index)
        self.refreshed[index] = (now_us, dataclasses.replace(self.traffic[index]))
        return now_us

    def _publish_counters(self, index: int) -> None:
        traffic = self.traffic[index]
        traffic.nvlink_tx += self.background_bytes_per_read
        traffic.nvlink_rx += self.background_bytes_per_read
        self.published.setdefault(index, []).append((traffic.nvlink_tx, traffic.nvlink_rx))

    def _pcie_counter(self, gpu: Gpu, field_id: int) -> tuple[int, int]:
        if self.counters_no_permission:
            raise _FieldFailure(C["NVML_ERROR_NO_PERMISSION"])
        traffic = self.refreshed[gpu.index][1] if self.counter_refresh_s is not None else self.traffic[gpu.index]
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


def _deref_versioned(argument: Any) -> Any:
    """The versioned struct behind ``ctypes.byref(struct)``: any layout whose size the version states.

    NVML reads the struct's first word as ``(version << 24) | sizeof``; a caller's own struct (bindings that
    lack ``c_nvmlGpuFabricInfo_v3_t``) works as long as its size matches, as it would in C.
    """
    if isinstance(argument, ctypes.Structure):
        raise TypeError("pass the struct as ctypes.byref(info): pynvml hands it to C unchanged")
    target = getattr(argument, "_obj", None)
    if target is None and isinstance(argument, ctypes._Pointer):
        target = argument.contents
    if not isinstance(target, ctypes.Structure) or not hasattr(target, "version"):
        raise ctypes.ArgumentError("expected a pointer to a versioned NVML struct")
    if ctypes.sizeof(target) < int(target.version) & 0xFFFFFF:
        raise ctypes.ArgumentError(
            f"struct of {ctypes.sizeof(target)} bytes is smaller than version {target.version:#x}"
        )
    return target


# Health-mask flags whose problem name is the flag's own (TRUE = 1 is the problem, FALSE = 2 healthy).
_HEALTH_FLAGS = (
    ("DEGRADED_BW", "degraded_bandwidth"),
    ("ROUTE_RECOVERY", "route_recovery"),
    ("ROUTE_UNHEALTHY", "route_unhealthy"),
    ("ACCESS_TIMEOUT_RECOVERY", "access_timeout_recovery"),
)
_HEALTH = "NVML_GPU_FABRIC_HEALTH_MASK"


def _health_mask(fabric: FabricInfo) -> int:
    """The healthMask a driver reporting ``fabric`` answers: only DEGRADED_BW where the node knows no more."""
    problems = fabric.health_problems
    mask = {True: 1, False: 2, None: 0}[fabric.degraded_bandwidth]
    if problems is None:
        return mask
    mask = 0
    for flag, name in _HEALTH_FLAGS:
        bad = name in problems or (name == "degraded_bandwidth" and fabric.degraded_bandwidth is True)
        mask |= C[f"{_HEALTH}_{flag}_{'TRUE' if bad else 'FALSE'}"] << C[f"{_HEALTH}_SHIFT_{flag}"]
    config = next((p.split(":", 1)[1] for p in problems if p.startswith("incorrect_configuration:")), "none")
    mask |= C[f"{_HEALTH}_INCORRECT_CONFIGURATION_{config.upper()}"] << C[f"{_HEALTH}_SHIFT_INCORRECT_CONFIGURATION"]
    assigned = "FALSE" if "partition_not_assigned" in problems else "TRUE"
    mask |= C[f"{_HEALTH}_PARTITION_ASSIGNED_{assigned}"] << C[f"{_HEALTH}_SHIFT_PARTITION_ASSIGNED"]
    if "gfm_disconnected" in problems:  # single-node systems have no global fabric manager: NOT_SUPPORTED
        mask |= C[f"{_HEALTH}_GFM_STATE_DISCONNECTED"] << C[f"{_HEALTH}_SHIFT_GFM_STATE"]
    return int(mask)


def _health_summary(fabric: FabricInfo) -> int:
    name = fabric.health_summary
    if name is None:
        problems = fabric.health_problems or []
        name = next((p.split(":", 1)[1] for p in problems if p.startswith("summary:")), "not_supported")
    code: int = C[f"NVML_GPU_FABRIC_HEALTH_SUMMARY_{name.upper()}"]
    return code


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
