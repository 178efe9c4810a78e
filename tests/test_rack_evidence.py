"""A rack judged from its trays' files: parsers of the multi-host formats, the rack node, input errors."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, cast

import jsonschema
import pytest
from conftest import DATA

from pytest_nvlink.model import FabricInfo, Gpu, MnnvlClique, NcclAudit, Node, NvLinkInfo, TransportChannel
from pytest_nvlink.model.document import snapshot_document
from pytest_nvlink.model.trays import TrayProbe, merge_trays, read_trays
from pytest_nvlink.record.results import nccl_transport_line, transport_counts
from pytest_nvlink.record.run import Run
from pytest_nvlink.report.json_results import load_schema
from pytest_nvlink.sources.evidence import hosts
from pytest_nvlink.sources.evidence.load import EvidenceConflict, EvidenceError, load_evidence
from pytest_nvlink.sources.evidence.parsers import nccl_log, nccl_tests, nvbandwidth
from pytest_nvlink.sources.evidence.parsers.common import ParseError

RACK = DATA / "rack"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_rack", RACK / "make_rack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_rack"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


GEN: Any = _generator()  # the generator script, loaded by path


def copy_set(variant: str, tmp_path: Path) -> Path:
    target = tmp_path / variant
    shutil.copytree(RACK / variant, target)
    return target


def replace_in(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, count))


def line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if needle in line)


# --- parsers ---------------------------------------------------------------------------------------


def two_tray_nvbandwidth() -> str:
    return str(GEN.nvbandwidth("healthy", GEN.tray_facts("healthy")[:2]))


def test_nvbandwidth_multinode_names_each_process_host_and_device_restarting_per_host() -> None:
    result = nvbandwidth.parse(two_tray_nvbandwidth())
    assert result.versions["mpi"].startswith("Open MPI v4.1.4")
    assert result.hosts == ("nvl72-tray01", "nvl72-tray02")
    assert [(p.host, p.device) for p in result.processes.values()][3:6] == [
        ("nvl72-tray01", 3),
        ("nvl72-tray02", 0),
        ("nvl72-tray02", 1),
    ]
    assert result.processes[4].bus_id == "00000008:01:00"
    case = result.testcases["multinode_device_to_device_memcpy_read_ce"]
    assert case.matrix[(0, 0)] is None and 797 < (case.matrix[(0, 7)] or 0) < 799
    assert result.devices == {}  # device numbers repeat across hosts: no per-host device list


def test_nvbandwidth_cut_process_line_is_an_error_naming_the_line() -> None:
    text = two_tray_nvbandwidth().replace(
        "Process 5 (nvl72-tray02): device 1: NVIDIA GB200 (00000009:01:00)", "Process 5 (nvl72-tray02): dev"
    )
    line = next(n for n, text_line in enumerate(text.splitlines(), 1) if text_line.startswith("Process 5"))
    with pytest.raises(ParseError) as caught:
        nvbandwidth.parse(text)
    assert caught.value.line_no == line and "Process N (HOST)" in caught.value.message


def test_nccl_log_reads_the_mnnvl_decision_per_rank_and_the_ranks_hosts() -> None:
    log = nccl_log.parse(GEN.nccl_log("healthy", GEN.tray_facts("healthy")[:2]))
    assert log.cliques[5] == MnnvlClique(
        "nvl72-tray02", True, rank=5, clique_id=0x7FFE, clique_size=8, clique_rank=5, nvl_domain_size=8
    )
    assert {info.host for info in log.ranks.values()} == {"nvl72-tray01", "nvl72-tray02"}
    audit = nccl_log.to_audit(log, "log")
    assert audit.ranks[4].host == "nvl72-tray02" and audit.ranks[4].nvml_dev == 0
    assert {c.detail for c in audit.channels} == {"P2P/MNNVL"}


def test_nccl_log_without_domain_size_and_with_mnnvl_off() -> None:
    text = (
        "h1:10:11 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 - Init START\n"
        "h1:10:11 [0] NCCL INFO MNNVL 0 cliqueId 0 cliqueSize 1 cliqueRank 0\n"
    )
    (clique,) = nccl_log.parse(text).cliques
    assert clique == MnnvlClique("h1", False, rank=0, clique_id=0, clique_size=1, clique_rank=0)


def test_nccl_log_cut_mnnvl_line_is_an_error_naming_the_line() -> None:
    text = (
        "h1:10:11 [0] NCCL INFO NCCL_MNNVL_ENABLE set by environment to 1.\n"
        "h1:10:11 [0] NCCL INFO MNNVL 1 cliqueId 7ffe cliq\n"
    )
    with pytest.raises(ParseError) as caught:
        nccl_log.parse(text)
    assert caught.value.line_no == 2 and "cliqueSize" in caught.value.message


def test_transport_counts_name_mnnvl_net_and_nvls() -> None:
    channels = [TransportChannel(c, 0, 0, 1, 0, "P2P", "P2P/MNNVL") for c in range(3)]
    channels += [
        TransportChannel(0, 1, 0, 2, 0, "NET", "NET/IB/0/GDRDMA"),
        TransportChannel(0, 2, 0, 3, 0, "NET", "NET/Socket/1"),
    ]
    audit = NcclAudit(channels=channels, nvls_channels=16)
    assert transport_counts(audit) == [("P2P/MNNVL", 3), ("NET/IB", 1), ("NET/Socket", 1), ("NVLS", 16)]


def test_nccl_tests_multinode_rank_lines_and_a_cut_one() -> None:
    text = GEN.nccl_tests("healthy", GEN.tray_facts("healthy")[:2])
    result = nccl_tests.parse(text)
    assert result.nranks == 8 and result.hosts == ("nvl72-tray01", "nvl72-tray02")
    assert [d.device for d in result.devices] == [0, 1, 2, 3, 0, 1, 2, 3]
    cut = text.replace(
        "#  Rank  6 Group  0 Pid  31006 on nvl72-tray02 device  2 [0018:01:00] NVIDIA GB200", "#  Rank  6 Gr"
    )
    line = next(n for n, text_line in enumerate(cut.splitlines(), 1) if text_line.startswith("#  Rank  6"))
    with pytest.raises(ParseError) as caught:
        nccl_tests.parse(cut)
    assert caught.value.line_no == line


def test_host_lines_split_a_file_into_trays() -> None:
    text = "# header\n\nhost: tray-a\nGPU 0: X (UUID: GPU-1)\nhost: tray-b\nGPU 0: X (UUID: GPU-2)\n"
    parts = hosts.split_hosts(text)
    assert [(p.host, p.start_line) for p in parts] == [(None, 1), ("tray-a", 4), ("tray-b", 6)]
    assert parts[2].text.strip() == "GPU 0: X (UUID: GPU-2)"
    assert hosts.split_hosts("no hosts here") == [hosts.HostPart(None, 1, "no hosts here")]


# --- the rack node ---------------------------------------------------------------------------------


def launcher_rack(variant: str) -> Node:
    """The rack node the launcher makes when each tray's probe states the facts the evidence files state."""
    probes = []
    for tray_number, tray in enumerate(GEN.tray_facts(variant)):
        node = Node(source="replay", host=tray[0].host, driver_version=GEN.DRIVER)
        node.gpus = [_probed_gpu(gpu) for gpu in tray]
        ranks = list(range(tray_number * GEN.GPUS, (tray_number + 1) * GEN.GPUS))
        probes.append(TrayProbe(tray[0].host, ranks, document=snapshot_document(node)))
    return merge_trays(read_trays(probes), "rack", "replay")


