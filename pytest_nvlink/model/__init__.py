"""The node model: one shape for what a live probe, a replayed snapshot and parsed evidence know.

Every fact is optional. ``None`` means "this source could not tell", which the checks turn into a
failure (fail closed) rather than a pass. Pairs are stored as lists of records, not tuple-keyed
dicts, so that the model round-trips through JSON unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

from pytest_nvlink.model.host_link import C2CInfo, HostLinkMeasurement

# Path classes as nvidia-smi topo -m prints them, best first; NV# is handled separately.
PCIE_PATH_CLASSES: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")
# NVLink error counters up to NVLink 4 (Hopper): NVML's data-link (DL) counters.
ERROR_COUNTER_NAMES: tuple[str, ...] = ("replay", "recovery", "crc_flit", "crc_data", "ecc_data")
# NVLink 5 (Blackwell and later), where nvml.h marks the DL fields unsupported: the NVML_FI_DEV_NVLINK_COUNT_*
# error fields DCGM's NVLink health watch judges there, and failed link recoveries (the link went down).
NVLINK5_ERROR_COUNTER_NAMES: tuple[str, ...] = (
    "symbol",
    "effective",
    "link_recovery",
    "link_recovery_failed",
    "malformed_packet",
    "buffer_overrun",
    "rcv",
    "rcv_remote",
    "rcv_general",
    "local_link_integrity",
)
ALL_ERROR_COUNTER_NAMES: tuple[str, ...] = ERROR_COUNTER_NAMES + NVLINK5_ERROR_COUNTER_NAMES
P2P_CAPABILITIES: tuple[str, ...] = ("read", "write", "nvlink", "atomics")
# Gpu.mig_mode_current / mig_mode_pending: the only values a source may record (None: it could not tell).
MIG_ENABLED = "enabled"
MIG_DISABLED = "disabled"
MIG_MODES: tuple[str, ...] = (MIG_ENABLED, MIG_DISABLED)

R = TypeVar("R")
_NV_PATH = re.compile(r"^NV(\d+)$")


def nvlink_count_of_path(path: str) -> int | None:
    """Number of bonded NVLinks in a path class such as ``NV18``; None for PCIe classes."""
    match = _NV_PATH.match(path)
    return int(match.group(1)) if match else None


def is_known_path_class(path: str) -> bool:
    return path in PCIE_PATH_CLASSES or path == "X" or nvlink_count_of_path(path) is not None


def gpu_id(index: int) -> str:
    return f"gpu{index}"


def pair_id(a: int, b: int) -> str:
    return f"gpu{a}-gpu{b}"


def normalize_pci_bus_id(raw: str) -> str:
    """Canonical ``dddd:bb:dd.f`` lower-case form of an NVML, sysfs or NCCL bus id.

    NVML pads the domain to 8 hex digits and upper-cases; sysfs and NCCL use 4 lower-case
    digits. Comparing strings across sources would silently mismatch, so every source
    normalizes through here.
    """
    text = raw.strip().lower()
    match = re.fullmatch(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.([0-7]))?", text)
    if not match:
        raise ValueError(f"not a PCI bus id: {raw!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function or '0')}"


@dataclass(slots=True)
class NvLinkInfo:
    """One NVLink of one GPU."""

    link: int
    active: bool | None = None
    version: int | None = None  # NVLink generation (4 on H100), not NVML's enum value
    speed_gbps: float | None = None  # per direction, GB/s = 1e9 bytes/s
    remote_type: str | None = None  # "gpu" | "switch" | "ibmnpu" | "unknown"
    remote_pci_bus_id: str | None = None
    errors: dict[str, int] | None = None  # keys from ERROR_COUNTER_NAMES, or NVLINK5_ERROR_COUNTER_NAMES on NVLink 5
    errors_run: dict[str, int] | None = None


@dataclass
class FabricInfo:
    """NVSwitch fabric registration as NVML reports it (Hopper and newer)."""

    state: str  # "not_supported" | "not_started" | "in_progress" | "completed"
    status: str | None = None  # "success" or an NVML error name; meaningful when completed
    clique_id: int | None = None
    cluster_uuid: str | None = None
    degraded_bandwidth: bool | None = None
    health_summary: str | None = None  # nvidia-smi -q Fabric Health Summary: "healthy", "unhealthy", ...
    # Every unhealthy item of the decoded health mask and summary ("route_unhealthy",
    # "incorrect_configuration:insufficient_nvlinks", "summary:unhealthy", ...); [] healthy; None: the
    # source reports no health (a driver before R550, an nvidia-smi -q without the Health block).
    health_problems: list[str] | None = None


@dataclass
class Gpu:
    """One GPU, indexed as NVML and nvidia-smi number it."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    cuda_index: int | None = None  # CUDA's numbering differs from NVML's; joined by UUID/PCI
    serial: str | None = None
    vbios: str | None = None
    # The CPU NUMA node the GPU hangs off (sysfs ``numa_node`` of its PCI device; nvidia-smi topo -m's
    # "NUMA Affinity"). Not NVML's nvmlDeviceGetNumaNodeId, which is the next field.
    numa_node: int | None = None
    # GPU memory exposed as a NUMA node (nvmlDeviceGetNumaNodeId; Grace-Hopper/Blackwell coherent
    # systems). NVML answers NotSupported on x86 hosts, where GPU memory is no NUMA node.
    gpu_memory_numa_node: int | None = None
    cpu_affinity: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_gen_gpu_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    # Highest current PCIe generation sampled while the measurement campaign loaded the GPUs; the
    # current generation drops at idle, so only a sample under load says what the link trained to.
    pcie_gen_loaded: int | None = None
    # None: the source could not tell; []: the GPU has no NVLink.
    nvlinks: list[NvLinkInfo] | None = None
    fabric: FabricInfo | None = None
    virtualization_mode: str | None = None  # "none" | "passthrough" | "vgpu" | "host_vgpu" | ...
    # MIG mode (nvmlDeviceGetMigMode): "enabled" | "disabled"; pending is what applies after the next reset.
    mig_mode_current: str | None = None
    mig_mode_pending: str | None = None
    c2c: C2CInfo | None = None  # NVLink-C2C to a Grace CPU; None on PCIe hosts or where unread
    # Set when the GPU is enumerated but unusable (NVML GpuIsLost, fell off the bus).
    problem: str | None = None
    # A node spanning several hosts (a rack as one NVLink domain): the host (tray) the GPU sits in and
    # its index there. None on a one-host node.
    host: str | None = None
    local_index: int | None = None

    def active_link_count(self) -> int | None:
        if self.nvlinks is None or any(link.active is None for link in self.nvlinks):
            return None
        return sum(1 for link in self.nvlinks if link.active)


