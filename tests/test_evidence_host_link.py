"""Host-link figures from evidence: nvbandwidth host<->device testcases, cuda-samples bandwidthTest, dcgmi diag."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA, sample

from pytest_nvlink.model import WRONG_DATA, Node
from pytest_nvlink.model.host_link import HostLinkMeasurement, is_pinned
from pytest_nvlink.sources.evidence.load import EvidenceError, load_evidence
from pytest_nvlink.sources.evidence.parsers import bandwidth_test, dcgm_diag, detect
from pytest_nvlink.sources.evidence.parsers.common import ParseError

HOST_ONLY = "nvbandwidth/constructed-h200-8gpu-host-device-only.txt"
A100_PUBLIC = "bandwidthTest/a100-sxm4-40gb-quick-pinned-router-gao.txt"
PER_DEVICE = "bandwidthTest/constructed-h200-8gpu-per-device-runs-gpu5-slow.txt"
DEVICE_ALL = "bandwidthTest/constructed-h100-8gpu-device-all-combined.txt"
OLD_MBS = "bandwidthTest/constructed-v100-range-mode-mbs-pinned-and-pageable.txt"
DCGM_PUBLIC = "dcgmi-diag/v100-pcie-16gb-dcgm339-r2-verbose.txt"
DCGM_8GPU = "dcgmi-diag/constructed-h100-8gpu-dcgm335-r2-verbose-gpu5-slow.txt"
DCGM_4 = "dcgmi-diag/constructed-h100-4gpu-dcgm4-r2-verbose-entity-headings.txt"
TOPO = "topo/h100-sxm-8gpu-baremetal-supermicro-nccl1264-partial.txt"


def load_text(tmp_path: Path, text: str, name: str = "evidence.txt") -> Node:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_evidence([path])


def figures(node: Node) -> dict[tuple[int, str, str], float | None]:
    """(gpu, direction, method or memory) -> GB/s, rounded so MB/s conversions compare."""
    found: dict[tuple[int, str, str], float | None] = {}
    for m in node.measurements.host_link:
        memory = (m.conditions or {}).get("memory", "")
        found[(m.gpu, m.direction, f"{m.method}/{memory}")] = None if m.value is None else round(m.value, 4)
    return found


def notes(node: Node) -> list[str]:
    return [note for file_notes in node.evidence_notes.values() for note in file_notes]


# --- nvbandwidth ------------------------------------------------------------------------------------

BIDIR = """nvbandwidth Version: v0.7
Device 0: NVIDIA H100 80GB HBM3 (00000000:18:00)
Device 1: NVIDIA H100 80GB HBM3 (00000000:2a:00)

Running host_to_device_bidirectional_memcpy_ce.
memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)
           0         1
 0     41.20     N/A

SUM host_to_device_bidirectional_memcpy_ce 41.20

Running device_to_host_bidirectional_memcpy_sm.
memcpy SM CPU(row) <-> GPU(column) bandwidth (GB/s)
           0         1
 0     40.10     39.90

Running host_to_all_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0     30.00     30.00

