"""Judge a rack (one NVLink domain over several hosts) from its trays' files, as one node.

Per-tray outputs (``nvidia-smi -q``, ``nvidia-smi nvlink -s``, ``topo -m``) belong to the host that a
``host: NAME`` line before them names or, failing that, whose name the file is named after. Outputs of
runs over the whole rack (nvbandwidth's multinode testcases, nccl-tests over several hosts, NCCL INFO
logs) name each rank's host themselves. Each tray becomes a node of its own, and the trays are merged
exactly as the launcher merges its trays' probes (:mod:`pytest_nvlink.model.trays`): trays in order of
their first rank, tray t's GPU i numbered ``offset_t + i``, so the same facts give the same GPU numbers,
and so the same verdicts, from evidence as from a replayed rack snapshot.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_nvlink.core.values import evidence_value_error
from pytest_nvlink.model import GpuList, Measurements, Node, P2PMeasurement
from pytest_nvlink.model.document import snapshot_document
from pytest_nvlink.model.host_link import HostLinkMeasurement
from pytest_nvlink.model.trays import Tray, TrayProbe, merge_trays, read_trays
from pytest_nvlink.sources.evidence.families import FAMILIES
from pytest_nvlink.sources.evidence.merge import EvidenceConflict, EvidenceError, Merger
from pytest_nvlink.sources.evidence.parsers import nccl_log, nccl_tests, nvbandwidth
from pytest_nvlink.sources.evidence.parsers.nccl_tests import NcclTestsResult
from pytest_nvlink.sources.evidence.parsers.nvbandwidth import NvbandwidthResult
from pytest_nvlink.sources.evidence.parsers.nvbandwidth_host import host_link_measurements
from pytest_nvlink.sources.evidence.parts import absorb, detect_all, merge_later, parse_loaded
from pytest_nvlink.sources.evidence.read import Loaded, Pending

__all__ = ["load_rack"]

_LINE_SUFFIX = re.compile(r" \(line \d+\)$")  # the part of a file: provenance names the file
_HOST_NAME = re.compile(r"[A-Za-z0-9][\w.-]*")  # as a "host: NAME" line names one


@dataclass
class _Rack:
    """Rack-wide outputs, read once, and what they say about ranks and hosts."""

    trays: dict[str, list[tuple[str, Loaded]]] = field(default_factory=dict)  # host -> its own parts
    nvbandwidth: list[tuple[NvbandwidthResult, Loaded]] = field(default_factory=list)
    nccl_tests: list[tuple[NcclTestsResult, Loaded]] = field(default_factory=list)
    nccl_logs: list[Loaded] = field(default_factory=list)
    # host -> its global ranks, from the first output that numbers ranks, and that output's name
    ranks: dict[str, list[int]] = field(default_factory=dict)
    ranks_from: str = ""


def load_rack(sections: list[Loaded], pending: Pending) -> Node:
    """One node for the rack: every tray's facts renumbered as the launcher numbers them, and the rack's runs.

    ``sections`` are the files already cut at their ``host: NAME`` lines (:func:`.hosts.host_sections`).
    """
    rack = _Rack()
    unplaced: list[tuple[str, Loaded]] = []
    for kind, loaded in detect_all(sections):
        if not _read_rack_wide(kind, loaded, rack):
            unplaced.append((kind, loaded))
    _order_ranks(rack)
    for kind, loaded in unplaced:
        rack.trays.setdefault(_tray_of(loaded, rack), []).append((kind, loaded))
    for host in rack.trays:
        rack.ranks.setdefault(host, [])
    trays = _trays(rack, pending)
    node = merge_trays(trays, _rack_name(trays), "evidence")
    node.measurements = _measurements(rack, trays)
    _provenance(node, trays, rack)
    texts = {loaded.name: loaded.text for loaded in sections}
    impossible = evidence_value_error(node, node.provenance, texts)
    if impossible:
        raise EvidenceError(impossible)
    node.evidence_notes = {file: list(notes) for file, notes in pending.notes.items()}
    return node


# --- reading ---------------------------------------------------------------------------------------


def _read_rack_wide(kind: str, loaded: Loaded, rack: _Rack) -> bool:
    """Keep an output of a run over the rack; False for one host's own output."""
    if kind == nccl_log.KIND:
        parse_loaded(kind, loaded)  # an error names this file, not the merged logs
        rack.nccl_logs.append(loaded)
        return True
    if kind == nvbandwidth.KIND:
        result = parse_loaded(kind, loaded)
        assert isinstance(result, NvbandwidthResult)
        if result.processes:
            rack.nvbandwidth.append((result, loaded))
            _take_ranks(rack, {p.process: p.host for p in result.processes.values()}, loaded.name)
            return True
    if kind == nccl_tests.KIND:
        result = parse_loaded(kind, loaded)
        assert isinstance(result, NcclTestsResult)
        if len(result.hosts) > 1:
            rack.nccl_tests.append((result, loaded))
            _take_ranks(rack, {d.rank: d.host for d in result.devices}, loaded.name)
            if re.search(r"NCCL\s+INFO\s+Channel\s+\d+.*\bvia\b", loaded.text):
                rack.nccl_logs.append(loaded)
            return True
    return False