def error_counter_names_of(gpu: Gpu) -> tuple[str, ...]:
    """The NVLink error counters a GPU has, by what its source read, else by its links' generation.

    NVLink 5 (Blackwell and later) has its own set; NVLink 1-4 the DL set. A source that read either
    set decides; where it read none, NVLink 5 links mean the NVLink 5 set.
    """
    return link_error_counter_names([(link.version, link.errors, link.errors_run) for link in gpu.nvlinks or []])


def link_error_counter_names(
    links: list[tuple[int | None, dict[str, int] | None, dict[str, int] | None]],
) -> tuple[str, ...]:
    """As :func:`error_counter_names_of`, from ``(version, errors, errors_run)`` of each link."""
    read = {name for _, errors, run in links for name in (*(errors or {}), *(run or {}))}
    if read & set(NVLINK5_ERROR_COUNTER_NAMES):
        return NVLINK5_ERROR_COUNTER_NAMES
    if read & set(ERROR_COUNTER_NAMES):
        return ERROR_COUNTER_NAMES
    if any((version or 0) >= 5 for version, _, _ in links):
        return NVLINK5_ERROR_COUNTER_NAMES
    return ERROR_COUNTER_NAMES


@dataclass(slots=True)
class PairPath:
    """The path class between two GPUs (unordered, a < b), as nvidia-smi topo -m prints it."""

    a: int
    b: int
    path: str  # "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"


@dataclass(slots=True)
class P2PStatus:
    """NVML P2P status for the ordered pair src -> dst; each value "ok" or the NVML reason."""

    src: int
    dst: int
    read: str | None = None
    write: str | None = None
    nvlink: str | None = None
    atomics: str | None = None

    def get(self, capability: str) -> str | None:
        value: str | None = getattr(self, capability)
        return value