def _probed_gpu(gpu: Any) -> Gpu:
    links = [NvLinkInfo(link, active=True, speed_gbps=GEN.LINK_GBPS) for link in range(GEN.LINKS)]
    # A tray's probe decodes the whole fabric health (v3 struct): healthy, no problem.
    fabric = FabricInfo("completed", "success", gpu.clique, GEN.CLUSTER, False, "healthy", health_problems=[])
    return Gpu(
        index=gpu.local,
        name=GEN.NAME,
        uuid=gpu.uuid,
        pci_bus_id=gpu.bus_id.lower().replace("00000", "0", 1)[-12:],
        nvlinks=links,
        fabric=fabric,
    )


def facts(node: Node) -> list[tuple[object, ...]]:
    return [
        (g.index, g.host, g.local_index, g.name, g.uuid, g.pci_bus_id, g.fabric, g.nvlinks, g.problem)
        for g in node.gpus
    ]


@pytest.mark.parametrize("variant", ["healthy", "wrong-clique"])
def test_evidence_gives_the_launcher_rack_numbering_and_facts(variant: str) -> None:
    node = load_evidence([RACK / variant])
    assert facts(node) == facts(launcher_rack(variant))
    assert len(node.gpus) == 72 and node.gpus[9].host == "nvl72-tray03" and node.gpus[9].local_index == 1
    assert node.driver_version == GEN.DRIVER and node.source == "evidence"


