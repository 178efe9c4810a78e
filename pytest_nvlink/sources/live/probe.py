"""Live probe: ask NVML (through nvidia-ml-py's ``pynvml``) everything the checks need.

The probe never raises for a hardware condition. A missing driver, a lost GPU or a query the
driver does not support becomes a ``probe_errors`` sentence or an ``unknown_reasons`` entry, and
the fact stays ``None`` so that the checks fail closed instead of passing on a guess.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import itertools
import socket
import types
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from pytest_nvlink.model import Gpu, Node, NvLinkInfo, P2PStatus, PairPath, normalize_pci_bus_id
from pytest_nvlink.sources.live.c2c import read_c2c
from pytest_nvlink.sources.live.fabric import read_fabric
from pytest_nvlink.sources.live.fields import (
    NVLINK_BW_MODES,
    P2P_INDEX,
    P2P_STATUS_NAMES,
    TOPOLOGY_CLASSES,
    VIRTUALIZATION_MODES,
    FieldReading,
    bus_id_of,
    import_pynvml,
    nvml_reason,
    raw_bus_id,
    read_fields,
    text,
)
from pytest_nvlink.sources.live.links import LinkReader
from pytest_nvlink.sources.live.mig import read_mig_mode
from pytest_nvlink.sources.live.vm_paths import DECIDED_KEY, far_end_ids, shared_link_count, unresolved_links

DEFAULT_CPUINFO = Path("/proc/cpuinfo")
DEFAULT_SYSFS_PCI = Path("/sys/bus/pci/devices")
LIBRARY_NOT_FOUND = "NVML library not found — is the NVIDIA driver installed?"
DRIVER_NOT_LOADED = "NVIDIA driver is not loaded (NVML: Driver Not Loaded) — is the nvidia kernel module loaded?"


def probe_node(
    nvml: types.ModuleType | None = None,
    *,
    cpuinfo_path: Path = DEFAULT_CPUINFO,
    sysfs_pci: Path = DEFAULT_SYSFS_PCI,
) -> Node:
    """Probe this machine through NVML; ``nvml`` replaces ``pynvml`` (tests pass a fake).

    ``sysfs_pci`` is where each GPU's CPU NUMA node is read (``<bus id>/numa_node``).
    """
    node = Node(source="live", host=socket.gethostname(), hypervisor=read_hypervisor_flag(cpuinfo_path))
    if node.hypervisor is None:
        node.unknown_reasons["hypervisor"] = f"no CPU flags readable from {cpuinfo_path}"
    if nvml is None:
        try:
            nvml = import_pynvml()
        except ImportError as exc:
            node.probe_errors.append(f"nvidia-ml-py is not installed (import pynvml failed: {exc})")
            return node
    if not _init(nvml, node):
        return node
    try:
        _Prober(nvml, node, sysfs_pci).run()
    finally:
        # A failing shutdown leaves nothing to clean up; the facts are already collected.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
    return node


def _init(nvml: types.ModuleType, node: Node) -> bool:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError_LibraryNotFound:
        node.probe_errors.append(LIBRARY_NOT_FOUND)
        return False
    except nvml.NVMLError_DriverNotLoaded:
        node.probe_errors.append(DRIVER_NOT_LOADED)
        return False
    except nvml.NVMLError as exc:
        node.probe_errors.append(f"NVML could not be initialized: {exc}")
        return False
    return True


def read_hypervisor_flag(cpuinfo_path: Path = DEFAULT_CPUINFO) -> bool | None:
    """Whether the CPU flags include ``hypervisor`` (we run in a VM); None if unreadable."""
    try:
        content = cpuinfo_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in content.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return "hypervisor" in value.split()
    return None


def cuda_version_text(version: int) -> str:
    """NVML's CUDA driver version int (12040) as ``"12.4"`` (the NVML_CUDA_DRIVER_VERSION macros)."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def nvlink_count_between(a: Gpu, b: Gpu, gpu_bus_ids: Collection[str] = ()) -> int:
    """NV# between two GPUs as nvidia-smi prints it; 0 when they share no NVLink.

    Direct links count the active links of ``a`` whose far end is ``b``. On NVSwitch systems
    every link ends on a switch, and NV# is the smaller of the two GPUs' active switch links.
    ``gpu_bus_ids`` (all GPUs of the node) lets a link of unknown remote type (older drivers lack
    nvmlDeviceGetNvLinkRemoteDeviceType) count as a switch link when its far end is no GPU.
    """
    direct = sum(
        1
        for link in a.nvlinks or []
        if link.active
        and link.remote_type in ("gpu", None)
        and link.remote_pci_bus_id is not None
        and link.remote_pci_bus_id == b.pci_bus_id
    )
    if direct:
        return direct
    return min(_switch_links(a, gpu_bus_ids), _switch_links(b, gpu_bus_ids))