@dataclass(slots=True)
class P2PMeasurement:
    """One figure measured between two GPUs: unidirectional/bidirectional GB/s or latency in µs."""

    src: int
    dst: int
    # "unidirectional" | "bidirectional" | "latency" (copy engines within a host) | "sendrecv" (send/recv
    # between two ranks, both ways at once, GB/s per direction; the only way across hosts of a rack)
    kind: str
    value: float | None  # GB/s for bandwidth, µs for latency; None when it could not be measured
    unit: str
    bytes_copied: int | None = None
    nvlink_bytes: int | None = None  # NVLink counter delta summed over both GPUs' TX
    pcie_bytes: int | None = None  # PCIe counter delta summed over both GPUs' TX
    counters_note: str | None = None  # why counters are missing, when they are
    can_access_peer: bool | None = None
    error: str | None = None
    source: str | None = None  # e.g. "torch", "p2pBandwidthLatencyTest: file.txt"
    # Bidirectional figures only: True when the figure adds both directions (p2pBandwidthLatencyTest,
    # the live engine), False when it is per direction (nvbandwidth >= 0.6); None when unknown.
    bidirectional_sum: bool | None = None
    # How it was measured (size_mib, iterations, warmup, pair_mode, ...); None: not recorded (schema 1,
    # evidence). A baseline comparison needs equal conditions per figure.
    conditions: dict[str, str] | None = None


# How P2PMeasurement.error starts when the tool's own data check failed: a fault, judged as a failure,
# not a missing figure (nvbandwidth's "Invalid value when checking the pattern" abort).
WRONG_DATA = "WRONG DATA"


@dataclass
class CollectiveMeasurement:
    """One collective at one size, with nccl-tests' algbw/busbw definitions."""

    op: str  # "all_reduce" | "all_gather" | "reduce_scatter" | "broadcast" | "all_to_all" | "sendrecv"
    size_bytes: int
    world_size: int
    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    correct: bool | None = None
    backend: str | None = None
    nvls_available: bool | None = None
    error: str | None = None
    source: str | None = None
    # NVML index of the GPU each rank ran on, in rank order, where the source says so (None: it does not).
    rank_gpus: list[int] | None = None
    conditions: dict[str, str] | None = None  # as P2PMeasurement.conditions (iterations, warmup, backend, ...)


@dataclass
class TransportChannel:
    """One NCCL channel connection as the INFO log states it (``Channel NN/N : R[D] -> R[D] via ...``).

    ``D`` is the NVML index of the rank's GPU on the rank's own host: NCCL prints ``peerInfo->nvmlDev``
    there (NVIDIA/nccl src/transport/p2p.cc, shm.cc), not the CUDA index, so it needs no remapping when
    CUDA_VISIBLE_DEVICES reorders devices (rank 1 of a two-pod H20 log reads ``cudaDev 0 nvmlDev 2`` and
    its channels ``1[2] -> 0[0]``). On a node of several hosts (a rack) it restarts on every host, so
    there a channel's GPUs are found through its ranks, never its ``D``.
    """

    channel: int
    src_rank: int
    src_dev: int
    dst_rank: int
    dst_dev: int
    transport: str  # "P2P", "SHM", "NET", "NVLS", "COLLNET"
    detail: str  # the text after "via", e.g. "P2P/CUMEM/read"


@dataclass
class NcclRank:
    """One rank of an NCCL communicator as its INFO log names it (``ncclCommInitRank`` lines).

    A channel line names ranks and each rank's NVML device on its own host; which host that is, and so
    whether a channel crosses hosts (trays of a rack), only these records say.
    """

    rank: int
    host: str | None = None
    nvml_dev: int | None = None


@dataclass
class MnnvlClique:
    """NCCL's multi-node NVLink decision on one rank, as its INFO log states it.

    ``MNNVL 1 cliqueId 2786 cliqueSize 4 cliqueRank 0 nvlDomainSize 4``: the clique the rank's GPU
    registered in and how many of the job's ranks share it.

    ``enabled`` False (``MNNVL 0``) means NCCL left multi-node NVLink unused and routes between hosts
    through the network. Clique size and NVLink domain size count the job's ranks, not the rack's GPUs.
    """

    host: str | None
    enabled: bool
    rank: int | None = None  # from the rank's ncclCommInitRank line in the same process
    clique_id: int | None = None
    clique_size: int | None = None
    clique_rank: int | None = None
    nvl_domain_size: int | None = None