def _take_ranks(rack: _Rack, host_of: dict[int, str], name: str) -> None:
    """The trays' rank order from the first output that numbers ranks; later ones must agree with it."""
    ranks: dict[str, list[int]] = {}
    for rank, host in sorted(host_of.items()):
        ranks.setdefault(host, []).append(rank)
    if not rack.ranks_from:
        rack.ranks, rack.ranks_from = ranks, name
        return
    order = sorted(ranks, key=lambda h: min(ranks[h]))
    known = [host for host in sorted(rack.ranks, key=lambda h: min(rack.ranks[h])) if host in ranks]
    if [host for host in order if host in rack.ranks] != known:
        raise EvidenceConflict(
            f"tray order: {rack.ranks_from} puts the hosts in the order {', '.join(known)} but {name} in the "
            f"order {', '.join(order)}; the files come from runs with different rank placements"
        )


def _order_ranks(rack: _Rack) -> None:
    """Hosts that only NCCL logs name take their ranks from the logs' ``ncclCommInitRank`` lines."""
    if rack.ranks_from or not rack.nccl_logs:
        return
    log = nccl_log.parse_many([loaded.text for loaded in rack.nccl_logs])
    host_of = {info.rank: info.host for info in log.ranks.values() if info.host}
    if host_of:
        _take_ranks(rack, host_of, ", ".join(loaded.name for loaded in rack.nccl_logs))


def _tray_of(loaded: Loaded, rack: _Rack) -> str:
    if loaded.tray is not None:
        return loaded.tray
    stem = Path(loaded.file or loaded.name).stem
    known = [*rack.ranks, *rack.trays]
    if stem in known:
        return stem
    if not rack.ranks_from and _HOST_NAME.fullmatch(stem):
        # No run over the rack names its hosts: the trays are the per-tray files themselves, each named
        # after its host. Where such a run is given, a name it does not know would be a tray it never ran on.
        return stem
    raise EvidenceError(
        f"{loaded.name}: cannot tell which tray of the rack this output comes from; put a 'host: NAME' line "
        f"before it or name the file after the tray's host ({', '.join(_natural(known)[:3]) or 'e.g. tray01'}.txt)"
    )


# --- trays -----------------------------------------------------------------------------------------


def _trays(rack: _Rack, pending: Pending) -> list[Tray]:
    """Each host's own facts as one tray node, in the launcher's tray order (first rank, then host name)."""
    numbered = [host for host in rack.ranks if rack.ranks[host]]
    others = _natural([host for host in rack.ranks if not rack.ranks[host]])
    next_rank = max((max(r) for r in rack.ranks.values() if r), default=-1) + 1
    probes = []
    for host in [*sorted(numbered, key=lambda h: min(rack.ranks[h])), *others]:
        tray = _tray_node(host, rack, pending)
        ranks = rack.ranks[host] or list(range(next_rank, next_rank + max(len(tray.gpus), 1)))
        next_rank += 0 if rack.ranks[host] else len(ranks)
        probes.append(TrayProbe(host, ranks, document=snapshot_document(tray)))
    return read_trays(probes)


def _tray_node(host: str, rack: _Rack, pending: Pending) -> Node:
    merger = Merger()
    for kind, loaded in rack.trays.get(host, []):
        absorb(kind, loaded, merger, pending)
    merge_later(merger, pending)  # e.g. an nccl-tests run of this tray alone, with its INFO lines
    for result, loaded in rack.nvbandwidth:
        for process in result.processes.values():
            if process.host == host:
                merger.add_named_gpu(process.device, process.name, process.bus_id, loaded.name)
    node = merger.build()
    node.host = host
    return node


def _rack_name(trays: Sequence[Tray]) -> str:
    """ "rack of tray01..tray18", with the cluster and clique when every GPU reports the same ones."""
    name = f"rack of {trays[0].host}..{trays[-1].host}" if len(trays) > 1 else f"rack of {trays[0].host}"
    fabrics = {
        (gpu.fabric.cluster_uuid, gpu.fabric.clique_id) if gpu.fabric else None
        for tray in trays
        for gpu in (tray.node.gpus if tray.node else [])
    }
    if len(fabrics) == 1 and (only := next(iter(fabrics))) is not None and only[0]:
        name += f" (cluster {only[0]}, clique {only[1]})"
    return name


# --- rack-wide measurements ---------------------------------------------------------------------