def _switch_links(gpu: Gpu, gpu_bus_ids: Collection[str]) -> int:
    return sum(1 for link in gpu.nvlinks or [] if link.active and _ends_on_switch(link, gpu_bus_ids))


def _ends_on_switch(link: NvLinkInfo, gpu_bus_ids: Collection[str]) -> bool:
    if link.remote_type is not None:
        return link.remote_type == "switch"
    return bool(gpu_bus_ids) and link.remote_pci_bus_id is not None and link.remote_pci_bus_id not in gpu_bus_ids


def _virtualization_name(mode: Any) -> str:
    return VIRTUALIZATION_MODES.get(int(mode), f"unknown({mode})")


def _numa_node(value: Any) -> int | None:
    number = int(value)
    return number if number >= 0 else None  # NVML answers -1 when the GPU has no NUMA affinity


# Gpu attribute, pynvml function, conversion of the answer.
_GPU_SCALARS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("name", "nvmlDeviceGetName", text),
    ("uuid", "nvmlDeviceGetUUID", text),
    ("serial", "nvmlDeviceGetSerial", text),
    ("vbios", "nvmlDeviceGetVbiosVersion", text),
    ("gpu_memory_numa_node", "nvmlDeviceGetNumaNodeId", _numa_node),
    ("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", int),
    ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", int),
    ("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", int),
    ("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth", int),
    ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", int),
    ("virtualization_mode", "nvmlDeviceGetVirtualizationMode", _virtualization_name),
)