@dataclass
class NcclAudit:
    """What NCCL's own log says about the transports it picked."""

    channels: list[TransportChannel] = field(default_factory=list)
    nvls_available: bool | None = None
    nvls_channels: int | None = None
    p2p_disabled_warnings: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    last_warn: str | None = None
    source: str | None = None
    ranks: list[NcclRank] = field(default_factory=list)
    mnnvl: list[MnnvlClique] = field(default_factory=list)
    # NCCL's own "nNodes N" (its comm line): the run spanned N servers; None where the log does not say.
    nodes: int | None = None


@dataclass
class Measurements:
    """The figures of a node: P2P per pair, collectives, the NCCL transport audit and each GPU's host link."""

    p2p: list[P2PMeasurement] = field(default_factory=list)
    collectives: list[CollectiveMeasurement] = field(default_factory=list)
    nccl: NcclAudit | None = None
    host_link: list[HostLinkMeasurement] = field(default_factory=list)


@dataclass
class GpuList:
    """Whether ``Node.gpus`` lists every GPU of the node, and which source says so.

    Some tools print only the GPUs they were pointed at (``nvidia-smi nvlink -s -i 3``, nccl-tests
    ``-g 4``), so the highest index they name is a lower bound for the count, not the count.
    """

    complete: bool  # False: len(gpus) is only a lower bound (GPUs up to the highest index named)
    source: str  # the file(s) the list comes from


@dataclass(slots=True)
class XidEvent:
    """One driver error event in the window a source watched: an Xid of a GPU, an NVSwitch SXid, a Fabric Manager
    line.

    ``gpu`` is the node GPU the event names (a kernel log names it by PCI bus id); None when it names none of
    the node's GPUs (an SXid names an NVSwitch, a Fabric Manager line no device).
    """

    gpu: int | None
    xid: int | None  # the Xid or SXid number; None for a Fabric Manager line
    # Seconds from the start of the window (EventWindow) to the event; None when the source gave no time.
    at_s: float | None
    text: str  # the log line, or what NVML reported
    kind: str = "xid"  # "xid" | "sxid" | "fabric_manager"
    pci_bus_id: str | None = None  # the device the line names, normalized
    stamp: str | None = None  # the time as the source printed it ("[ 1234.567890]", an ISO time)


@dataclass(slots=True)
class CampaignSpan:
    """When a measurement campaign ran, in seconds from the start of the event window (live runs)."""

    name: str  # "p2p" | "collectives" | ...
    start_s: float
    end_s: float


@dataclass
class EventWindow:
    """The span a source watched for driver error events: a live run's NVML listening, or a kernel log's lines.

    An event list is only as good as its window: "no Xid" means no Xid between ``start`` and ``length_s``
    later, on the GPUs in ``gpus``.
    """

    source: str  # "NVML events" | "kernel log: <files>"
    start: str | None  # when it began, as the source tells it: UTC ISO time (live) or the log's first stamp
    length_s: float | None  # None when the source's stamps give no duration
    gpus: list[int] = field(default_factory=list)  # the GPUs whose events the window covers
    end: str | None = None  # the log's last stamp; None for a live run (start + length_s)
    campaigns: list[CampaignSpan] = field(default_factory=list)


# The versions a baseline comparison lists when they changed, in the order the header names them.
VERSION_NAMES: tuple[str, ...] = ("nccl", "torch", "cuda_runtime", "fabric_manager", "kernel")


@dataclass
class Environment:
    """What a run was made with, so that a later run can be compared with it (snapshot schema 2)."""

    # "nccl", "torch", "cuda_runtime", "fabric_manager", "kernel", "plugin": where the source could tell.
    versions: dict[str, str] = field(default_factory=dict)
    suite: str | None = None
    suite_file: str | None = None
    thresholds: list[str] = field(default_factory=list)
    outcome: str | None = None  # "passed" | "failed" | "partial" | "interrupted": how the run that saved it ended
    saved_utc: str | None = None