def _measurements(rack: _Rack, trays: Sequence[Tray]) -> Measurements:
    gpu_of = {
        (tray.host, local): tray.offset + local
        for tray in trays
        for local in range(max(len(tray.node.gpus) if tray.node else 0, len(tray.ranks)))
    }
    merger = Merger(one_host=False)
    for result, loaded in rack.nvbandwidth:
        nvbandwidth.add(merger, _renumbered(result, gpu_of, loaded), loaded.name)
    for run, loaded in rack.nccl_tests:
        before = len(merger.collectives)
        nccl_tests.add(merger, run, loaded.name)
        rank_gpus = _rank_gpus(run, gpu_of)
        for index in range(before, len(merger.collectives)):
            merger.collectives[index] = dataclasses.replace(merger.collectives[index], rank_gpus=rank_gpus)
    if rack.nccl_logs:
        nccl_log.merge_logs(merger, rack.nccl_logs, one_host=False)
    p2p = [*merger.p2p_measurements, *_tray_pairs(trays)]
    host_link = [*merger.host_link, *_tray_host_links(trays)]
    return Measurements(p2p=p2p, collectives=list(merger.collectives), nccl=merger.nccl, host_link=host_link)


def _renumbered(result: NvbandwidthResult, gpu_of: dict[tuple[str, int], int], loaded: Loaded) -> NvbandwidthResult:
    """Rows and columns (MPI processes) as rack GPU numbers; each process's device counts on its own host."""
    global_of: dict[int, int] = {}
    for process in result.processes.values():
        gpu = gpu_of.get((process.host, process.device))
        if gpu is None:
            raise EvidenceError(
                f"{loaded.name}: process {process.process} runs on device {process.device} of {process.host}, "
                "which is no GPU of that tray in the other files"
            )
        global_of[process.process] = gpu
    cases = {}
    for name, case in result.testcases.items():
        # A host<->device testcase's CPU row (or column) is the host, not a process: only its GPU side is renumbered.
        row_gpu, column_gpu = case.row_kind == "GPU", case.column_kind == "GPU"
        used = {row for row, _ in case.matrix if row_gpu} | {column for _, column in case.matrix if column_gpu}
        missing = sorted(used - set(global_of))
        if missing:
            raise EvidenceError(f"{loaded.name}: testcase {name} has rows/columns {missing} with no 'Process' line")
        matrix = {
            (global_of[row] if row_gpu else row, global_of[col] if column_gpu else col): value
            for (row, col), value in case.matrix.items()
        }
        cases[name] = dataclasses.replace(case, matrix=matrix, parts={})
    return dataclasses.replace(result, testcases=cases, devices={}, device_bus_ids={})


def _rank_gpus(result: NcclTestsResult, gpu_of: dict[tuple[str, int], int]) -> list[int] | None:
    ranks = sorted(result.devices, key=lambda d: d.rank)
    if [d.rank for d in ranks] != list(range(result.nranks or 0)):
        return None
    gpus = [gpu_of.get((d.host, d.device)) for d in ranks]
    return None if None in gpus else [g for g in gpus if g is not None]


def _tray_pairs(trays: Sequence[Tray]) -> list[P2PMeasurement]:
    """A tray's own pair figures (nvbandwidth or p2pBandwidthLatencyTest run on that host), in rack numbers."""
    return [
        dataclasses.replace(m, src=m.src + tray.offset, dst=m.dst + tray.offset)
        for tray in trays
        if tray.node is not None
        for m in tray.node.measurements.p2p
    ]


def _tray_host_links(trays: Sequence[Tray]) -> list[HostLinkMeasurement]:
    """A tray's own host-link figures (nvbandwidth or bandwidthTest run on that host), in rack numbers."""
    return [
        dataclasses.replace(m, gpu=m.gpu + tray.offset)
        for tray in trays
        if tray.node is not None
        for m in tray.node.measurements.host_link
    ]


def _provenance(node: Node, trays: Sequence[Tray], rack: _Rack) -> None:
    """Files per evidence family over all trays and the rack's runs, for the coverage table."""
    files: dict[str, list[str]] = {}
    for tray in trays:
        for family, joined in (tray.node.provenance if tray.node else {}).items():
            files.setdefault(family, []).extend(_LINE_SUFFIX.sub("", name) for name in joined.split(", "))
    rack_files = {
        "p2p_bandwidth": [loaded.name for _, loaded in rack.nvbandwidth],
        "collectives": [loaded.name for _, loaded in rack.nccl_tests],
        "nccl_transport": [loaded.name for loaded in rack.nccl_logs],
        "inventory": [loaded.name for _, loaded in rack.nvbandwidth],
        "host_link": [loaded.name for result, loaded in rack.nvbandwidth if host_link_measurements(result, "")],
    }
    for family, names in rack_files.items():
        files.setdefault(family, []).extend(_LINE_SUFFIX.sub("", name) for name in names)
    node.provenance = {f: ", ".join(dict.fromkeys(files[f])) for f in FAMILIES if files.get(f)}
    complete = all(tray.node is not None and (tray.node.gpu_list or GpuList(True, "")).complete for tray in trays)
    node.gpu_list = GpuList(complete=complete, source=node.provenance.get("inventory", "the evidence files"))


def _natural(hosts: list[str]) -> list[str]:
    """Host names in natural order: tray2 before tray10."""
    return sorted(hosts, key=lambda h: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", h)])
