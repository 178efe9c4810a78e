"""nvidia-smi -q as evidence (inventory, PCIe link, NVSwitch fabric), with variants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import sample

from pytest_nvlink.model import FabricInfo
from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers import detect, smi_query

SMI_Q = "nvidia-smi-q/h100-sxm-8gpu-constructed-q.txt"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def one_gpu(text: str, index: int) -> str:
    """``nvidia-smi -q -i N``: the preamble and one GPU block."""
    blocks = re.split(r"(?m)^(?=GPU 0000)", text)
    return blocks[0] + blocks[index + 1]


def grep_windows(text: str, pattern: str, context: int) -> str:
    """What ``grep -C N PATTERN`` prints: windows around matching lines, separated by ``--``."""
    lines = text.splitlines()
    keep = sorted(
        {
            j
            for i, line in enumerate(lines)
            if re.search(pattern, line)
            for j in range(max(0, i - context), min(len(lines), i + context + 1))
        }
    )
    out: list[str] = []
    for position, index in enumerate(keep):
        if position and index != keep[position - 1] + 1:
            out.append("--")
        out.append(lines[index])
    return "\n".join(out) + "\n"


def test_whole_output_gives_inventory_pcie_and_fabric(tmp_path: Path) -> None:
    text = sample(SMI_Q)
    assert detect.detect_kind(text) == smi_query.KIND
    node = load_evidence([write(tmp_path, "q.txt", text)])
    assert len(node.gpus) == 8 and node.driver_version == "550.90.07"
    gpu = node.gpus[3]
    assert (gpu.name, gpu.pci_bus_id, gpu.pcie_gen_max, gpu.pcie_width_max) == (
        "NVIDIA H100 80GB HBM3",
        "0000:5d:00.0",
        5,
        16,
    )
    assert gpu.fabric == FabricInfo(
        "completed", "success", 0, "00000000-0000-0000-0000-000000000000", False, "healthy", health_problems=[]
    )
    assert node.gpu_list is not None and node.gpu_list.complete


def test_whole_output_passes_inventory_pcie_and_fabric(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "q.txt", sample(SMI_Q))
    run = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "fabric or pcie_link or gpu_count or model"
    )
    # The PCIe generation in -q is read at idle, not under load: the width passes, the generation is
    # no evidence (fails by default), as for a topology-only live run.
    run.assert_outcomes(passed=17, failed=8, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(["*no evidence for the PCIe generation of GPU 0 under load*"])


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "Status                            : Success",
            "Status                            : Insufficient Resources",
            "*GPU 2: NVSwitch fabric registration is completed with status insufficient_resources*",
        ),
        (
            "State                             : Completed",
            "State                             : In Progress",
            "*GPU 2: NVSwitch fabric registration is in progress*",
        ),
        (
            "Summary                       : Healthy",
            "Summary                       : Unhealthy",
            "*GPU 2: fabric health reports summary:unhealthy although registration completed*",
        ),
        (
            "Bandwidth                     : Full",
            "Bandwidth                     : Degraded",
            "*GPU 2: fabric health reports degraded_bandwidth although registration completed*",
        ),
        (
            "Route Unhealthy               : False",
            "Route Unhealthy               : True",
            "*GPU 2: fabric health reports route_unhealthy although registration completed*",
        ),
        (
            "Incorrect Configuration       : None",
            "Incorrect Configuration       : Insufficient NVLinks",
            "*GPU 2: fabric health reports incorrect_configuration:insufficient_nvlinks although*",
        ),
        (
            "Access Timeout Recovery       : False",
            "Access Timeout Recovery       : True",
            "*GPU 2: fabric health reports access_timeout_recovery although registration completed*",
        ),
    ],
    ids=["insufficient-resources", "in-progress", "unhealthy", "degraded", "route", "configuration", "timeout"],
)
def test_unhealthy_fabric_of_one_gpu_fails_it(pytester: pytest.Pytester, old: str, new: str, message: str) -> None:
    text = sample(SMI_Q)
    start = text.index("GPU 00000000:3A:00.0")
    path = write(pytester.path, "q.txt", text[:start] + text[start:].replace(old, new, 1))
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "fabric")
    run.assert_outcomes(passed=7, failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines([message])


def test_one_gpu_is_placed_by_minor_number_and_leaves_the_count_open(tmp_path: Path) -> None:
    path = write(tmp_path, "q-i5.txt", one_gpu(sample(SMI_Q), 5))
    node = load_evidence([path])
    assert len(node.gpus) == 6 and node.gpus[5].pci_bus_id == "0000:ab:00.0"
    assert node.gpus[4].fabric is None and node.gpu_list is not None and not node.gpu_list.complete
    assert node.evidence_notes[str(path)] == [
        "GPU 00000000:AB:00.0 taken as GPU 5 from its Minor Number (partial nvidia-smi -q)"
    ]


def test_grep_windows_shifted_left_and_padded_to_55(tmp_path: Path) -> None:
    text = re.sub(r"(?m)^(\s*)(\S[^:]*?)\s*: ", lambda m: m.group(2).ljust(55) + ": ", sample(SMI_Q))
    windows = grep_windows(text, r"^GPU 0000|Fabric|Attached", 12)
    assert "--" in windows.splitlines()
    result = smi_query.parse(windows)
    assert len(result.gpus) == 8 and result.complete
    assert all(g.get("fabric_state") == "Completed" and g.get("health_summary") == "Healthy" for g in result.gpus)
    node = load_evidence([write(tmp_path, "grep.txt", windows)])
    assert all(g.fabric is not None and g.fabric.state == "completed" for g in node.gpus)


def test_lines_before_any_gpu_header_are_a_note() -> None:
    text = sample(SMI_Q)
    body = text[text.index("GPU 00000000:18:00.0") + 30 :]
    result = smi_query.parse("Attached GPUs : 8\n" + body)
    assert result.notes and "before any 'GPU <bus id>' header" in result.notes[0][1]


def test_a_health_flag_line_lost_from_one_gpu_is_noted() -> None:
    text = sample(SMI_Q)
    assert smi_query.parse(text).notes == ()
    lines = text.split("\n")
    first = next(at for at, line in enumerate(lines) if line.strip().startswith("Route Unhealthy"))
    damaged = smi_query.parse("\n".join(lines[:first] + lines[first + 1 :]))
    (note,) = damaged.notes
    assert "lacks line(s) other GPUs print (route unhealthy)" in note[1]


def test_a_lone_block_missing_one_of_the_mask_flags_is_noted() -> None:
    block = (
        "GPU 00000000:18:00.0\n    Fabric\n        State : Completed\n        Status : Success\n"
        "        Health\n            Bandwidth : Full\n            Route Recovery in progress : False\n"
        "            Route Unhealthy : False\n            Access Timeout Recovery : False\n"
    )
    (note,) = smi_query.parse(block).notes
    assert note[0] == 1 and "(incorrect configuration)" in note[1]
    whole = smi_query.parse(block + "            Incorrect Configuration : None\n")
    assert whole.notes == ()


def test_an_unreadable_partition_flag_counts_against_the_gpu() -> None:
    block = (
        "GPU 00000000:18:00.0\n    Fabric\n        State : Completed\n        Status : Success\n"
        "        Health\n            Partition Assigned : Tru\n"
    )
    fabric = smi_query._fabric(smi_query.parse(block).gpus[0])
    assert fabric is not None and fabric.health_problems == ["partition_assigned:tru"]
