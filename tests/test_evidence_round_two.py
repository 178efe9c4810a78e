"""nvbandwidth without a GPU matrix, a bare nvidia-smi -q Fabric block, consumer-card P2P (issue 26: 5, 6, 9)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers import detect, nvbandwidth, smi_query

ABORTED = "nvbandwidth/constructed-h100-8gpu-aborted-data-check.txt"
WAIVED = "nvbandwidth/constructed-h100-nvl-2gpu-waived-no-p2p.txt"
HOST_ONLY = "nvbandwidth/constructed-h200-8gpu-host-device-only.txt"
FABRIC = "nvidia-smi-q/constructed-gb200-fabric-block-only.txt"
CONSUMER = "p2pBandwidthLatencyTest/constructed-rtx3090-2gpu-pcie-p2p-through-host-bridge.txt"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def outcomes(run: pytest.RunResult, **counts: int) -> None:
    run.assert_outcomes(**counts, deselected=run.parseoutcomes().get("deselected", 0))


# --- nvbandwidth ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [ABORTED, WAIVED, HOST_ONLY])
def test_nvbandwidth_without_a_gpu_matrix_is_still_nvbandwidth(name: str) -> None:
    assert detect.detect_kind(sample(name)) == nvbandwidth.KIND


def test_aborted_data_check_names_the_testcase() -> None:
    result = nvbandwidth.parse(sample(ABORTED))
    assert list(result.testcases) == ["device_to_device_memcpy_read_ce"]
    assert result.aborted == {
        "device_to_device_memcpy_write_ce": "Invalid value when checking the pattern at 0x7f2c5a000000"
    }


def test_aborted_data_check_fails_every_pair_as_wrong_data(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "nvb.txt", sample(ABORTED))
    run = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-evidence={path}",
        "--nvlink-evidence-missing=skip",
        "-k",
        "unidirectional",
    )
    outcomes(run, failed=56)
    run.stdout.fnmatch_lines(
        [
            "*GPU 0 -> GPU 1: WRONG DATA: nvbandwidth device_to_device_memcpy_write_ce aborted in its data check "
            "(Invalid value when checking the pattern at 0x7f2c5a000000)*",
            "*note: nvbandwidth device_to_device_memcpy_write_ce aborted in its data check*",
        ]
    )


def test_waived_device_to_device_fails_p2p_of_the_pair(pytester: pytest.Pytester) -> None:
    result = nvbandwidth.parse(sample(WAIVED))  # "> " quoting and lost indentation are read through
    assert result.waived == ("device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce")
    path = write(pytester.path, "nvb.txt", sample(WAIVED))
    run = pytester.runpytest(
        "--nvlink-suite=h100-nvl-pair",
        f"--nvlink-evidence={path}",
        "--nvlink-evidence-missing=skip",
        "-k",
        "p2p_status",
    )
    outcomes(run, failed=2)
    run.stdout.fnmatch_lines(["*GPU 0 -> GPU 1: P2P not usable (read waived: no P2P, write waived: no P2P)*"])


def test_host_device_figures_are_never_gpu_pairs(tmp_path: Path) -> None:
    result = nvbandwidth.parse(sample(HOST_ONLY))
    case = result.testcases["host_to_device_memcpy_ce"]
    assert (case.row_kind, case.column_kind, case.total) == ("CPU", "GPU", 443.13)
    assert sorted(case.matrix) == [(0, gpu) for gpu in range(8)]
    path = write(tmp_path, "nvb.txt", sample(HOST_ONLY))
    node = load_evidence([path])
    assert len(node.gpus) == 8 and node.measurements.p2p == []
    assert str(path) not in node.evidence_notes  # every figure read is a host-link figure: nothing to note
    figures = {(m.gpu, m.direction, m.method): m.value for m in node.measurements.host_link}
    assert len(figures) == 24 and figures[(3, "h2d", "ce")] == 55.37 and figures[(7, "h2d", "sm")] == 54.10


def test_host_only_file_without_device_lines_bounds_the_gpu_count(tmp_path: Path) -> None:
    text = "\n".join(line for line in sample(HOST_ONLY).split("\n") if not line.startswith("Device "))
    node = load_evidence([write(tmp_path, "nvb.txt", text)])
    assert len(node.gpus) == 8 and node.gpu_list is not None and not node.gpu_list.complete


# --- nvidia-smi -q Fabric block on its own ----------------------------------------------------------


def test_bare_fabric_block_is_read_as_one_gpu_of_unknown_index() -> None:
    text = sample(FABRIC)
    assert detect.detect_kind(text) == smi_query.KIND
    result = smi_query.parse(text)
    assert len(result.gpus) == 1 and result.gpus[0].index is None and result.gpus[0].bus_id == ""
    assert result.gpus[0].get("health_summary") == "Healthy" and smi_query.fabric_fault(result.gpus[0]) is None


def test_healthy_bare_block_of_unknown_gpu_passes_nothing(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "fabric.txt", sample(FABRIC))
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "fabric")
    outcomes(run, failed=8)  # no GPU's fabric is proven: every one is without evidence (fail closed)
    run.stdout.fnmatch_lines(
        ["*note: *fabric.txt:1: nvidia-smi -q Fabric block of a GPU whose index is not stated: healthy"]
    )


@pytest.mark.parametrize(
    ("old", "new", "shown"),
    [
        (": Completed", ": In Progress", "State In Progress"),
        (": Completed", ": Not Started", "State Not Started"),
        (": Success", ": Insufficient Resources", "Status Insufficient Resources"),
        (
            "Route Unhealthy               : False",
            "Route Unhealthy               : True",
            "Health Route Unhealthy True",
        ),
        (": Healthy", ": Unhealthy", "Health Summary Unhealthy"),
    ],
    ids=["in-progress", "not-started", "status", "route-unhealthy", "summary"],
)
def test_unhealthy_bare_block_fails_the_fabric_check_naming_the_value(
    pytester: pytest.Pytester, old: str, new: str, shown: str
) -> None:
    path = write(pytester.path, "fabric.txt", sample(FABRIC).replace(old, new, 1))
    run = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "--nvlink-evidence-missing=skip", "-k", "fabric"
    )
    outcomes(run, failed=1, skipped=7)
    run.stdout.fnmatch_lines(
        [
            f"*GPU 0: no fabric state of its own, and a GPU of this node whose index the evidence "
            f"does not state reports {shown}*"
        ]
    )


def test_bare_block_with_a_stated_index_is_that_gpu(pytester: pytest.Pytester) -> None:
    text = "$ nvidia-smi -q -i 3 | grep -A 12 Fabric\n" + sample(FABRIC).replace(": Completed", ": In Progress")
    node = load_evidence([write(pytester.path, "fabric.txt", text)])
    assert node.gpus[3].fabric is not None and node.gpus[3].fabric.state == "in_progress"
    path = pytester.path / "fabric.txt"
    run = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "--nvlink-evidence-missing=skip", "-k", "fabric"
    )
    outcomes(run, failed=1, skipped=7)
    run.stdout.fnmatch_lines(["*GPU 3: NVSwitch fabric registration is in progress*"])


def test_whole_q_output_is_unchanged_by_the_bare_block_reading() -> None:
    result = smi_query.parse(sample("nvidia-smi-q/h100-sxm-8gpu-constructed-q.txt"))
    assert len(result.gpus) == 8 and all(gpu.bus_id and gpu.index is None for gpu in result.gpus)


# --- p2pBandwidthLatencyTest on consumer cards ----------------------------------------------------


def test_consumer_pair_with_peer_access_is_judged_on_its_figures(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "p2p.txt", sample(CONSUMER))
    node = load_evidence([path])
    figures = {(m.src, m.dst, m.kind): m for m in node.measurements.p2p}
    assert figures[(0, 1, "unidirectional")].value == 6.38 and figures[(0, 1, "unidirectional")].can_access_peer
    run = pytester.runpytest(
        "--nvlink-suite=h100-nvl-pair",
        f"--nvlink-evidence={path}",
        "--nvlink-evidence-missing=skip",
        "-k",
        "unidirectional",
    )
    outcomes(run, failed=2)
    run.stdout.fnmatch_lines(
        ["*GPU 0 -> GPU 1: unidirectional bandwidth 6.4 GB/s (p2pBandwidthLatencyTest: *), below*"]
    )
