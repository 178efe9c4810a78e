"""Merging parsed evidence into one Node, with a conflict check on every fact two files can both state."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_nvlink.model import (
    CollectiveMeasurement,
    FabricInfo,
    Gpu,
    GpuList,
    NcclAudit,
    Node,
    NvLinkInfo,
    P2PMeasurement,
    P2PStatus,
    PairPath,
    normalize_pci_bus_id,
)
from pytest_nvlink.model.merge import MergeConflict, merge_into
from pytest_nvlink.sources.evidence.parsers.nccl_tests import NcclTestsResult
from pytest_nvlink.sources.evidence.parsers.nvbandwidth import NvbandwidthResult, Testcase
from pytest_nvlink.sources.evidence.parsers.nvlink import LinkInfo, NvlinkReport
from pytest_nvlink.sources.evidence.parsers.p2p_latency import P2PLatencyResult
from pytest_nvlink.sources.evidence.parsers.smi_query import SmiGpu, SmiQuery
from pytest_nvlink.sources.evidence.parsers.topo import TopoMatrix, TopoP2P

_SMI_GPU_KEYS = (
    "pci_bus_id",
    "pcie_gen_max",
    "pcie_gen_current",
    "pcie_gen_gpu_max",
    "pcie_width_max",
    "pcie_width_current",
)


class EvidenceError(Exception):
    """An evidence file that cannot be used: unreadable, of unknown kind, or unparsable."""


class EvidenceConflict(EvidenceError):
    """Two evidence files state different values for the same fact."""


@dataclass
class _Fact:
    value: object
    file: str


@dataclass
class _GpuFacts:
    facts: dict[str, _Fact] = field(default_factory=dict)  # "name", "uuid", "numa_node", "cpu_affinity"
    links: dict[int, dict[str, _Fact]] = field(default_factory=dict)  # link -> "active", "speed", ...
    errors: dict[int, dict[str, int]] = field(default_factory=dict)
    all_inactive: str | None = None  # file that said "all links are inactive"


class Merger:
    """Collects facts from parsed files; ``build`` turns them into a Node."""

    def __init__(self) -> None:
        self.counts: list[tuple[int, str]] = []  # exact GPU counts: (count, file)
        self.lower_bounds: list[tuple[int, str]] = []  # "at least n GPUs": (n, file)
        self.gpus: dict[int, _GpuFacts] = {}
        self.paths: dict[tuple[int, int], _Fact] = {}
        self.p2p: dict[tuple[int, int, str], _Fact] = {}
        self.p2p_measurements: list[P2PMeasurement] = []
        self.collectives: list[CollectiveMeasurement] = []
        self.nccl: NcclAudit | None = None
        self.provenance: dict[str, list[str]] = {}
        self.unknown: dict[str, str] = {}
        self.hosts: dict[str, str] = {}  # host name -> the file that names it
        self.snapshot_node: tuple[Node, str] | None = None
        self.node_facts: dict[str, _Fact] = {}  # "driver_version", from nvidia-smi -q

    # --- bookkeeping ---------------------------------------------------------------------------

    def _note(self, family: str, file: str) -> None:
        files = self.provenance.setdefault(family, [])
        if file not in files:
            files.append(file)

    def _gpu(self, index: int) -> _GpuFacts:
        return self.gpus.setdefault(index, _GpuFacts())

    @staticmethod
    def _agree(store: dict[str, _Fact], key: str, value: object, file: str, what: str) -> None:
        known = store.get(key)
        if known is None:
            store[key] = _Fact(value, file)
        elif known.value != value:
            raise EvidenceConflict(f"{what}: {known.file} says {known.value!r} but {file} says {value!r}")

    def _gpu_fact(self, index: int, key: str, value: object, file: str) -> None:
        if value is not None:
            self._agree(self._gpu(index).facts, key, value, file, f"GPU {index} {key.replace('_', ' ')}")

    def _count(self, count: int, file: str) -> None:
        # Checked as soon as a second file claims a count, so the root disagreement is reported first.
        for known, known_file in self.counts:
            if known != count:
                raise EvidenceConflict(f"GPU count: {known_file} says {known} but {file} says {count}")
        self.counts.append((count, file))
        self._note("inventory", file)

    def _host(self, host: str, file: str) -> None:
        # Facts of two servers merged into one node would judge a machine that does not exist.
        for known, known_file in self.hosts.items():
            if known != host:
                raise EvidenceConflict(
                    f"host: {known_file} comes from host {known!r} but {file} from host {host!r}; "
                    "evidence must come from the one server being judged"
                )
        self.hosts.setdefault(host, file)

    # --- per tool ------------------------------------------------------------------------------

    def add_topo(self, topo: TopoMatrix, file: str) -> None:
        self._count(topo.gpu_count, file)
        if topo.pcie_only:
            # topo -mp never prints NV#; its PCIe classes must not be read as "no NVLink".
            self.unknown.setdefault("paths", f"{file} is nvidia-smi topo -mp (PCIe paths only, NVLink not shown)")
        else:
            for (a, b), path in topo.paths.items():
                self._path(a, b, path, file)
            self._note("paths", file)
        for gpu in range(topo.gpu_count):
            self._gpu_fact(gpu, "cpu_affinity", topo.cpu_affinity.get(gpu), file)
            numa = topo.numa_affinity.get(gpu)
            self._gpu_fact(gpu, "numa_node", int(numa) if numa and numa.isdigit() else None, file)

    def _path(self, a: int, b: int, path: str, file: str) -> None:
        known = self.paths.setdefault((a, b), _Fact(path, file))
        if known.value != path:
            raise EvidenceConflict(f"path GPU{a}-GPU{b}: {known.file} says {known.value!r} but {file} says {path!r}")

    def add_topo_p2p(self, topo: TopoP2P, file: str) -> None:
        self._count(topo.gpu_count, file)
        usable = [c for c in topo.capabilities if c in ("read", "write", "nvlink", "atomics")]
        for (src, dst), status in topo.status.items():
            for capability in usable:
                self._p2p(src, dst, capability, status, file)
        if usable:
            self._note("p2p", file)
        if "nvlink" not in usable:
            self.unknown.setdefault(
                "p2p", f"{file} (topo -p2p) does not state NVLink P2P capability; add `nvidia-smi topo -p2p n`"
            )

    def _p2p(self, src: int, dst: int, capability: str, status: str, file: str) -> None:
        known = self.p2p.get((src, dst, capability))
        if known is None:
            self.p2p[(src, dst, capability)] = _Fact(status, file)
        elif (known.value == "ok") != (status == "ok"):
            raise EvidenceConflict(
                f"P2P {capability} GPU{src}->GPU{dst}: {known.file} says {known.value!r} but {file} says {status!r}"
            )

    def add_nvlink(self, report: NvlinkReport, file: str) -> None:
        self.lower_bounds.append((max(g.index for g in report.gpus) + 1, file))
        self._note("inventory", file)
        for gpu in report.gpus:
            self._gpu_fact(gpu.index, "name", gpu.name, file)
            self._gpu_fact(gpu.index, "uuid", gpu.uuid, file)
            facts = self._gpu(gpu.index)
            if gpu.all_inactive:
                facts.all_inactive = file
            for link in gpu.links:
                self._add_link(gpu.index, link, file)
        if report.kinds - {"nvlink_errors"}:
            self._note("nvlinks", file)
        if "nvlink_errors" in report.kinds:
            self._note("nvlink_errors", file)

    def _add_link(self, gpu: int, link: LinkInfo, file: str) -> None:
        facts = self._gpu(gpu)
        store = facts.links.setdefault(link.link, {})
        what = f"GPU {gpu} NVLink {link.link}"
        if link.active is not None:
            self._agree(store, "active", link.active, file, f"{what} active")
        if link.speed_gbps is not None:
            self._agree(store, "speed", link.speed_gbps, file, f"{what} speed (GB/s)")
        if link.remote is not None:
            self._agree(store, "remote", link.remote, file, f"{what} remote device")
        if link.errors:
            counters = facts.errors.setdefault(link.link, {})
            for key, value in link.errors.items():
                # Counters only grow; two captures at different times legitimately differ.
                counters[key] = max(value, counters.get(key, 0))

    def add_p2p_latency(self, result: P2PLatencyResult, file: str) -> None:
        count = result.gpu_count or _square(result.matrices)
        if count:
            self._count(count, file)
        for device in result.devices:
            self._gpu_fact(device.index, "name", device.name, file)
        for (src, dst), can in result.can_access.items():
            for capability in ("read", "write"):
                self._p2p(src, dst, capability, "ok" if can else "not_supported", file)
        if result.can_access:
            # CUDA's "can access peer" also holds for P2P over PCIe, so it covers no NVLink P2P check.
            self.unknown.setdefault(
                "p2p",
                f"{file} (p2pBandwidthLatencyTest) states CUDA peer access, which P2P over PCIe also grants, not "
                "NVLink P2P capability; add `nvidia-smi topo -p2p n` output",
            )
        source = f"p2pBandwidthLatencyTest: {file}"
        for kind in ("unidirectional", "bidirectional", "latency"):
            matrix = result.matrices.get((kind, True))
            for (row, col), value in sorted((matrix or {}).items()):
                if row == col:
                    continue
                src, dst = (row, col) if result.data_flows_row_to_column else (col, row)
                unit = "us" if kind == "latency" else "GB/s"
                self.p2p_measurements.append(
                    P2PMeasurement(
                        src,
                        dst,
                        kind,
                        value,
                        unit,
                        can_access_peer=result.can_access.get((src, dst)),
                        error=None if value is not None else "not a number in the output",
                        source=source,
                    )
                )
            if matrix:
                self._note("p2p_bandwidth", file)

    def add_nvbandwidth(self, result: NvbandwidthResult, file: str) -> None:
        gpu_cases = [c for c in result.testcases.values() if c.row_kind == c.column_kind == "GPU"]
        if result.devices:
            self._count(len(result.devices), file)
        elif gpu_cases:
            self._count(_case_size(gpu_cases[0]), file)
        for index, name in result.devices.items():
            self._gpu_fact(index, "name", name, file)
        for case in gpu_cases:
            self._add_nvbandwidth_case(case, file)

    def _add_nvbandwidth_case(self, case: Testcase, file: str) -> None:
        if "device_to_device" not in case.name:
            return
        if case.unit == "ns":
            kind, unit, scale = "latency", "us", 1e-3
        else:
            kind, unit, scale = ("bidirectional" if case.bidirectional else "unidirectional"), "GB/s", 1.0
        # Newer versions print per-direction matrices and a "Total" (the sum, judged); a bidirectional testcase
        # with one matrix only reports each direction, which the judge doubles to compare with the sum floor.
        summed = ("total" in case.title.lower().split()) if kind == "bidirectional" else None
        for (row, col), value in sorted(case.matrix.items()):
            if row == col:
                continue
            src, dst = case.source_and_destination(row, col)
            self.p2p_measurements.append(
                P2PMeasurement(
                    src,
                    dst,
                    kind,
                    None if value is None else value * scale,
                    unit,
                    error="nvbandwidth printed N/A" if value is None else None,
                    source=f"nvbandwidth {case.name}: {file}",
                    bidirectional_sum=summed,
                )
            )
        self._note("p2p_bandwidth", file)

    def add_nccl_tests(self, result: NcclTestsResult, file: str) -> None:
        if len(result.hosts) == 1:
            # Device lines of a single-host run name real GPUs of this node; a subset is possible (-g 4).
            self._host(result.hosts[0], file)
            self.lower_bounds.append((max(d.device for d in result.devices) + 1, file))
            self._note("inventory", file)
            for device in result.devices:
                self._gpu_fact(device.device, "name", device.name, file)
        for row in result.rows:
            timing, in_place = row.out_of_place, row.in_place
            wrongs = [timing.wrong, in_place.wrong]
            correct = None if None in wrongs else all(w == 0 for w in wrongs)
            self.collectives.append(
                CollectiveMeasurement(
                    op=result.op or "unknown",
                    size_bytes=row.size_bytes,
                    world_size=result.nranks or 0,
                    time_us=timing.time_us,
                    algbw_gbps=timing.algbw_gbps,
                    busbw_gbps=timing.busbw_gbps,
                    correct=correct,
                    backend="nccl",
                    source=f"nccl-tests: {file}",
                    rank_gpus=_rank_gpus(result),
                )
            )
        self._note("collectives", file)

    def add_smi_query(self, result: SmiQuery, file: str) -> list[str]:
        """Inventory, PCIe link and fabric facts of ``nvidia-smi -q``; returns notes for the coverage list."""
        notes: list[str] = []
        if result.driver_version:
            self._agree(self.node_facts, "driver_version", result.driver_version, file, "driver version")
        if result.complete:
            self._count(len(result.gpus), file)
        for gpu in result.gpus:
            index = gpu.ordinal if result.complete else _int_or_none(gpu.get("minor_number"))
            if index is None:
                notes.append(f"GPU {gpu.bus_id}: not every GPU is in the file and no Minor Number; not read")
                continue
            if not result.complete:
                notes.append(f"GPU {gpu.bus_id} taken as GPU {index} from its Minor Number (partial nvidia-smi -q)")
                self.lower_bounds.append((index + 1, file))
                self._note("inventory", file)
            self._add_smi_gpu(index, gpu, file)
        return notes

    def _add_smi_gpu(self, index: int, gpu: SmiGpu, file: str) -> None:
        self._gpu_fact(index, "name", gpu.get("name"), file)
        self._gpu_fact(index, "uuid", gpu.get("uuid"), file)
        self._gpu_fact(index, "pci_bus_id", normalize_pci_bus_id(gpu.bus_id), file)
        self._note("platform", file)
        for key in _SMI_GPU_KEYS[1:]:
            self._gpu_fact(index, key, _int_or_none((gpu.get(key) or "").removesuffix("x")), file)
        fabric = _smi_fabric(gpu)
        if fabric is not None:
            self._gpu_fact(index, "fabric", fabric, file)

    def add_named_gpu(self, index: int, name: str, pci_bus_id: str | None, file: str) -> None:
        """A GPU that a run over several hosts names (nvbandwidth's "Process N (host): device M" lines)."""
        self.lower_bounds.append((index + 1, file))
        self._note("inventory", file)
        self._gpu_fact(index, "name", name, file)
        if pci_bus_id is not None:
            self._gpu_fact(index, "pci_bus_id", normalize_pci_bus_id(pci_bus_id), file)

    def add_failed_collective(self, op: str, world_size: int, error: str, file: str) -> None:
        """A collective run that produced no figure at all (hung, killed): evidence of failure, not absence."""
        self.collectives.append(
            CollectiveMeasurement(
                op=op,
                size_bytes=0,
                world_size=world_size,
                time_us=None,
                algbw_gbps=None,
                busbw_gbps=None,
                correct=False,
                backend="nccl",
                error=error,
                source=f"nccl-tests: {file}",
            )
        )
        self._note("collectives", file)

    def add_nccl_audit(self, audit: NcclAudit, files: list[str]) -> None:
        self.nccl = audit
        for file in files:
            self._note("nccl_transport", file)

    def add_snapshot(self, node: Node, file: str) -> None:
        """Register the snapshot's facts that text files can also state; ``build`` carries all the rest."""
        if self.snapshot_node is not None:
            raise EvidenceError(f"{file}: only one snapshot per evidence set ({self.snapshot_node[1]} is another)")
        self.snapshot_node = (node, file)
        if node.gpu_list is None or node.gpu_list.complete:
            self._count(len(node.gpus), file)
        else:
            self.lower_bounds.append((max((gpu.index for gpu in node.gpus), default=-1) + 1, file))
            self._note("inventory", file)
        if node.host is not None:
            self._host(node.host, file)
        for gpu in node.gpus:
            for key in ("name", "uuid", "numa_node", "cpu_affinity"):
                self._gpu_fact(gpu.index, key, getattr(gpu, key), file)
        for pair in node.paths or []:
            self._path(pair.a, pair.b, pair.path, file)
        for status in node.p2p or []:
            for capability in ("read", "write", "nvlink", "atomics"):
                value = status.get(capability)
                if value is not None:
                    self._p2p(status.src, status.dst, capability, value, file)
        for family in _snapshot_families(node):
            self._note(family, file)

    # --- result ----------------------------------------------------------------------------------

    def build(self) -> Node:
        node = Node(source="evidence")
        count, node.gpu_list = self._gpu_list()
        node.gpus = [self._build_gpu(index) for index in range(count)]
        node.paths = self._build_paths()
        node.p2p = self._build_p2p()
        node.measurements.p2p = list(self.p2p_measurements)
        node.measurements.collectives = list(self.collectives)
        node.measurements.nccl = self.nccl
        if node.driver_version is None and "driver_version" in self.node_facts:
            node.driver_version = str(self.node_facts["driver_version"].value)
        if len(self.hosts) == 1:
            node.host = next(iter(self.hosts))
        node.provenance = {family: ", ".join(files) for family, files in self.provenance.items()}
        node.unknown_reasons.update(self.unknown)
        if self.snapshot_node is not None:
            self._carry_snapshot(node, *self.snapshot_node)
        return node

    def _carry_snapshot(self, node: Node, snapshot: Node, file: str) -> None:
        """Every field of the snapshot, generically, so that a fact the text files cannot state is not lost."""
        try:
            merge_into(node, snapshot, "node", skip=frozenset({"source", "provenance", "gpu_list"}))
        except MergeConflict as exc:
            others = sorted({f for files in self.provenance.values() for f in files} - {file})
            raise EvidenceConflict(
                f"{exc.where}: {file} says {exc.theirs!r} but {', '.join(others) or 'other files'} say {exc.ours!r}"
            ) from None

    def _gpu_list(self) -> tuple[int, GpuList | None]:
        """How many GPUs the node has and whether a file lists them all or only names some (a lower bound)."""
        if self.counts:  # _count already made sure they all agree
            count, file = self.counts[0]
            for bound, bound_file in self.lower_bounds:
                if bound > count:
                    raise EvidenceConflict(f"GPU count: {file} says {count} but {bound_file} names GPU {bound - 1}")
            return count, GpuList(complete=True, source=", ".join(dict.fromkeys(f for _, f in self.counts)))
        count = max([bound for bound, _ in self.lower_bounds] + [max(self.gpus, default=-1) + 1])
        if not count:
            return 0, None
        files = ", ".join(dict.fromkeys(file for _, file in self.lower_bounds)) or "the evidence files"
        return count, GpuList(complete=False, source=files)

    def _build_gpu(self, index: int) -> Gpu:
        facts = self.gpus.get(index, _GpuFacts())
        values = {key: fact.value for key, fact in facts.facts.items()}
        gpu = Gpu(index=index)
        gpu.name = _str_or_none(values.get("name"))
        gpu.uuid = _str_or_none(values.get("uuid"))
        gpu.cpu_affinity = _str_or_none(values.get("cpu_affinity"))
        numa = values.get("numa_node")
        gpu.numa_node = numa if isinstance(numa, int) else None
        gpu.nvlinks = self._build_links(facts)
        for key in _SMI_GPU_KEYS:
            if key in values:  # nvidia-smi -q only
                setattr(gpu, key, values[key])
        fabric = values.get("fabric")
        gpu.fabric = fabric if isinstance(fabric, FabricInfo) else None
        return gpu

    def _build_links(self, facts: _GpuFacts) -> list[NvLinkInfo] | None:
        if facts.all_inactive is not None and not facts.links:
            return []  # nvidia-smi: "all links are inactive"; the per-link list is not printed
        if not facts.links and not facts.errors:
            return None
        links = []
        for number in sorted(set(facts.links) | set(facts.errors)):
            store = {key: fact.value for key, fact in facts.links.get(number, {}).items()}
            active, speed, remote = store.get("active"), store.get("speed"), store.get("remote")
            links.append(
                NvLinkInfo(
                    link=number,
                    active=active if isinstance(active, bool) else None,
                    speed_gbps=speed if isinstance(speed, float) else None,
                    remote_type=_remote_type(remote),
                    remote_pci_bus_id=_bus_or_none(remote),
                    errors=dict(facts.errors[number]) if number in facts.errors else None,
                )
            )
        return links

    def _build_paths(self) -> list[PairPath] | None:
        if not self.paths:
            return None
        return [PairPath(a, b, str(fact.value)) for (a, b), fact in sorted(self.paths.items())]

    def _build_p2p(self) -> list[P2PStatus] | None:
        if not self.p2p:
            return None
        statuses: dict[tuple[int, int], P2PStatus] = {}
        for (src, dst, capability), fact in sorted(self.p2p.items()):
            status = statuses.setdefault((src, dst), P2PStatus(src, dst))
            setattr(status, capability, str(fact.value))
        return list(statuses.values())


def _snapshot_families(node: Node) -> list[str]:
    """The evidence families a snapshot covers (for the coverage table): what it holds, not what it could."""
    links = [link for gpu in node.gpus for link in gpu.nvlinks or []]
    held = {
        "inventory": True,
        "paths": node.paths is not None,
        "p2p": node.p2p is not None,
        "nvlinks": any(gpu.nvlinks is not None for gpu in node.gpus),
        "nvlink_errors": any(link.errors is not None for link in links),
        "p2p_bandwidth": bool(node.measurements.p2p),
        "collectives": bool(node.measurements.collectives),
        "nccl_transport": node.measurements.nccl is not None,
    }
    return [family for family, present in held.items() if present]


def _square(matrices: dict[tuple[str, bool], dict[tuple[int, int], float | None]]) -> int:
    return max((max(a for a, _ in m) + 1 for m in matrices.values() if m), default=0)


def _case_size(case: Testcase) -> int:
    return max(max(a, b) for a, b in case.matrix) + 1


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _remote_type(value: object) -> str | None:
    words = {"gpu": "gpu", "switch": "switch", "nvswitch": "switch", "ibmnpu": "ibmnpu"}
    return words.get(value.lower()) if isinstance(value, str) else None


def _bus_or_none(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return normalize_pci_bus_id(value)
    except ValueError:
        return None  # a device type word ("Switch") rather than a bus id


def _rank_gpus(result: NcclTestsResult) -> list[int] | None:
    """The device of each rank from '# Using devices' lines of a one-host run, when every rank is listed.

    Devices are CUDA numbers, taken as nvidia-smi's order like every CUDA-numbered evidence file.
    """
    ranks = sorted(result.devices, key=lambda d: d.rank)
    if len(result.hosts) != 1 or [d.rank for d in ranks] != list(range(result.nranks or 0)):
        return None
    devices = [d.device for d in ranks]
    buses = {d.bus.lower() for d in ranks}
    if len(set(devices)) < len(devices) and len(buses) == len(ranks):
        # One process per rank, each with its own CUDA_VISIBLE_DEVICES (Slurm --gpus-per-task=1), numbers
        # every GPU 0: distinct bus ids say the ranks ran on distinct GPUs, but not which node GPU each was,
        # so only the rank count is judged.
        return None
    return devices


def _int_or_none(value: object) -> int | None:
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def _snake(value: str) -> str:
    return re.sub(r"\W+", "_", value.strip().lower()).strip("_")


def _smi_fabric(gpu: SmiGpu) -> FabricInfo | None:
    """The Fabric section as the model spells NVML's fabric info; None where the section is absent."""
    state = gpu.get("fabric_state")
    if state is None:
        return None
    bandwidth = (gpu.get("health_bandwidth") or "").lower()
    clique = gpu.get("clique_id")
    return FabricInfo(
        state=_snake(state),
        status=_snake(gpu.get("fabric_status") or "") or None,
        clique_id=int(clique, 0) if clique and re.fullmatch(r"0x[0-9a-fA-F]+|\d+", clique) else None,
        cluster_uuid=gpu.get("cluster_uuid"),
        degraded_bandwidth=True if "degraded" in bandwidth else False if bandwidth == "full" else None,
        health_summary=_snake(gpu.get("health_summary") or "") or None,
    )