Running device_to_host_memcpy_ce.
Waived.
"""


def test_nvbandwidth_host_testcases_are_figures_per_gpu_and_direction(tmp_path: Path) -> None:
    node = load_text(tmp_path, sample(HOST_ONLY))
    found = figures(node)
    assert len(found) == 24 and node.measurements.p2p == []
    assert found[(0, "h2d", "ce/pinned")] == 55.42 and found[(5, "d2h", "ce/pinned")] == 55.76
    assert found[(7, "h2d", "sm/pinned")] == 54.10
    first = node.measurements.host_link[0]
    assert first.source == f"nvbandwidth host_to_device_memcpy_ce: {tmp_path / 'evidence.txt'}"
    assert first.conditions == {"memory": "pinned", "testcase": "host_to_device_memcpy_ce"} and is_pinned(first)
    assert node.provenance["host_link"] == str(tmp_path / "evidence.txt")


def test_nvbandwidth_bidirectional_na_waived_and_all_gpus_at_once(tmp_path: Path) -> None:
    node = load_text(tmp_path, BIDIR)
    by_key = {(m.gpu, m.direction, m.method): m for m in node.measurements.host_link}
    assert by_key[(0, "bidir_h2d", "ce")].value == 41.20
    na = by_key[(1, "bidir_h2d", "ce")]  # an N/A cell is a figure that failed, never a pass
    assert na.value is None and na.error == "nvbandwidth printed N/A"
    assert (by_key[(0, "bidir_d2h", "sm")].value, by_key[(1, "bidir_d2h", "sm")].value) == (40.10, 39.90)
    waived = [by_key[(gpu, "d2h", "ce")] for gpu in (0, 1)]
    waived_error = "nvbandwidth device_to_host_memcpy_ce was waived: no figure"
    assert all(m.value is None and m.error == waived_error for m in waived)
    assert len(by_key) == 6  # host_to_all copies to every GPU at once: no single GPU's figure
    assert any(note.startswith("nvbandwidth host_to_all_memcpy_ce (") for note in notes(node))


def test_nvbandwidth_aborted_host_testcase_is_wrong_data_for_every_gpu(tmp_path: Path) -> None:
    text = BIDIR.replace("Running device_to_host_memcpy_ce.\nWaived.\n", "Running device_to_host_memcpy_ce.\n")
    text += "Invalid value when checking the pattern at 0x7f00\n"
    node = load_text(tmp_path, text)
    aborted = [m for m in node.measurements.host_link if m.direction == "d2h"]
    assert len(aborted) == 2 and all(m.error and m.error.startswith(WRONG_DATA) for m in aborted)


@pytest.mark.parametrize(("cell", "problem"), [("-55.40", "must be greater than 0"), ("nan", "a number or N/A")])
def test_nvbandwidth_impossible_host_figure_names_file_and_line(tmp_path: Path, cell: str, problem: str) -> None:
    text = sample(HOST_ONLY).replace("55.40     55.37", f"{cell}     55.37", 1)
    with pytest.raises(EvidenceError, match=problem) as caught:
        load_text(tmp_path, text)
    line = next(n for n, row in enumerate(text.split("\n"), start=1) if cell in row)
    assert f"evidence.txt:{line}:" in str(caught.value)


def test_rack_run_maps_each_process_column_to_its_rack_gpu(tmp_path: Path) -> None:
    root = tmp_path / "rack"
    shutil.copytree(DATA / "rack" / "healthy", root)
    columns = "  ".join(str(process) for process in range(72))
    cells = "  ".join(f"{100 + process / 100:.2f}" for process in range(72))
    title = "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
    with (root / "nvbandwidth-multinode.txt").open("a") as out:
        out.write(f"\nRunning host_to_device_memcpy_ce.\n{title}\n {columns}\n 0  {cells}\n")
    node = load_evidence([root])
    found = {m.gpu: m.value for m in node.measurements.host_link}
    assert len(found) == 72 and found[10] == 100.10 and found[71] == 100.71  # tray 3 device 2 is GPU 10
    assert "nvbandwidth-multinode.txt" in node.provenance["host_link"]


# --- bandwidthTest ----------------------------------------------------------------------------------


def test_bandwidth_test_public_sample_gives_one_gpus_pinned_figures(tmp_path: Path) -> None:
    text = sample(A100_PUBLIC)
    assert detect.detect_kind(text) == bandwidth_test.KIND
    node = load_text(tmp_path, text)
    assert figures(node) == {(0, "h2d", "ce/pinned"): 12.3, (0, "d2h", "ce/pinned"): 13.2}
    assert node.gpus[0].name == "NVIDIA A100-SXM4-40GB" and node.gpu_list is not None and not node.gpu_list.complete
    h2d = node.measurements.host_link[0]
    assert h2d.conditions == {"memory": "pinned", "transfer_size_bytes": "32000000", "mode": "quick"}
    assert h2d.source == f"bandwidthTest: {tmp_path / 'evidence.txt'}"
    assert notes(node) == [
        "Device to Device blocks copy within one GPU's memory, not over its host link; not read",
        "'Result = PASS' only says the copied data was right, not that a figure is fast enough",
    ]


def test_bandwidth_test_per_device_runs_name_each_gpu(tmp_path: Path) -> None:
    node = load_text(tmp_path, sample(PER_DEVICE))
    found = figures(node)
    assert len(found) == 16 and len(node.gpus) == 8
    assert found[(5, "h2d", "ce/pinned")] == 14.2 and found[(4, "h2d", "ce/pinned")] == 55.0
    assert len(notes(node)) == 2  # said once for the file, not once per run


def test_bandwidth_test_device_all_sums_are_not_attributed_to_a_gpu(tmp_path: Path) -> None:
    node = load_text(tmp_path, sample(DEVICE_ALL))
    assert node.measurements.host_link == [] and len(node.gpus) == 8
    summed = [note for note in notes(node) if "the sum over 8 GPUs (--device=all)" in note]
    assert [note.split(":")[0] for note in summed] == ["line 14", "line 19"]


def test_bandwidth_test_older_mbs_range_mode_takes_the_largest_size_and_keeps_pageable_apart(tmp_path: Path) -> None:
    node = load_text(tmp_path, sample(OLD_MBS))
    found = figures(node)
    # 11890.1 "MB/s" of the old formula is 11890.1 * 1,024,000 bytes/s.
    assert found[(0, "h2d", "ce/pinned")] == round(11890.1 * 0.001024, 4)
    assert found[(0, "h2d", "ce/pageable")] == round(5501.4 * 0.001024, 4)
    pinned = [m for m in node.measurements.host_link if is_pinned(m)]
    assert {m.direction for m in pinned} == {"h2d", "d2h"} and len(pinned) == 2
    d2h = next(m for m in pinned if m.direction == "d2h")
    assert d2h.conditions == {
        "memory": "pinned",
        "transfer_size_bytes": "65536000",
        "mode": "range",
        "write_combined": "yes",
    }


def test_bandwidth_test_csv_lines(tmp_path: Path) -> None:
    text = (
        "[CUDA Bandwidth Test] - Starting...\nRunning on...\n\n Device 3: NVIDIA H100 80GB HBM3\n Quick Mode\n\n"
        "bandwidthTest-H2D-Pinned, Bandwidth = 54.9 GB/s, Time = 0.00058 s, Size = 32000000 bytes, NumDevsUsed = 1\n"
        "bandwidthTest-D2H-Paged, Bandwidth = 21.3 GB/s, Time = 0.00150 s, Size = 32000000 bytes, NumDevsUsed = 1\n"
        "bandwidthTest-D2D, Bandwidth = 1500.0 GB/s, Time = 0.00002 s, Size = 32000000 bytes, NumDevsUsed = 1\n"
        "Result = PASS\n"
    )
    assert figures(load_text(tmp_path, text)) == {(3, "h2d", "ce/pinned"): 54.9, (3, "d2h", "ce/pageable"): 21.3}


def test_bandwidth_test_failed_data_check_makes_wrong_data_figures(tmp_path: Path) -> None:
    node = load_text(tmp_path, sample(A100_PUBLIC).replace("Result = PASS", "Result = FAIL"))
    assert all(m.error and m.error.startswith(WRONG_DATA) for m in node.measurements.host_link)
    assert len(node.measurements.host_link) == 2


def test_bandwidth_test_cut_short_is_a_note_not_a_figure(tmp_path: Path) -> None:
    text = sample(A100_PUBLIC)
    cut = text[: text.index("   32000000\t\t\t13.2")]
    node = load_text(tmp_path, cut)
    assert figures(node) == {(0, "h2d", "ce/pinned"): 12.3}
    assert "line 12: the Device to Host (pinned) block has no figure (cut short?)" in notes(node)


@pytest.mark.parametrize("prefix", ["0: ", "[1,0]<stdout>:", "> "])
def test_bandwidth_test_pasted_with_prefixes_reads_the_same(tmp_path: Path, prefix: str) -> None:
    text = "\n".join(prefix + line for line in sample(PER_DEVICE).split("\n"))
    assert figures(load_text(tmp_path, text)) == figures(load_text(tmp_path, sample(PER_DEVICE), "plain.txt"))


@pytest.mark.parametrize(
    ("figure", "problem"),
    [("nan", "not a number"), ("-12.3", "never negative"), ("12,3", "a transfer size and a bandwidth figure")],
)
def test_bandwidth_test_broken_figure_is_an_error_naming_the_line(figure: str, problem: str) -> None:
    text = sample(A100_PUBLIC).replace("\t\t\t12.3", f"\t\t\t{figure}")
    with pytest.raises(ParseError, match=problem) as caught:
        bandwidth_test.parse(text)
    assert caught.value.line_no == 10


def test_bandwidth_test_unread_lines_are_notes() -> None:
    text = sample(A100_PUBLIC).replace(" Quick Mode", " Quick Mode\nsomething the tool never prints")
    result = bandwidth_test.parse(text)
    assert result.notes == ((6, "line not read: 'something the tool never prints'"),)


# --- dcgmi diag -------------------------------------------------------------------------------------


def test_dcgmi_diag_public_sample_reads_the_wrapped_info_cell(tmp_path: Path) -> None:
    text = sample(DCGM_PUBLIC)
    assert detect.detect_kind(text) == dcgm_diag.KIND
    node = load_text(tmp_path, text)
    assert figures(node) == {(0, "d2h", "ce/pinned"): 13.13, (0, "h2d", "ce/pinned"): 12.37}
    assert node.measurements.host_link[0].conditions == {"memory": "pinned", "subtest": "h2d_d2h_single_pinned"}
    assert notes(node) == [
        "line 22: bidirectional figures (GPU 0 22.39 GB/s) are both directions summed, not one direction's share; "
        "not read",
        "PCIe test result(s) 'Pass - All': Pass/Fail only, no figure; not read as host-link figures",
    ]


def test_dcgmi_diag_eight_gpus_with_low_bandwidth_warnings(tmp_path: Path) -> None:
    node = load_text(tmp_path, sample(DCGM_8GPU))
    found = figures(node)
    assert len(found) == 16 and found[(5, "h2d", "ce/pinned")] == 14.21 and found[(5, "d2h", "ce/pinned")] == 14.36
    assert found[(7, "h2d", "ce/pinned")] == 53.10
    # The warning and the info message state the same figure: one measurement, not two.
    assert len(node.measurements.host_link) == 16


def test_dcgmi_diag_4_names_the_gpu_in_the_heading(tmp_path: Path) -> None:
    found = figures(load_text(tmp_path, sample(DCGM_4)))
    assert found == {
        (gpu, direction, "ce/pinned"): value
        for gpu, h2d, d2h in [(0, 53.12, 54.62), (1, 53.08, 54.58), (2, 53.10, 54.60), (3, 53.07, 54.57)]
        for direction, value in (("h2d", h2d), ("d2h", d2h))
    }


def test_dcgmi_diag_squeezed_table_reads_the_same(tmp_path: Path) -> None:
    # A table pasted where runs of spaces collapsed and continuation rows lost their empty first cell.
    squeezed = []
    for line in sample(DCGM_8GPU).split("\n"):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        row = line
        if line.startswith("|") and len(cells) == 2:
            row = f"| {cells[1]} |" if not cells[0] else f"| {cells[0]} | {cells[1]} |"
        squeezed.append(" ".join(row.split()))
    assert figures(load_text(tmp_path, "\n".join(squeezed))) == figures(load_text(tmp_path, sample(DCGM_8GPU), "b.txt"))


def test_dcgmi_diag_json(tmp_path: Path) -> None:
    info = [f"GPU {gpu} Host to GPU bandwidth:\t\t{53 + gpu / 10:.2f} GB/s" for gpu in range(4)]
    info += ["GPU 0 bidirectional bandwidth:\t22.42 GB/s", "GPU 0 GPU to Host latency:\t\t4.386 us"]
    document = {
        "category": "Integration",
        "tests": [{"name": "pcie", "results": [{"gpu_ids": "0,1,2,3", "info": info, "status": "Pass"}]}],
    }
    found = figures(load_text(tmp_path, json.dumps(document, indent=4)))
    assert found == {(gpu, "h2d", "ce/pinned"): round(53 + gpu / 10, 2) for gpu in range(4)}


def test_dcgmi_diag_pass_fail_only_is_a_note_never_a_figure(tmp_path: Path) -> None:
    lines = [line for line in sample(DCGM_PUBLIC).split("\n") if "bandwidth" not in line and "|  " not in line[:29]]
    node = load_text(tmp_path, "\n".join(lines).replace("-r 2 -v", "-r 2"))
    assert node.measurements.host_link == []
    assert notes(node) == ["PCIe test result(s) 'Pass - All': Pass/Fail only, no figure; not read as host-link figures"]


def test_dcgmi_diag_nan_figure_is_an_error() -> None:
    text = sample(DCGM_PUBLIC).replace("12.37 GB/s", "-nan GB/s")
    with pytest.raises(ParseError, match="not a number"):
        dcgm_diag.parse(text)


# --- merged with other evidence, and in the results JSON ------------------------------------------


def stage(tmp_path: Path, *relatives: str) -> Path:
    root = tmp_path / "evidence"
    root.mkdir()
    for relative in relatives:
        (root / Path(relative).name).write_text(sample(relative), encoding="utf-8")
    return root


NVB_P2P = "nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt"


def test_host_link_merges_with_topology_and_pair_figures(tmp_path: Path) -> None:
    root = stage(tmp_path, TOPO, NVB_P2P, PER_DEVICE, DCGM_8GPU)
    node = load_evidence([root])
    assert len(node.gpus) == 8 and len(node.measurements.p2p) == 56 and node.paths
    sources = {(m.source or "").split(":")[0] for m in node.measurements.host_link}
    assert sources == {"bandwidthTest", "dcgmi diag pcie"}
    slow = sorted(m.value or 0.0 for m in node.measurements.host_link if m.gpu == 5 and m.direction == "h2d")
    assert slow == [14.2, 14.21]  # both tools' figures for GPU 5 are kept, as several pair figures are
    fed = {name.split(" (line ")[0] for name in node.provenance["host_link"].split(", ")}
    assert fed == {str(root / Path(relative).name) for relative in (PER_DEVICE, DCGM_8GPU)}


def test_results_json_carries_the_host_link_figures(pytester: pytest.Pytester, tmp_path: Path) -> None:
    root = stage(tmp_path, TOPO, PER_DEVICE)
    out = pytester.path / "results.json"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-evidence={root}",
        f"--nvlink-json={out}",
        "-k",
        "test_gpu_count",
        "-p",
        "no:cacheprovider",
    )
    assert out.exists(), result.stdout.str()
    host_link = json.loads(out.read_text())["node"]["measurements"]["host_link"]
    assert len(host_link) == 16
    slow = next(m for m in host_link if m["gpu"] == 5 and m["direction"] == "h2d")
    assert slow["value"] == 14.2 and slow["conditions"]["memory"] == "pinned" and slow["method"] == "ce"
    assert slow["source"] == f"bandwidthTest: {root / Path(PER_DEVICE).name} (line 121)"  # its sixth run


def test_a_measurement_is_a_model_record() -> None:
    measurement = HostLinkMeasurement(0, "h2d", 1.0, conditions={"memory": "pageable"})
    assert not is_pinned(measurement) and not is_pinned(HostLinkMeasurement(0, "h2d", 1.0))
