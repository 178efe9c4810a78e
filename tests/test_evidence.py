"""Loading a folder of tool outputs into one evidence Node, and refusing files that disagree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import as_recorded, sample, topo_p2p_text

from pytest_nvlink.model import Gpu, GpuList, Node, NvLinkInfo, PairPath
from pytest_nvlink.model.document import snapshot_document
from pytest_nvlink.record.coverage import coverage
from pytest_nvlink.sources.evidence.load import FAMILIES, EvidenceConflict, EvidenceError, load_evidence

A100_TOPO = "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
A100_P2P = "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt"
H100_TOPO = "topo/h100-sxm-8gpu-baremetal-supermicro-nccl1264-partial.txt"
H100_STATUS = "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt"
A100_ERRORS = "nvlink/a100-sxm4-40gb-vm-brev-nvlink-e-all.txt"
NCCL_TESTS = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"
NVBANDWIDTH = "nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt"
NCCL_LOG = "nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt"
L40S_TOPO = "topo/l40s-4gpu-pcie-only-node-sys.txt"


def stage(tmp_path: Path, *relatives: str) -> Path:
    """Copy samples (without their header lines) into a fresh folder, keeping sub-folders."""
    root = tmp_path / "evidence"
    for relative in relatives:
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(sample(relative), encoding="utf-8")
    return root


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a100_topo_and_p2p_test_merge(tmp_path: Path) -> None:
    root = stage(tmp_path, A100_TOPO, A100_P2P)
    node = load_evidence([root])
    assert node.source == "evidence"
    assert len(node.gpus) == 8
    assert {gpu.name for gpu in node.gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert node.gpus[5].cpu_affinity == "64-127,192-254" and node.gpus[5].numa_node == 1
    assert node.paths is not None and len(node.paths) == 28
    assert {p.path for p in node.paths} == {"NV12"}
    status = node.p2p_status(3, 6)
    assert status is not None and (status.read, status.write, status.nvlink) == ("ok", "ok", None)
    uni = [m for m in node.measurements.p2p if m.kind == "unidirectional"]
    assert len(uni) == 56
    first = next(m for m in uni if (m.src, m.dst) == (1, 0))
    assert first.value == 265.05 and first.unit == "GB/s" and first.can_access_peer is True
    assert first.source == f"p2pBandwidthLatencyTest: {root / A100_P2P}"
    bidir = next(m for m in node.measurements.p2p if m.kind == "bidirectional" and (m.src, m.dst) == (4, 5))
    assert bidir.value == 517.80
    latency = next(m for m in node.measurements.p2p if m.kind == "latency" and (m.src, m.dst) == (0, 1))
    assert latency.value == 3.38 and latency.unit == "us"
    assert node.provenance["paths"] == str(root / A100_TOPO)
    assert node.provenance["inventory"] == f"{root / A100_P2P}, {root / A100_TOPO}"
    assert node.provenance["p2p_bandwidth"] == str(root / A100_P2P)
    # CUDA peer access holds over PCIe too: it covers no NVLink P2P status check.
    assert "p2p" not in node.provenance
    assert "not NVLink P2P capability" in node.unknown_reasons["p2p"]


def test_h100_topo_and_nvlink_status(tmp_path: Path) -> None:
    node = load_evidence([stage(tmp_path, H100_TOPO, H100_STATUS)])
    assert len(node.gpus) == 8
    assert node.path(0, 7) == "NV18"
    for gpu in node.gpus:
        assert gpu.name == "NVIDIA H100 80GB HBM3"
        assert gpu.active_link_count() == 18
        assert gpu.nvlinks is not None and {link.speed_gbps for link in gpu.nvlinks} == {26.562}
        assert all(link.version is None for link in gpu.nvlinks)
    assert node.gpu_list == GpuList(complete=True, source=str(tmp_path / "evidence" / H100_TOPO))


def test_nvlink_errors_alone(tmp_path: Path) -> None:
    node = load_evidence([stage(tmp_path, A100_ERRORS)])
    assert len(node.gpus) == 8
    assert node.gpus[2].uuid == "GPU-0cc8109e-9c4f-eb6f-9379-df66f71f032c"
    links = node.gpus[2].nvlinks
    assert links is not None and len(links) == 12
    assert links[0].errors == {"replay": 0, "recovery": 0, "crc_flit": 0}
    assert node.gpus[2].active_link_count() is None  # -e alone does not say which links are up
    # nvlink output may cover some GPUs only (-i): it names GPUs, it does not count them
    assert node.gpu_list == GpuList(complete=False, source=str(tmp_path / "evidence" / A100_ERRORS))
    assert node.provenance["nvlink_errors"].endswith("a100-sxm4-40gb-vm-brev-nvlink-e-all.txt")
    assert "nvlinks" not in node.provenance


def test_status_and_errors_merge_into_the_same_links(tmp_path: Path) -> None:
    status = write(tmp_path, "s.txt", "GPU 0: G (UUID: GPU-1)\n\t Link 0: 25.781 GB/s\n\t Link 1: <inactive>\n")
    errors = write(tmp_path, "e.txt", "GPU 0: G (UUID: GPU-1)\n\t Link 0: Replay Errors: 3\n\t Link 1: CRC Errors: 0\n")
    node = load_evidence([status, errors])
    links = node.gpus[0].nvlinks
    assert links == [
        NvLinkInfo(link=0, active=True, speed_gbps=25.781, errors={"replay": 3}),
        NvLinkInfo(link=1, active=False, errors={"crc_flit": 0}),
    ]
    assert node.provenance["nvlinks"] == str(status) and node.provenance["nvlink_errors"] == str(errors)


def test_all_links_inactive_means_no_active_link(tmp_path: Path) -> None:
    message = "NVML: Unable to retrieve NVLink information as all links are inActive"
    text = f"GPU 0: NVIDIA H100 PCIe (UUID: GPU-1)\n\t {message}\n"
    node = load_evidence([write(tmp_path, "s.txt", text)])
    assert node.gpus[0].nvlinks == [] and node.gpus[0].active_link_count() == 0


def test_nccl_tests_become_collective_measurements(tmp_path: Path) -> None:
    root = stage(tmp_path, NCCL_TESTS)
    node = load_evidence([root])
    rows = node.measurements.collectives
    assert len(rows) == 28
    assert {(r.op, r.world_size, r.correct, r.backend) for r in rows} == {("all_reduce", 8, True, "nccl")}
    assert rows[-1].busbw_gbps == 235.14 and rows[-1].size_bytes == 8589934592 and rows[-1].time_us == 63929.0
    assert rows[0].source == f"nccl-tests: {root / NCCL_TESTS}"
    assert node.host == "inst-ks8ls-comp"
    assert node.gpus[0].name == "NVIDIA A100-SXM4-40GB"


def test_nccl_tests_na_wrong_is_unknown_correctness(tmp_path: Path) -> None:
    text = sample(NCCL_TESTS).replace("      0    ", "    N/A    ").replace("      0\n", "    N/A\n")
    node = load_evidence([write(tmp_path, "r.txt", text)])
    assert {r.correct for r in node.measurements.collectives} == {None}


def test_nccl_tests_with_debug_lines_also_audits_transport(tmp_path: Path) -> None:
    lines = sample(NCCL_TESTS).split("\n")
    lines.insert(12, "inst:944:990 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read")
    node = load_evidence([write(tmp_path, "r.txt", "\n".join(lines))])
    assert len(node.measurements.collectives) == 28
    assert node.measurements.nccl is not None
    assert node.measurements.nccl.channels[0].detail == "P2P/CUMEM/read"


def test_nccl_log_becomes_audit(tmp_path: Path) -> None:
    root = stage(tmp_path, NCCL_LOG)
    node = load_evidence([root])
    audit = node.measurements.nccl
    assert audit is not None
    assert len(audit.channels) == 48 and {c.transport for c in audit.channels} == {"P2P"}
    assert audit.nvls_channels == 0
    assert audit.source == str(root / NCCL_LOG)
    assert node.provenance["nccl_transport"] == str(root / NCCL_LOG)
    assert node.gpus == []


def test_per_rank_logs_merge(tmp_path: Path) -> None:
    rank0 = write(tmp_path, "nccl.h.1", "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
    rank1 = write(tmp_path, "nccl.h.2", "h:3:4 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct\n")
    node = load_evidence([rank0, rank1])
    assert node.measurements.nccl is not None
    assert [c.transport for c in node.measurements.nccl.channels] == ["P2P", "SHM"]
    assert node.provenance["nccl_transport"] == f"{rank0}, {rank1}"


def test_nvbandwidth_direction(tmp_path: Path) -> None:
    node = load_evidence([stage(tmp_path, NVBANDWIDTH)])
    assert len(node.gpus) == 8
    measured = node.measurements.p2p
    assert len(measured) == 56 and {m.kind for m in measured} == {"unidirectional"}
    # "GPU(row) <- GPU(column)": the 274.89 cell at row 6, column 0 is a copy from GPU 0 into GPU 6.
    slowest = min(measured, key=lambda m: m.value or 0.0)
    assert (slowest.src, slowest.dst, slowest.value) == (0, 6, 274.89)
    assert slowest.source is not None and slowest.source.startswith("nvbandwidth device_to_device_memcpy_write_ce: ")


def test_every_family_covered_by_a_consistent_set(tmp_path: Path) -> None:
    root = stage(tmp_path, A100_TOPO, A100_P2P, NCCL_LOG)
    write(root, "errors.txt", "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n\t Link 0: Replay Errors: 0\n")
    write(root, "status.txt", "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n\t Link 0: 25.0 GB/s\n")
    write(root, "p2p-n.txt", topo_p2p_text("n", 8))
    tests = sample(NCCL_TESTS).replace("A100-SXM4-40GB", "A100-SXM4-80GB")
    write(root, "allreduce.log", tests)
    smi = "GPU 00000000:07:00.0\n    Product Name : NVIDIA A100-SXM4-80GB\n    Minor Number : 0\n"
    write(root, "q.txt", smi + "    Fabric\n        State : Completed\n        Status : Success\n")
    write(root, "dmesg.txt", "[    6.012345] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07\n[ 900.0] ok\n")
    columns = " ".join(str(gpu) for gpu in range(8))
    host_to_device = "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
    write(root, "h2d.txt", f"Running host_to_device_memcpy_ce.\n{host_to_device}\n {columns}\n0 {' 24.5' * 8}\n")
    node = load_evidence([root])
    covered = dict(coverage(node))
    assert list(covered) == list(FAMILIES)
    assert all(covered.values()), covered


def test_gpu_count_conflict_names_both_files(tmp_path: Path) -> None:
    root = stage(tmp_path, A100_TOPO, L40S_TOPO)
    with pytest.raises(EvidenceConflict, match="GPU count") as info:
        load_evidence([root])
    message = str(info.value)
    assert "a100-sxm4-80gb-8gpu-distserve3.txt" in message and "l40s-4gpu-pcie-only-node-sys.txt" in message
    assert "says 4" in message and "says 8" in message


def test_seven_gpu_nvbandwidth_conflicts_with_eight_gpu_topo(tmp_path: Path) -> None:
    lines = sample(NVBANDWIDTH).split("\n")
    seven = [line.rsplit(maxsplit=1)[0] if i >= 2 else line for i, line in enumerate(lines[:10])]
    root = stage(tmp_path, A100_TOPO)
    write(root, "nvb.txt", "\n".join(seven))
    with pytest.raises(EvidenceConflict, match=r"GPU count: .*nvb\.txt says 7 but .*distserve3\.txt says 8"):
        load_evidence([root])


def test_model_name_conflict(tmp_path: Path) -> None:
    root = stage(tmp_path, A100_P2P, A100_ERRORS)
    with pytest.raises(EvidenceConflict, match="GPU 0 name") as info:
        load_evidence([root])
    assert "NVIDIA A100-SXM4-40GB" in str(info.value) and "NVIDIA A100-SXM4-80GB" in str(info.value)


def test_path_conflict(tmp_path: Path) -> None:
    root = stage(tmp_path, A100_TOPO, H100_TOPO)
    with pytest.raises(EvidenceConflict, match=r"path GPU0-GPU1: .* says 'NV12' but .* says 'NV18'"):
        load_evidence([root])


def test_topo_mp_does_not_claim_nvlink_absent(tmp_path: Path) -> None:
    text = "$ nvidia-smi topo -mp\n\tGPU0\tGPU1\nGPU0\t X \tPXB\nGPU1\tPXB\t X \n"
    node = load_evidence([write(tmp_path, "mp.txt", text)])
    assert node.paths is None
    assert "topo -mp" in node.unknown_reasons["paths"]
    assert len(node.gpus) == 2


def test_topo_p2p_without_capability_gives_the_count_and_a_note(tmp_path: Path) -> None:
    matrix = "\tGPU0\tGPU1\nGPU0\tX\tOK\nGPU1\tCNS\tX\n"
    node = load_evidence([write(tmp_path, "w.txt", "nvidia-smi topo -p2p w\n" + matrix)])
    assert node.p2p_status(0, 1) is not None and node.p2p_status(0, 1).write == "ok"  # type: ignore[union-attr]
    assert node.p2p_status(1, 0).write == "chipset_not_supported"  # type: ignore[union-attr]
    # Without the command line the matrix still counts the GPUs; its answers are not judged.
    node = load_evidence([write(tmp_path, "x.txt", matrix)])
    assert len(node.gpus) == 2 and node.p2p is None
    assert "capability (r, w, n, a) is not stated" in node.evidence_notes[str(tmp_path / "x.txt")][0]


def test_unknown_kind_is_an_error_naming_the_file(tmp_path: Path) -> None:
    root = stage(tmp_path, A100_TOPO)
    write(root, "notes.md", "we looked at the server and it seemed fine\n")
    with pytest.raises(EvidenceError, match=r"notes\.md: cannot tell which tool"):
        load_evidence([root])


def test_unparsable_file_names_file_and_line(tmp_path: Path) -> None:
    text = sample(A100_TOPO).replace(
        "GPU3    NV12    NV12    NV12     X      NV12", "GPU3    NV12    NV12     X      NV12"
    )
    with pytest.raises(EvidenceError, match=r"bad\.txt:5: .*GPU3") as info:
        load_evidence([write(tmp_path, "bad.txt", text)])
    assert not isinstance(info.value, EvidenceConflict)


def test_binary_files_fail_the_folder_unless_excluded(tmp_path: Path) -> None:
    root = stage(tmp_path, L40S_TOPO)
    (root / "core.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    with pytest.raises(EvidenceError, match=r"1 file\(s\) .*core\.bin \(binary: NUL byte on line 1\).*exclude"):
        load_evidence([root])
    node = load_evidence([root], exclude=["*.bin"])
    assert len(node.gpus) == 4
    assert node.evidence_notes[str(root / "core.bin")] == ["not used: excluded by --nvlink-evidence-exclude=*.bin"]
    with pytest.raises(EvidenceError, match=r"core\.bin: binary"):
        load_evidence([root / "core.bin"])


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="no such file"):
        load_evidence([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvidenceError, match="no evidence files"):
        load_evidence([tmp_path / "empty"])


def test_nccl_tests_with_ambiguous_collective_is_a_note(tmp_path: Path) -> None:
    devices = "".join(f"#  Rank {r} Group 0 Pid 1 on h device {r} [0x{r:02x}] GPU\n" for r in range(8))
    text = devices + " 1048576  32768  float  none  -1  50.0  20.00  17.50  0  50.0  20.00  17.50  0\n"
    node = load_evidence([write(tmp_path, "ag.txt", text)])
    assert node.measurements.collectives == [] and "collectives" not in node.provenance
    note = node.evidence_notes[str(tmp_path / "ag.txt")][0]
    assert "could be all_gather or all_to_all" in note and "not judged" in note


def test_snapshot_json_merges_with_text_evidence(tmp_path: Path) -> None:
    snap = Node(source="live", driver_version="550.54.15")
    snap.gpus = [
        Gpu(index=i, name="NVIDIA H100 80GB HBM3", nvlinks=[NvLinkInfo(link=0, active=True)]) for i in range(8)
    ]
    snap.paths = [PairPath(0, 1, "NV18")]
    path = write(tmp_path, "snap.json", json.dumps(snapshot_document(snap)))
    root = stage(tmp_path, H100_TOPO)
    node = load_evidence([path, root])
    assert node.source == "evidence" and node.driver_version == "550.54.15"
    assert node.path(0, 1) == "NV18" and node.gpus[0].nvlinks == [NvLinkInfo(link=0, active=True)]
    snap.paths = [PairPath(0, 1, "SYS")]
    write(tmp_path, "snap.json", json.dumps(snapshot_document(snap)))
    with pytest.raises(EvidenceConflict, match="path GPU0-GPU1"):
        load_evidence([path, root])


def test_bad_snapshot_is_an_evidence_error(tmp_path: Path) -> None:
    document = {"kind": "pytest-nvlink-snapshot", "schema_version": 99, "node": {}}
    with pytest.raises(EvidenceError, match="schema_version"):
        load_evidence([write(tmp_path, "s.json", json.dumps(document))])


def test_crlf_and_bom_files(tmp_path: Path) -> None:
    path = tmp_path / "topo.txt"
    path.write_bytes(b"\xef\xbb\xbf" + sample(L40S_TOPO).replace("\n", "\r\n").encode())
    assert load_evidence([path]).path(0, 2) == "SYS"


def test_nccl_tests_rank_count_from_the_bus_factor(tmp_path: Path) -> None:
    text = "$ ./all_reduce_perf -g 8\n 1048576  262144  float  sum  -1  50.0  20.00  35.00  0  50.0  20.00  35.00  0\n"
    node = load_evidence([write(tmp_path, "ar.txt", text)])
    assert [(c.op, c.world_size) for c in node.measurements.collectives] == [("all_reduce", 8)]
    text = "$ ./all_reduce_perf -g 8\n 1048576  262144  float  sum  -1  50.0  20.00  10.00  0  50.0  20.00  10.00  0\n"
    node = load_evidence([write(tmp_path, "ar2.txt", text)])  # a ratio no rank count gives
    assert node.measurements.collectives == []
    assert "number of ranks is unknown" in node.evidence_notes[str(tmp_path / "ar2.txt")][0]


def test_every_evidence_family_names_the_checks_it_feeds() -> None:
    from pytest_nvlink.sources.evidence.families import FAMILY_CHECKS
    from pytest_nvlink.sources.evidence.load import FAMILIES

    assert set(FAMILY_CHECKS) == set(FAMILIES)


def test_merge_keeps_both_sides_and_names_the_conflicting_field() -> None:
    from pytest_nvlink.model import P2PStatus
    from pytest_nvlink.model.merge import MergeConflict, merge_into

    ours = Node(source="evidence", gpus=[Gpu(index=0, nvlinks=[NvLinkInfo(link=0, active=True, errors={"replay": 1})])])
    ours.p2p = [P2PStatus(0, 1, read="not_supported")]
    theirs = Node(source="live", driver_version="550.54.15", probe_errors=["NVML: x"])
    theirs.gpus = [
        Gpu(index=0, problem="lost", nvlinks=[NvLinkInfo(link=0, version=4, errors={"replay": 3, "crc_flit": 2})])
    ]
    theirs.p2p = [P2PStatus(0, 1, read="disabled_by_regkey", nvlink="ok")]
    merge_into(ours, theirs, "node", skip=frozenset({"source"}))
    assert ours.source == "evidence" and ours.driver_version == "550.54.15" and ours.probe_errors == ["NVML: x"]
    assert ours.gpus[0].problem == "lost"
    # Counters only grow: the later (higher) reading of each wins; fields only one side has are kept.
    assert ours.gpus[0].nvlinks == [NvLinkInfo(link=0, active=True, version=4, errors={"replay": 3, "crc_flit": 2})]
    # Two reasons for the same refusal agree; ok against a refusal is a conflict.
    assert ours.p2p == [P2PStatus(0, 1, read="not_supported", nvlink="ok")]
    theirs.p2p = [P2PStatus(0, 1, read="ok")]
    with pytest.raises(MergeConflict) as info:
        merge_into(ours, theirs, "node", skip=frozenset({"source"}))
    assert info.value.where == "node.p2p[0-1].read"


def test_worst_of_several_figures_is_judged() -> None:
    from pytest_nvlink.judges.collectives import pick_collective
    from pytest_nvlink.model import CollectiveMeasurement, P2PMeasurement
    from pytest_nvlink.model.figures import worst_figure

    fast = P2PMeasurement(0, 1, "unidirectional", 380.0, "GB/s", source="a.txt")
    slow = P2PMeasurement(0, 1, "unidirectional", 120.0, "GB/s", source="b.txt")
    worst = worst_figure([fast, slow])
    assert worst is not None and worst.value == 120.0
    assert worst.source == "b.txt (worst of 2 figures; also 380 GB/s from a.txt)"
    crashed = P2PMeasurement(0, 1, "unidirectional", None, "GB/s", error="timed out", source="c.txt")
    assert worst_figure([fast, crashed, slow]) is not None and worst_figure([fast, crashed, slow]).value is None  # type: ignore[union-attr]
    low = P2PMeasurement(0, 1, "latency", 2.0, "us", source="a.txt")
    high = P2PMeasurement(0, 1, "latency", 9.0, "us", source="b.txt")
    assert worst_figure([high, low]).value == 9.0  # type: ignore[union-attr]
    assert worst_figure([fast]) is fast and worst_figure([]) is None
    runs = [
        CollectiveMeasurement("all_reduce", 1 << 30, 8, 1.0, 1.0, busbw, source=name)
        for busbw, name in ((480.0, "a"), (300.0, "b"))
    ]
    picked = pick_collective("all_reduce", 1024, runs)
    assert picked is not None and picked.source == "b"


def test_p2p_status_of_an_nvlink_pair_needs_the_nvlink_capability(tmp_path: Path) -> None:
    from pytest_nvlink.config.suites import load_suite
    from pytest_nvlink.config.thresholds import load_thresholds
    from pytest_nvlink.judges.context import Context
    from pytest_nvlink.judges.topology import p2p_status
    from pytest_nvlink.verdict import Outcome

    text = sample(A100_P2P).replace("Device=0 CAN Access Peer Device=1", "Device=0 CANNOT Access Peer Device=1")
    node = load_evidence([write(tmp_path, "p2p.txt", text)])
    suite = load_suite("a100-8gpu")
    ctx = Context(node, suite, load_thresholds(suite.thresholds_ref))
    access_only = as_recorded(p2p_status(ctx, 0, 2), ctx)
    assert access_only.outcome is Outcome.NO_EVIDENCE
    assert "states CUDA peer access, which P2P over PCIe also grants, not NVLink P2P capability" in access_only.message
    # A refusal the file does state fails the pair, whatever it leaves unstated.
    refused = p2p_status(ctx, 0, 1)
    assert refused.outcome is Outcome.FAIL
    assert "P2P not usable (read not_supported, write not_supported)" in refused.message