def test_rack_node_is_named_after_its_trays_and_clique() -> None:
    assert load_evidence([RACK / "healthy"]).host == (
        f"rack of nvl72-tray01..nvl72-tray18 (cluster {GEN.CLUSTER}, clique {GEN.CLIQUE})"
    )
    assert load_evidence([RACK / "wrong-clique"]).host == "rack of nvl72-tray01..nvl72-tray18"


def test_rack_measurements_use_rack_gpu_numbers() -> None:
    node = load_evidence([RACK / "healthy"])
    pairs = {(m.src, m.dst) for m in node.measurements.p2p}
    assert len(pairs) == 72 * 71 and all(m.kind == "unidirectional" for m in node.measurements.p2p)
    (all_reduce, *_) = [c for c in node.measurements.collectives if c.size_bytes == 4 << 30]
    assert all_reduce.world_size == 72 and all_reduce.rank_gpus == list(range(72))
    audit = node.measurements.nccl
    assert audit is not None and len(audit.mnnvl) == 72 and {c.clique_size for c in audit.mnnvl} == {72}
    assert transport_counts(audit) == [("P2P/MNNVL", 72 * GEN.CHANNELS), ("NVLS", 16)]
    assert {family for family, files in node.provenance.items() if files} >= {
        "inventory",
        "nvlinks",
        "p2p_bandwidth",
        "collectives",
        "nccl_transport",
        "platform",
    }


def test_net_ib_set_records_network_channels_between_trays() -> None:
    audit = load_evidence([RACK / "net-ib"]).measurements.nccl
    assert audit is not None and audit.mnnvl == []
    counts = dict(transport_counts(audit))
    assert counts["NET/IB"] == GEN.TRAYS * GEN.CHANNELS and counts["P2P/CUMEM"] == (72 - GEN.TRAYS) * GEN.CHANNELS


def test_trays_order_follows_the_ranks_not_the_file_order(tmp_path: Path) -> None:
    folder = copy_set("healthy", tmp_path)
    smi = folder / "nvidia-smi-q-trays01-09.txt"
    text = smi.read_text()
    first, second = text.index("host: nvl72-tray01"), text.index("host: nvl72-tray02")
    smi.write_text(text[:first] + text[second:] + text[first:second])  # tray02's output now comes first
    assert facts(load_evidence([folder])) == facts(launcher_rack("healthy"))