class _Prober:
    """One probe run against an initialized NVML."""

    def __init__(self, nvml: types.ModuleType, node: Node, sysfs_pci: Path = DEFAULT_SYSFS_PCI) -> None:
        self.nvml = nvml
        self.node = node
        self.sysfs_pci = sysfs_pci
        self.handles: dict[int, Any] = {}
        self.gpu_bus_ids: set[str] = set()
        # Per GPU, active NVLinks whose far end is no GPU of this node, counted per reported far end.
        self.unresolved: dict[int, dict[str | None, int]] = {}
        self.far_ends: dict[int, str] = {}  # per GPU, the bus id its peers' links report for it

    def call(self, key: str, function: str, *args: Any) -> Any:
        """``nvml.<function>(*args)``, or None with the reason under ``key``. GpuIsLost propagates."""
        fn = getattr(self.nvml, function, None)
        if fn is None:
            self.node.unknown_reasons[key] = f"nvidia-ml-py has no {function}"
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError_GpuIsLost:
            raise
        except self.nvml.NVMLError as exc:
            self.node.unknown_reasons[key] = nvml_reason(exc)
            return None
        except UnicodeDecodeError as exc:  # nvidia-ml-py decodes returned strings strictly
            self.node.unknown_reasons[key] = f"NVML returned text that is not UTF-8: {exc}"
            return None

    def fields(self, key: str, handle: Any, requests: list[tuple[int, int]]) -> list[FieldReading] | None:
        try:
            return read_fields(self.nvml, handle, requests)
        except self.nvml.NVMLError_GpuIsLost:
            raise
        except self.nvml.NVMLError as exc:
            self.node.unknown_reasons[key] = nvml_reason(exc)
            return None

    def run(self) -> None:
        self._system()
        count = self.call("gpus", "nvmlDeviceGetCount")
        if count is None:
            reason = self.node.unknown_reasons.get("gpus", "unknown")
            self.node.probe_errors.append(f"NVML could not count the GPUs ({reason})")
            return
        self.node.gpus = [self._gpu(index) for index in range(int(count))]
        self._paths()
        self._p2p()

    def _system(self) -> None:
        node = self.node
        driver = self.call("driver_version", "nvmlSystemGetDriverVersion")
        node.driver_version = None if driver is None else text(driver)
        cuda = self.call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
        node.cuda_driver_version = None if cuda is None else cuda_version_text(int(cuda))
        nvml_version = self.call("nvml_version", "nvmlSystemGetNVMLVersion")
        node.nvml_version = None if nvml_version is None else text(nvml_version)
        mode = self.call("nvlink_bw_mode", "nvmlSystemGetNvlinkBwMode")
        node.nvlink_bw_mode = None if mode is None else NVLINK_BW_MODES.get(int(mode), f"unknown({mode})")

    # --- one GPU -------------------------------------------------------------------------------

    def _gpu(self, index: int) -> Gpu:
        """One GPU; a lost or unopenable GPU stays in the node with its ``problem`` set."""
        gpu = Gpu(index=index)
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except self.nvml.NVMLError_GpuIsLost as exc:
            return self._unusable(gpu, exc)
        except self.nvml.NVMLError as exc:
            gpu.problem = f"NVML cannot open it: {exc}"
            self.node.probe_errors.append(f"GPU {index}: {gpu.problem}")
            return gpu
        try:
            self._gpu_facts(gpu, handle)
        except self.nvml.NVMLError_GpuIsLost as exc:
            return self._unusable(gpu, exc)
        self.handles[index] = handle
        return gpu

    def _unusable(self, gpu: Gpu, exc: BaseException) -> Gpu:
        gpu.problem = nvml_reason(exc)
        self.node.probe_errors.append(f"GPU {gpu.index} (bus {gpu.pci_bus_id or 'unknown'}) is lost: {exc}")
        return gpu

    def _gpu_facts(self, gpu: Gpu, handle: Any) -> None:
        key = f"gpu{gpu.index}"
        # PCI first: a GPU that turns out to be lost is reported by its bus id.
        pci = self.call(f"{key}.pci_bus_id", "nvmlDeviceGetPciInfo", handle)
        if pci is not None:
            gpu.pci_bus_id = bus_id_of(pci)
            if gpu.pci_bus_id is None:
                self.node.unknown_reasons[f"{key}.pci_bus_id"] = f"NVML returned an invalid bus id {raw_bus_id(pci)!r}"
        for attribute, function, convert in _GPU_SCALARS:
            value = self.call(f"{key}.{attribute}", function, handle)
            if value is not None:
                setattr(gpu, attribute, convert(value))
        gpu.numa_node = self._cpu_numa_node(key, gpu.pci_bus_id)
        gpu.fabric = read_fabric(self.nvml, handle, key, self.node.unknown_reasons)
        gpu.c2c = read_c2c(self.nvml, handle, key, self.node.unknown_reasons)
        mig = read_mig_mode(self.nvml, handle, f"{key}.mig_mode", self.node.unknown_reasons)
        gpu.mig_mode_current, gpu.mig_mode_pending = mig
        gpu.nvlinks = LinkReader(self, key, handle).read()

    def _cpu_numa_node(self, key: str, bus_id: str | None) -> int | None:
        """The CPU NUMA node of the GPU's PCI device, as nvidia-smi topo -m's "NUMA Affinity" shows it."""
        if bus_id is None:
            self.node.unknown_reasons[f"{key}.numa_node"] = "no PCI bus id to look the NUMA node up by"
            return None
        path = self.sysfs_pci / bus_id / "numa_node"
        try:
            value = int(path.read_text(encoding="ascii").strip())
        except (OSError, ValueError) as exc:
            self.node.unknown_reasons[f"{key}.numa_node"] = f"{path} unreadable: {exc}"
            return None
        if value < 0:  # the kernel's "no NUMA affinity" (single-node hosts, many VMs)
            self.node.unknown_reasons[f"{key}.numa_node"] = f"{path} says -1 (no NUMA affinity)"
            return None
        return value

    # --- pairs ---------------------------------------------------------------------------------

    def _paths(self) -> None:
        unknown_links = [gpu.index for gpu in self.node.gpus if gpu.nvlinks is None]
        if unknown_links:
            self.node.unknown_reasons["paths"] = (
                f"NVLink state of GPU(s) {unknown_links} is unknown; their path classes may miss NVLink"
            )
        self.gpu_bus_ids = {gpu.pci_bus_id for gpu in self.node.gpus if gpu.pci_bus_id}
        self.unresolved = {gpu.index: unresolved_links(gpu, self.gpu_bus_ids) for gpu in self.node.gpus}
        self.far_ends = far_end_ids(self.unresolved)
        paths = []
        for a, b in itertools.combinations(self.node.gpus, 2):
            path = self._pair_path(a, b)
            if path is not None:
                paths.append(PairPath(a=a.index, b=b.index, path=path))
        self.node.paths = paths

    def _pair_path(self, a: Gpu, b: Gpu) -> str | None:
        key = f"pair{a.index}-{b.index}.path"
        count = nvlink_count_between(a, b, self.gpu_bus_ids)
        if count:
            return f"NV{count}"
        handles = self._pair_handles(key, a.index, b.index)
        if handles is None:
            return None
        if self.unresolved.get(a.index) and self.unresolved.get(b.index):
            decided = self._nvlink_by_p2p_status(key, (a.index, b.index), handles)
            if decided != "PCIe":
                return decided
        try:
            level = self.call(key, "nvmlDeviceGetTopologyCommonAncestor", *handles)
        except self.nvml.NVMLError_GpuIsLost as exc:
            self.node.unknown_reasons[key] = nvml_reason(exc)
            return None
        if level is None:
            return None
        path = TOPOLOGY_CLASSES.get(int(level))
        if path is None:
            self.node.unknown_reasons[key] = f"NVML returned unknown topology level {level}"
        return path

    def _nvlink_by_p2p_status(
        self,
        key: str,
        pair: tuple[int, int],
        handles: tuple[Any, Any],
    ) -> str | None:
        """NV#, "PCIe" (take the topology's class) or None (unknown) for a pair whose links name no GPU here."""
        shown = ", ".join(sorted({bus or "none" for index in pair for bus in self.unresolved[index]}))
        links = f"their NVLinks report far ends ({shown}) that are no GPU of this node (a VM remaps bus ids)"
        status = self._p2p_status(key, handles, P2P_INDEX["nvlink"])
        note_key = DECIDED_KEY.format(a=pair[0], b=pair[1])
        if status is None:
            self.node.unknown_reasons[key] = (
                f"{links}, and nvmlDeviceGetP2PStatus(NVLINK) failed: {self.node.unknown_reasons[key]}"
            )
            return None
        if status != "ok":
            self.node.unknown_reasons[note_key] = f"{links}; nvmlDeviceGetP2PStatus(NVLINK) = {status}: taken as PCIe"
            return "PCIe"
        count = shared_link_count(*pair, self.unresolved, self.far_ends)
        if count is None:
            self.node.unknown_reasons[key] = (
                f"{links}; nvmlDeviceGetP2PStatus(NVLINK) = ok, but which of their links join them is not told"
            )
            return None
        self.node.unknown_reasons[note_key] = f"{links}; nvmlDeviceGetP2PStatus(NVLINK) = ok: NV{count}"
        return f"NV{count}"

    def _pair_handles(self, key: str, a: int, b: int) -> tuple[Any, Any] | None:
        missing = [index for index in (a, b) if index not in self.handles]
        if missing:
            self.node.unknown_reasons[key] = f"GPU {missing[0]} could not be probed"
            return None
        return self.handles[a], self.handles[b]

    def _p2p(self) -> None:
        statuses = []
        for src, dst in itertools.permutations([gpu.index for gpu in self.node.gpus], 2):
            status = P2PStatus(src=src, dst=dst)
            handles = self._pair_handles(f"p2p{src}-{dst}", src, dst)
            if handles is not None:
                for capability, p2p_index in P2P_INDEX.items():
                    value = self._p2p_status(f"p2p{src}-{dst}.{capability}", handles, p2p_index)
                    setattr(status, capability, value)
            statuses.append(status)
        self.node.p2p = statuses

    def _p2p_status(self, key: str, handles: tuple[Any, Any], p2p_index: int) -> str | None:
        try:
            # A literal int index: pynvml.NVML_P2P_CAPS_INDEX_READ is the tuple (0,).
            code = int(self.nvml.nvmlDeviceGetP2PStatus(handles[0], handles[1], p2p_index))
        except (self.nvml.NVMLError, ctypes.ArgumentError) as exc:
            self.node.unknown_reasons[key] = nvml_reason(exc)
            return None
        return P2P_STATUS_NAMES.get(code, f"unknown({code})")


