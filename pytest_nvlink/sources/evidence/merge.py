"""Merging parsed evidence into one Node, with a conflict check on every fact two files can both state.

The Merger knows facts (GPU counts, per-GPU and per-link facts, paths, P2P statuses, measurements),
not tools: each format's merge step (in its parser module) says which facts its output states.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pytest_nvlink.model import (
    CollectiveMeasurement,
    EventWindow,
    FabricInfo,
    Gpu,
    GpuList,
    NcclAudit,
    Node,
    NvLinkInfo,
    P2PMeasurement,
    P2PStatus,
    PairPath,
    XidEvent,
    normalize_pci_bus_id,
)
from pytest_nvlink.model.host_link import HostLinkMeasurement
from pytest_nvlink.model.merge import MergeConflict, merge_into

# The per-GPU facts of nvidia-smi -q, carried onto the Gpu by name.
SMI_GPU_KEYS = (
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
    # Files whose list of this GPU's links is cut short (why), and files that list it whole.
    cut: dict[str, str] = field(default_factory=dict)
    whole: set[str] = field(default_factory=set)


class Merger:
    """Collects facts from parsed files; ``build`` turns them into a Node."""

    def __init__(self, *, one_host: bool = True) -> None:
        # One server's files (or one tray's): every file that names a host must name the same one. A rack's
        # runs over all its trays name many.
        self.one_host = one_host
        self.counts: list[tuple[int, str]] = []  # exact GPU counts: (count, file)
        self.lower_bounds: list[tuple[int, str]] = []  # "at least n GPUs": (n, file)
        self.gpus: dict[int, _GpuFacts] = {}
        self.paths: dict[tuple[int, int], _Fact] = {}
        self.p2p: dict[tuple[int, int, str], _Fact] = {}
        self.p2p_measurements: list[P2PMeasurement] = []
        self.host_link: list[HostLinkMeasurement] = []
        self.collectives: list[CollectiveMeasurement] = []
        self.nccl: NcclAudit | None = None
        self.provenance: dict[str, list[str]] = {}
        self.unknown: dict[str, str] = {}
        self.hosts: dict[str, str] = {}  # host name -> the file that names it
        self.snapshot_node: tuple[Node, str] | None = None
        self.node_facts: dict[str, _Fact] = {}  # "driver_version", from nvidia-smi -q
        self.events: list[XidEvent] = []  # kernel logs' events, GPUs named by bus id until build
        self.event_windows: list[EventWindow] = []

    # --- facts: what the formats' merge steps state -----------------------------------------------

    def note(self, family: str, file: str) -> None:
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

    def gpu_fact(self, index: int, key: str, value: object, file: str) -> None:
        if value is not None:
            self._agree(self._gpu(index).facts, key, value, file, f"GPU {index} {key.replace('_', ' ')}")

    def count(self, count: int, file: str) -> None:
        # Checked as soon as a second file claims a count, so the root disagreement is reported first.
        for known, known_file in self.counts:
            if known != count:
                raise EvidenceConflict(f"GPU count: {known_file} says {known} but {file} says {count}")
        self.counts.append((count, file))
        self.note("inventory", file)

    def host(self, host: str, file: str) -> None:
        # Facts of two servers merged into one node would judge a machine that does not exist, whichever kinds
        # of file name them. Host names compare without regard to case, as DNS does.
        for known, known_file in self.hosts.items():
            if known.lower() != host.lower():
                raise EvidenceConflict(
                    f"host: {known_file} comes from host {known!r} but {file} from host {host!r}; "
                    "evidence must come from the one server being judged"
                )
        self.hosts.setdefault(host, file)

    def path(self, a: int, b: int, path: str, file: str) -> None:
        known = self.paths.setdefault((a, b), _Fact(path, file))
        if known.value != path:
            raise EvidenceConflict(f"path GPU{a}-GPU{b}: {known.file} says {known.value!r} but {file} says {path!r}")

    def p2p_status(self, src: int, dst: int, capability: str, status: str, file: str) -> None:
        known = self.p2p.get((src, dst, capability))
        if known is None:
            self.p2p[(src, dst, capability)] = _Fact(status, file)
        elif (known.value == "ok") != (status == "ok"):
            raise EvidenceConflict(
                f"P2P {capability} GPU{src}->GPU{dst}: {known.file} says {known.value!r} but {file} says {status!r}"
            )

    def lower_bound(self, count: int, file: str) -> None:
        """The file names GPUs up to ``count - 1`` and may not list them all."""
        self.lower_bounds.append((count, file))
        self.note("inventory", file)

    def node_fact(self, key: str, value: object, file: str, what: str) -> None:
        self._agree(self.node_facts, key, value, file, what)

    def unknown_reason(self, family: str, why: str) -> None:
        """Why a family's checks cannot be judged from these files; the first reason given stays."""
        self.unknown.setdefault(family, why)

    def links_inactive(self, gpu: int, file: str) -> None:
        self._gpu(gpu).all_inactive = file

    def link_list(self, gpu: int, file: str, cut: str | None = None) -> None:
        """A file lists the GPU's links whole, or cut short (``cut`` says where): then only a whole list counts."""
        facts = self._gpu(gpu)
        if cut is None:
            facts.whole.add(file)
        else:
            facts.cut[file] = cut
            self.unknown_reason(f"gpu{gpu}.nvlink", cut)

    def link(
        self,
        gpu: int,
        link: int,
        file: str,
        *,
        active: bool | None = None,
        speed_gbps: float | None = None,
        remote: str | None = None,
        errors: dict[str, int] | None = None,
    ) -> None:
        facts = self._gpu(gpu)
        store = facts.links.setdefault(link, {})
        what = f"GPU {gpu} NVLink {link}"
        if active is not None:
            self._agree(store, "active", active, file, f"{what} active")
        if speed_gbps is not None:
            self._agree(store, "speed", speed_gbps, file, f"{what} speed (GB/s)")
        if remote is not None:
            self._agree(store, "remote", remote, file, f"{what} remote device")
        if errors:
            counters = facts.errors.setdefault(link, {})
            for key, value in errors.items():
                # Counters only grow; two captures at different times legitimately differ.
                counters[key] = max(value, counters.get(key, 0))

    # --- facts of runs over several hosts, failed runs, NCCL logs and snapshots ---------------------

    def add_named_gpu(self, index: int, name: str, pci_bus_id: str | None, file: str) -> None:
        """A GPU that a run over several hosts names (nvbandwidth's "Process N (host): device M" lines)."""
        self.lower_bound(index + 1, file)
        self.gpu_fact(index, "name", name, file)
        if pci_bus_id is not None:
            self.gpu_fact(index, "pci_bus_id", normalize_pci_bus_id(pci_bus_id), file)

    def add_host_link(self, measurements: list[HostLinkMeasurement], file: str) -> None:
        """Host<->device figures of one GPU each; several files' figures for one GPU are all kept, as pairs' are."""
        self.host_link.extend(measurements)
        if measurements:
            self.note("host_link", file)

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
        self.note("collectives", file)

    def add_nccl_audit(self, audit: NcclAudit, files: list[str]) -> None:
        hosts = {rank.host for rank in audit.ranks if rank.host}
        # A log of one host names the server; ranks in several containers of one server (Kubernetes pods) each
        # have their own host name, so a log naming several proves no other server.
        if self.one_host and len(hosts) == 1:
            self.host(hosts.pop(), ", ".join(files))
        self.nccl = audit
        for file in files:
            self.note("nccl_transport", file)

    def add_events(self, events: list[XidEvent], window: EventWindow, file: str) -> None:
        """A kernel log's Xid/SXid/Fabric Manager events and the window it covers."""
        self.events.extend(events)
        self.event_windows.append(window)
        self.note("xid_events", file)

    def add_snapshot(self, node: Node, file: str) -> None:
        """Register the snapshot's facts that text files can also state; ``build`` carries all the rest."""
        if self.snapshot_node is not None:
            raise EvidenceError(f"{file}: only one snapshot per evidence set ({self.snapshot_node[1]} is another)")
        self.snapshot_node = (node, file)
        if node.gpu_list is None or node.gpu_list.complete:
            self.count(len(node.gpus), file)
        else:
            self.lower_bound(max((gpu.index for gpu in node.gpus), default=-1) + 1, file)
        if node.host is not None:
            self.host(node.host, file)
        for gpu in node.gpus:
            for key in ("name", "uuid", "numa_node", "cpu_affinity"):
                self.gpu_fact(gpu.index, key, getattr(gpu, key), file)
        for pair in node.paths or []:
            self.path(pair.a, pair.b, pair.path, file)
        for status in node.p2p or []:
            for capability in ("read", "write", "nvlink", "atomics"):
                value = status.get(capability)
                if value is not None:
                    self.p2p_status(status.src, status.dst, capability, value, file)
        for family in _snapshot_families(node):
            self.note(family, file)

    # --- result ----------------------------------------------------------------------------------

    def build(self) -> Node:
        node = Node(source="evidence")
        count, node.gpu_list = self._gpu_list()
        node.gpus = [self._build_gpu(index) for index in range(count)]
        node.paths = self._build_paths()
        node.p2p = self._build_p2p()
        node.measurements.p2p = list(self.p2p_measurements)
        node.measurements.host_link = list(self.host_link)
        node.measurements.collectives = list(self.collectives)
        node.measurements.nccl = self.nccl
        if node.driver_version is None and "driver_version" in self.node_facts:
            node.driver_version = str(self.node_facts["driver_version"].value)
        if len(self.hosts) == 1:
            node.host = next(iter(self.hosts))
        node.provenance = {family: ", ".join(files) for family, files in self.provenance.items()}
        node.unknown_reasons.update(self.unknown)
        if self.event_windows:
            node.xid_events, node.event_window = self._build_events(node.gpus)
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

    def _build_events(self, gpus: list[Gpu]) -> tuple[list[XidEvent], EventWindow]:
        """The logs' events with their GPU named by bus id, and one window over all logs.

        A kernel log speaks for every GPU of its host; an event names its GPU by bus id, which another file
        (nvidia-smi -q) gives. Several logs have no common clock: their events keep their stamps, not a time.
        """
        by_bus = {gpu.pci_bus_id: gpu.index for gpu in gpus if gpu.pci_bus_id}
        several = len(self.event_windows) > 1
        events = [
            dataclasses.replace(
                event,
                gpu=by_bus.get(event.pci_bus_id) if event.kind == "xid" and event.pci_bus_id else None,
                at_s=None if several else event.at_s,
            )
            for event in self.events
        ]
        first, last = self.event_windows[0], self.event_windows[-1]
        window = EventWindow(
            source=", ".join(w.source for w in self.event_windows) if several else first.source,
            start=first.start,
            length_s=None if several else first.length_s,
            gpus=[gpu.index for gpu in gpus],
            end=last.end,
        )
        return events, window

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
        for key in SMI_GPU_KEYS:
            if key in values:  # nvidia-smi -q only
                setattr(gpu, key, values[key])
        fabric = values.get("fabric")
        gpu.fabric = fabric if isinstance(fabric, FabricInfo) else None
        gpu.mig_mode_current = _str_or_none(values.get("mig_mode_current"))  # nvidia-smi -q's MIG Mode
        gpu.mig_mode_pending = _str_or_none(values.get("mig_mode_pending"))
        return gpu

    def _build_links(self, facts: _GpuFacts) -> list[NvLinkInfo] | None:
        if facts.all_inactive is not None and not facts.links:
            return []  # nvidia-smi: "all links are inactive"; the per-link list is not printed
        if not facts.links and not facts.errors:
            return None
        if facts.cut and not facts.whole:
            return None  # the links read are not all of them: the count, and each per-link check, is unknown
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
        "host_link": bool(node.measurements.host_link),
        "collectives": bool(node.measurements.collectives),
        "nccl_transport": node.measurements.nccl is not None,
    }
    return [family for family, present in held.items() if present]


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