def test_two_outputs_placing_trays_differently_conflict(tmp_path: Path) -> None:
    folder = copy_set("healthy", tmp_path)
    tests_file = folder / "all_reduce_perf.txt"
    text = tests_file.read_text()
    text = text.replace(" on nvl72-tray01 ", " on SWAP ").replace(" on nvl72-tray02 ", " on nvl72-tray01 ")
    tests_file.write_text(text.replace(" on SWAP ", " on nvl72-tray02 "))
    with pytest.raises(EvidenceConflict, match=r"tray order: .*different rank placements") as caught:
        load_evidence([folder])
    assert "nvbandwidth-multinode.txt" in str(caught.value) and "all_reduce_perf.txt" in str(caught.value)


def test_a_tray_file_named_after_no_host_is_an_error(tmp_path: Path) -> None:
    folder = copy_set("healthy", tmp_path)
    (folder / "nvidia-smi-q" / "nvl72-tray10.txt").rename(folder / "nvidia-smi-q" / "tray-ten.txt")
    with pytest.raises(EvidenceError, match=r"tray-ten.txt: cannot tell which tray.*host: NAME"):
        load_evidence([folder])


def test_a_tray_without_its_own_files_keeps_its_gpus_from_the_rack_runs(tmp_path: Path) -> None:
    folder = copy_set("healthy", tmp_path)
    (folder / "nvidia-smi-q" / "nvl72-tray18.txt").unlink()
    node = load_evidence([folder])
    last = node.gpus[68:]
    assert [(g.host, g.local_index, g.fabric) for g in last] == [("nvl72-tray18", i, None) for i in range(4)]
    assert last[0].pci_bus_id == "0008:01:00.0"


# --- input errors ----------------------------------------------------------------------------------


def test_cut_rank_line_in_rack_evidence_names_file_and_line(tmp_path: Path) -> None:
    folder = copy_set("healthy", tmp_path)
    path = folder / "all_reduce_perf.txt"
    needle = "#  Rank 40 Group"
    line = line_of(path, needle)
    text = path.read_text()
    start = text.index(needle)
    path.write_text(text[: start + 20] + text[text.index("\n", start) :])
    with pytest.raises(EvidenceError, match=rf"all_reduce_perf.txt:{line}: expected '#  Rank  N Group"):
        load_evidence([folder])


def test_cut_mnnvl_line_in_rack_evidence_names_file_and_line(tmp_path: Path) -> None:
    folder = copy_set("healthy", tmp_path)
    path = folder / "nccl-debug.txt"
    needle = "NCCL INFO MNNVL 1 cliqueId 7ffe cliqueSize 72 cliqueRank 9 "
    line = line_of(path, needle)
    replace_in(path, needle + "nvlDomainSize 72", "NCCL INFO MNNVL 1 cliqueId 7ffe cliqueSi")
    with pytest.raises(EvidenceError, match=rf"nccl-debug.txt:{line}: expected 'MNNVL 0\|1 cliqueId"):
        load_evidence([folder])


def test_nan_bandwidth_is_an_input_error_naming_file_and_line(tmp_path: Path) -> None:
    folder = copy_set("healthy", tmp_path)
    path = folder / "nvbandwidth-multinode.txt"
    row = next(line for line in path.read_text().splitlines() if line.startswith(" 5  "))
    value = row.split()[3]
    replace_in(path, row, row.replace(value, "nan", 1))
    with pytest.raises(
        EvidenceError, match=rf"nvbandwidth-multinode.txt:{line_of(path, row.replace(value, 'nan', 1))}"
    ):
        load_evidence([folder])


def test_negative_busbw_is_an_input_error_naming_file_and_line(tmp_path: Path) -> None:
    folder = copy_set("healthy", tmp_path)
    path = folder / "all_reduce_perf.txt"
    row = next(line for line in path.read_text().splitlines() if line.strip().startswith("4294967296"))
    busbw = row.split()[7]
    damaged = row.replace(f" {busbw} ", f" -{busbw} ", 1)
    replace_in(path, row, damaged)
    with pytest.raises(EvidenceError) as caught:
        load_evidence([folder])
    assert re.search(
        rf"all_reduce_perf.txt.*(:{line_of(path, damaged)}|line {line_of(path, damaged)})", str(caught.value)
    )
    assert "negative" in str(caught.value) or "-" in str(caught.value)


