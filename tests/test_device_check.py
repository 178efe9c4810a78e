"""benchmarks/device_check.py on a machine without GPUs: every section says why it could not run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import device_check  # noqa: E402


def _report(out: Path) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = json.loads((out / "device-check.json").read_text())["sections"]
    assert list(sections) == list(device_check.SECTIONS)
    return sections


def test_dry_run_reports_every_section_as_not_run(tmp_path: Path) -> None:
    assert device_check.main(["--out", str(tmp_path), "--dry-run"]) == 0
    for name, section in _report(tmp_path).items():
        assert section == {"status": "could not run", "reason": "dry run: NVML and CUDA were not touched"}, name
    text = (tmp_path / "device-check.txt").read_text()
    assert "  nccl: could not run: dry run: NVML and CUDA were not touched" in text


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia"), reason="an NVIDIA driver is present: it would run")
def test_cpu_machine_gives_a_reason_per_section_instead_of_crashing(tmp_path: Path) -> None:
    assert device_check.main(["--out", str(tmp_path)]) == 0
    sections = _report(tmp_path)
    for name, section in sections.items():
        assert section["status"] == "could not run", (name, section)
        assert section["reason"], name
    assert "NVML" in sections["probe"]["reason"] or "nvidia-ml-py" in sections["probe"]["reason"]
    assert sections["nvml_fields"]["reason"].startswith("NVML could not be initialized")
    for name in device_check.CHILD_SECTIONS:
        assert "CUDA is not available to torch" in sections[name]["reason"], name


def test_nccl_line_shapes_mask_numbers_and_count_what_the_parser_misses() -> None:
    text = (
        "node1:11:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
        "node1:11:12 [0] paths.cc:396 (ncclTopoCheckP2p) NCCL WARN P2P is disabled\n"
        "[0] weird NCCL INFO no host prefix\n"
    )
    shapes = device_check.nccl_line_shapes([text])
    assert shapes["shapes"]["nodeN:N:N [N] paths.cc:N (ncclTopoCheckPNp) NCCL WARN"] == 1
    assert shapes["lines_our_regex_misses"] == 1