# --- CUDA order --------------------------------------------------------------------------------


def _uuid_key(value: str) -> str:
    lowered = value.strip().lower()
    return lowered.removeprefix("gpu-")


def _pci_key(value: str) -> str | None:
    try:
        return normalize_pci_bus_id(value)
    except ValueError:
        return None


def join_cuda_indices(node: Node, cuda_devices: Iterable[tuple[int, str | None, str | None]]) -> None:
    """Set each GPU's ``cuda_index`` from ``(cuda_index, uuid, pci_bus_id)`` tuples.

    NVML and CUDA number GPUs differently (and CUDA honours CUDA_VISIBLE_DEVICES), so the two
    are joined by UUID (with or without torch's missing ``GPU-`` prefix), else by PCI bus id.
    """
    by_uuid = {_uuid_key(gpu.uuid): gpu for gpu in node.gpus if gpu.uuid}
    by_pci = {gpu.pci_bus_id: gpu for gpu in node.gpus if gpu.pci_bus_id}
    for cuda_index, device_uuid, pci_bus_id in cuda_devices:
        gpu = by_uuid.get(_uuid_key(device_uuid)) if device_uuid else None
        if gpu is None and pci_bus_id:
            pci = _pci_key(pci_bus_id)
            gpu = by_pci.get(pci) if pci else None
        if gpu is None:
            node.unknown_reasons[f"cuda{cuda_index}"] = (
                f"CUDA device {cuda_index} (uuid {device_uuid}, bus {pci_bus_id}) matches no NVML GPU"
            )
            continue
        gpu.cuda_index = cuda_index
    for gpu in node.gpus:
        if gpu.cuda_index is None:
            node.unknown_reasons[f"gpu{gpu.index}.cuda_index"] = "not visible to CUDA in this process"


def torch_cuda_devices() -> list[tuple[int, str | None, str | None]]:
    """``(cuda_index, uuid, pci_bus_id)`` for every CUDA device torch sees; [] without torch/CUDA."""
    try:
        torch = importlib.import_module("torch")
        if not torch.cuda.is_available():
            return []
        count = int(torch.cuda.device_count())
    except Exception:  # any torch/CUDA failure just means "no CUDA view"
        return []
    return [_torch_device(torch, index) for index in range(count)]


def _torch_device(torch: Any, index: int) -> tuple[int, str | None, str | None]:
    try:
        props = torch.cuda.get_device_properties(index)
    except Exception:  # a GPU CUDA cannot describe joins nothing (reported as not visible to CUDA)
        return index, None, None
    raw_uuid = getattr(props, "uuid", None)
    device_uuid = str(raw_uuid) if raw_uuid is not None else None
    bus, domain, device = (getattr(props, name, None) for name in ("pci_bus_id", "pci_domain_id", "pci_device_id"))
    pci = None
    if isinstance(bus, int) and isinstance(domain, int) and isinstance(device, int):
        pci = f"{domain:04x}:{bus:02x}:{device:02x}.0"
    return index, device_uuid, pci