def test_generator_is_deterministic(tmp_path: Path) -> None:
    for variant in GEN.VARIANTS:
        for path in sorted((RACK / variant).rglob("*.txt")):
            relative = path.relative_to(RACK)
            assert path.read_text() == _regenerated(tmp_path, variant)[relative], relative


_CACHE: dict[str, dict[Path, str]] = {}


def _regenerated(tmp_path: Path, variant: str) -> dict[Path, str]:
    if variant not in _CACHE:
        original = GEN.HERE
        GEN.HERE = tmp_path
        try:
            GEN.write_set(variant)
        finally:
            GEN.HERE = original
        _CACHE[variant] = {p.relative_to(tmp_path): p.read_text() for p in (tmp_path / variant).rglob("*.txt")}
    return _CACHE[variant]


# --- the record and the terminal ---------------------------------------------------------------------


def test_terminal_and_json_name_the_transports_nccl_used(pytester: pytest.Pytester) -> None:
    out = pytester.path / "results.json"
    result = pytester.runpytest(
        "--nvlink-suite=gb200-4gpu",
        f"--nvlink-evidence={RACK / 'net-ib'}",
        f"--nvlink-json={out}",
        "-k",
        "test_gpu_count",
        "-p",
        "no:cacheprovider",
    )
    channels = GEN.TRAYS * GEN.CHANNELS
    result.stdout.fnmatch_lines(
        [f"NCCL transports: P2P/CUMEM {72 * GEN.CHANNELS - channels} channels, NET/IB {channels} channels"]
    )
    document = json.loads(out.read_text())
    assert document["nccl_transports"] == [
        {"transport": "P2P/CUMEM", "channels": 72 * GEN.CHANNELS - channels},
        {"transport": "NET/IB", "channels": channels},
    ]
    jsonschema.validate(document, load_schema())


def test_transport_line_counts_mnnvl_ranks_and_cliques() -> None:
    node = load_evidence([RACK / "wrong-clique"])
    line = nccl_transport_line(cast(Run, SimpleNamespace(node=node)))
    assert line is not None and line.startswith("NCCL transports: P2P/MNNVL ")
    assert line.endswith("; MNNVL on 72 of 72 ranks (cliques 7ffe, 7fff)")
    assert nccl_transport_line(cast(Run, SimpleNamespace(node=Node(source="evidence")))) is None


def test_channel_devices_restart_on_every_tray_of_a_rack() -> None:
    # NCCL's R[D]: D is the NVML index on the rank's own host, so the crossing's "4[0]" is tray 2's first
    # GPU, rack GPU 4; only the rank places it (judges/rack.py judges rack channels by rank).
    node = load_evidence([RACK / "net-ib"])
    audit = node.measurements.nccl
    assert audit is not None
    crossing = next(c for c in audit.channels if c.transport == "NET")
    assert (crossing.src_rank, crossing.src_dev, crossing.dst_rank, crossing.dst_dev) == (3, 3, 4, 0)
    hosts = {r.rank: r.host for r in audit.ranks}
    assert hosts[3] != hosts[4]
    assert next(g.index for g in node.gpus if g.host == hosts[4] and g.local_index == 0) == 4


def test_mnnvl_line_with_fields_added_later_still_reads() -> None:
    line = "h1:10:11 [0] NCCL INFO MNNVL 1 cliqueId 7ffe cliqueSize 8 cliqueRank 2 nvlDomainSize 8 cliqueIdx 0\n"
    (clique,) = nccl_log.parse(line).cliques
    assert (clique.clique_id, clique.clique_size, clique.nvl_domain_size) == (0x7FFE, 8, 8)
