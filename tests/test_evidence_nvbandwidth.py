"""Bidirectional, newer and older nvbandwidth outputs: variants built from the shipped old-format sample."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers import nvbandwidth

SAMPLE = "nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt"
NAME = "device_to_device_bidirectional_memcpy_read_ce"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def matrix_lines(scale: float = 1.0, gpus: int = 8) -> list[str]:
    """The sample's matrix (header and rows), values scaled, cut to the first ``gpus`` GPUs."""
    lines = sample(SAMPLE).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("0 "))
    out = ["".join(f"{c:>10}" for c in range(gpus))]
    for line in lines[start + 1 : start + 1 + gpus]:
        tokens = line.split()
        cells = ["N/A" if float(t) == 0.0 else f"{float(t) * scale:.2f}" for t in tokens[1 : gpus + 1]]
        out.append(f" {tokens[0]}" + "".join(f"{c:>10}" for c in cells))
    return out


def bidirectional() -> str:
    """A newer-version bidirectional testcase: Read1, Read2 and Total matrices with SUM lines between."""
    lines = [f"Running {NAME}."]
    for part, scale in (("Read1", 1.0), ("Read2", 1.0), ("Total", 2.0)):
        lines += [f"memcpy CE GPU(row) <-> GPU(column) {part} bandwidth (GB/s)", *matrix_lines(scale), ""]
        lines += [f"SUM {NAME}_{part.lower()} {sum(276.0 * scale for _ in range(56)):.2f}", ""]
    return "\n".join(lines) + "\n"


def test_bidirectional_keeps_directions_and_total_apart(pytester: pytest.Pytester) -> None:
    result = nvbandwidth.parse(bidirectional())
    case = result.testcases[NAME]
    assert case.bidirectional and sorted(case.parts) == ["Read1", "Read2"]
    assert case.matrix[(0, 1)] == pytest.approx(552.14) and case.parts["Read1"][(0, 1)] == pytest.approx(276.07)
    path = write(pytester.path, "bidir.txt", bidirectional())
    node = load_evidence([path])
    bidir = [m for m in node.measurements.p2p if m.kind == "bidirectional"]
    assert len(bidir) == 56 and min(m.value or 0 for m in bidir) > 540  # the Total matrix, not one direction
    assert {m.bidirectional_sum for m in bidir} == {True}


def test_a_single_bidirectional_matrix_is_per_direction_and_judged_doubled(pytester: pytest.Pytester) -> None:
    # Only the Read1 matrix (276 GB/s each way): per direction, so 552 GB/s both ways against the sum floor.
    text = bidirectional().split("\nmemcpy CE GPU(row) <-> GPU(column) Read2")[0] + "\n"
    node = load_evidence([write(pytester.path, "bidir-one.txt", text)])
    bidir = [m for m in node.measurements.p2p if m.kind == "bidirectional"]
    assert len(bidir) == 56 and {m.bidirectional_sum for m in bidir} == {False}
    site = write(pytester.path, "site.toml", "[p2p]\nbidirectional_min_gbps = 540.0\n")
    run = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-evidence={pytester.path / 'bidir-one.txt'}",
        f"--nvlink-thresholds={site}",
        "-k",
        "p2p_bidirectional",
    )
    run.assert_outcomes(passed=56, deselected=run.parseoutcomes()["deselected"])


def test_seven_visible_gpus_parse_and_fail_the_count(pytester: pytest.Pytester) -> None:
    text = "\n".join(
        [
            "Running device_to_device_memcpy_write_ce.",
            "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
            *matrix_lines(gpus=7),
        ]
    )
    path = write(pytester.path, "seven.txt", text + "\n")
    assert len(load_evidence([path]).gpus) == 7
    run = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "gpu_count")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(["*expected 8 GPUs (a100-8gpu.toml:suite.gpu_count), found 7*"])


def test_newer_preamble_with_running_line_cut_is_named_by_its_sum_line(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "nvbandwidth Version: v0.8",
            "Built from Git version: v0.8",
            "",
            "MPI version: Open MPI v4.1.7",
            "CUDA Runtime Version: 12080",
            "CUDA Driver Version: 12080",
            "Driver Version: 570.124.06",
            "",
            "...",
            "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
            *matrix_lines(),
            "",
            "SUM device_to_device_memcpy_write_ce 15459.35",
        ]
    )
    result = nvbandwidth.parse(text)
    assert list(result.testcases) == ["device_to_device_memcpy_write_ce"] and result.versions["version"] == "v0.8"
    assert result.testcases["device_to_device_memcpy_write_ce"].total == pytest.approx(15459.35)
    node = load_evidence([write(tmp_path, "nvb.txt", text)])
    assert len([m for m in node.measurements.p2p if m.kind == "unidirectional"]) == 56


def test_matrix_with_no_name_at_all_is_a_note(tmp_path: Path) -> None:
    text = "...\nmemcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)\n" + "\n".join(matrix_lines()) + "\n"
    result = nvbandwidth.parse("Running host_to_device_memcpy_ce.\nWaived.\n" + text)
    assert result.testcases == {} and result.waived == ("host_to_device_memcpy_ce",)
    assert result.notes and "no 'Running <testcase>.' line" in result.notes[0][1]


@pytest.mark.parametrize("indent", ["", "      "])
def test_older_format_without_sum_lines_and_indented(tmp_path: Path, indent: str) -> None:
    text = "\n".join(indent + line for line in sample(SAMPLE).splitlines())
    result = nvbandwidth.parse(re.sub(r"(?m)^\s*SUM .*$", "", text))
    assert result.testcases["device_to_device_memcpy_write_ce"].total is None