@dataclass
class Node:
    """Everything known about one server, whichever source it came from."""

    source: str  # "live" | "replay" | "evidence"
    host: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    hypervisor: bool | None = None
    gpus: list[Gpu] = field(default_factory=list)
    # None: NVML enumerated every GPU (live probe and its snapshots); evidence always says.
    gpu_list: GpuList | None = None
    paths: list[PairPath] | None = None
    p2p: list[P2PStatus] | None = None
    nvlink_bw_mode: str | None = None
    fabric_manager_note: str | None = None
    # Problems that stopped the source from answering at all (no driver, NVML missing, ...).
    probe_errors: list[str] = field(default_factory=list)
    # Per-fact notes on why something is unknown, keyed like "gpu3.nvlinks" or "paths".
    unknown_reasons: dict[str, str] = field(default_factory=dict)
    # Where each family of facts came from (file names for evidence), keyed like "paths".
    provenance: dict[str, str] = field(default_factory=dict)
    # Evidence only: per file, damage that touched no judged fact and files left out, for the summary.
    evidence_notes: dict[str, list[str]] = field(default_factory=dict)
    measurements: Measurements = field(default_factory=Measurements)
    error_window_s: float | None = None
    # None: the source recorded no environment (schema-1 snapshots, evidence).
    environment: Environment | None = None
    # Driver error events (Xid, SXid, Fabric Manager) and the window watched for them; None: the source watched
    # for none (snapshots before events were recorded, evidence without a kernel log).
    xid_events: list[XidEvent] | None = None
    event_window: EventWindow | None = None

    def gpu(self, index: int) -> Gpu | None:
        gpus = self.gpus
        if 0 <= index < len(gpus) and gpus[index].index == index:
            return gpus[index]  # listed in NVML order, as a probe and its snapshots list them
        return _lookup(self, "gpus", gpus, lambda gpu: gpu.index, index)

    def path(self, a: int, b: int) -> str | None:
        if self.paths is None:
            return None
        found = _lookup(self, "paths", self.paths, lambda p: (p.a, p.b), (min(a, b), max(a, b)))
        return None if found is None else found.path

    def p2p_status(self, src: int, dst: int) -> P2PStatus | None:
        if self.p2p is None:
            return None
        return _lookup(self, "p2p", self.p2p, lambda s: (s.src, s.dst), (src, dst))

    def virtualization(self) -> str | None:
        """The strongest virtualization mode any GPU reports, or None if none reports one."""
        modes = {gpu.virtualization_mode for gpu in self.gpus if gpu.virtualization_mode}
        for mode in ("vgpu", "passthrough", "host_vgpu", "host_vsga"):
            if mode in modes:
                return mode
        return "none" if modes else None

    def unknown_reason(self, key: str, default: str) -> str:
        """The reason recorded for ``key`` or, failing that, for the first fact under it (``gpu3.nvlink``)."""
        if key in self.unknown_reasons:
            return self.unknown_reasons[key]
        # "gpu1.nvlink" covers "gpu1.nvlink5.speed_gbps" but "p2p1-2" must not cover "p2p1-20".
        nested = sorted(k for k in self.unknown_reasons if k.startswith(key) and not k[len(key) :][:1].isdigit())
        return f"{self.unknown_reasons[nested[0]]} ({nested[0]})" if nested else default


def _lookup(node: Node, name: str, records: list[R], key_of: Callable[[R], Hashable], key: Hashable) -> R | None:
    """The first record of ``records`` whose key is ``key``, through a position index kept on the node.

    A 72-GPU node has 5,112 ordered pairs and every pair check looks one up, so a scan per lookup is
    quadratic. The index is rebuilt when the list is replaced or changes length, and a hit is checked
    against the list, so an entry replaced in place is never answered from a stale index; a miss scans,
    as an edited list may hold the key at a position the index does not know.
    """
    cache: dict[str, tuple[int, int, dict[Hashable, int]]] | None = node.__dict__.get("_lookup_index")
    if cache is None:
        cache = node.__dict__["_lookup_index"] = {}
    held = cache.get(name)
    if held is None or held[0] != id(records) or held[1] != len(records):
        positions: dict[Hashable, int] = {}
        for at, record in enumerate(records):
            positions.setdefault(key_of(record), at)
        held = cache[name] = (id(records), len(records), positions)
    position = held[2].get(key)
    if position is not None:
        if key_of(records[position]) == key:
            return records[position]
        cache.pop(name)  # an entry was replaced in place: the next lookup rebuilds the index
    return next((record for record in records if key_of(record) == key), None)
