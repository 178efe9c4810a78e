"""Every real sample judged by the right suite as a person reading it would; damaged variants fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DATA

EVIDENCE = DATA / "evidence"

# (suite, sample, check -> number of items that must pass); everything else must be "no evidence".
SAMPLES = [
    ("a100-8gpu", "topo/a100-sxm4-80gb-8gpu-distserve3.txt", {"test_path": 28, "test_gpu_count": 1}),
    ("h100-8gpu", "topo/h100-sxm-8gpu-baremetal-supermicro-nccl1264-partial.txt", {"test_path": 28}),
    ("l40s-4gpu", "topo/l40s-4gpu-pcie-only-node-sys.txt", {"test_path": 6, "test_gpu_count": 1}),
    ("h100-nvl-pair", "topo/h100-pcie-nvlink-bridge-pair-hpe-dl380a.txt", {"test_path": 1}),
    (
        "h100-8gpu",
        "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt",
        {"test_nvlink_active_links": 8, "test_nvlink_speed": 8, "test_gpu_model": 8},
    ),
    ("a100-8gpu", "nvlink/a100-sxm4-40gb-vm-brev-nvlink-e-all.txt", {"test_nvlink_errors": 8, "test_gpu_model": 8}),
    ("a100-8gpu", "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt", {"test_collective_busbw": 1}),
    (
        "a100-8gpu",
        "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt",
        {"test_p2p_unidirectional": 56, "test_p2p_bidirectional": 56, "test_p2p_latency": 56, "test_p2p_status": 56},
    ),
    ("a100-8gpu", "nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt", {"test_p2p_unidirectional": 56}),
    ("h100-8gpu", "nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt", {"test_nccl_transport": 1}),
]


def _passed_per_check(result: pytest.RunResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in result.stdout.lines:
        if " PASSED" in line and "::" in line:
            name = line.split("::")[1].split("[")[0].split()[0]
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.parametrize(
    ("suite", "sample", "expected"), SAMPLES, ids=[s[1].split("/")[0] + ":" + s[0] for s in SAMPLES]
)
def test_sample_judged_as_a_person_would(
    pytester: pytest.Pytester, suite: str, sample: str, expected: dict[str, int]
) -> None:
    result = pytester.runpytest(
        f"--nvlink-suite={suite}", f"--nvlink-evidence={EVIDENCE / sample}", "--nvlink-evidence-missing=skip", "-v"
    )
    assert result.ret == 0, result.stdout.str()
    passed = _passed_per_check(result)
    for check, count in expected.items():
        assert passed.get(check) == count, (check, passed)
    # Nothing the sample does not cover may pass: those are skips with "no evidence for".
    assert set(passed) <= set(expected) | {"test_gpu_count", "test_gpu_model", "test_driver"}
    result.stdout.fnmatch_lines(["*evidence *checks *files*"])


def test_missing_evidence_fails_by_default(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={EVIDENCE / SAMPLES[0][1]}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*no evidence for the NVLink state of GPU 0*"])


def _variant(tmp: Path, sample: str, old: str, new: str, count: int = 1) -> Path:
    text = (EVIDENCE / sample).read_text()
    assert text.count(old) >= count
    path = tmp / Path(sample).name
    path.write_text(text.replace(old, new, count))
    return path


def test_vm_topology_reads_as_silent_pcie_fallback(pytester: pytest.Pytester) -> None:
    sample = "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
    path = _variant(pytester.path, sample, "NV12", "PHB", count=-1)
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "test_path")
    result.assert_outcomes(failed=28, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(["*path is PHB, expected NV12*silent PCIe fallback*"])


def test_inactive_link_in_nvlink_status_fails_that_gpu(pytester: pytest.Pytester) -> None:
    sample = "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt"
    text = (EVIDENCE / sample).read_text()
    gpu3 = text.index("GPU 3:")
    damaged = text[:gpu3] + text[gpu3:].replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 1)
    path = pytester.path / "nvlink-s.txt"
    path.write_text(damaged)
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "active_links")
    result.assert_outcomes(passed=7, failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(["*GPU 3: 17 of 18 NVLinks active*inactive link(s): 5*"])


def test_wrong_data_in_nccl_tests_fails_the_collective(pytester: pytest.Pytester) -> None:
    sample = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"
    row = "1073741824     268435456     float     sum      -1   8166.8  131.48  230.08      0"
    path = _variant(pytester.path, sample, row, row[:-1] + "3")
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "all_reduce")
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(["*all_reduce at 1024 MiB returned WRONG DATA*"])


def test_files_that_disagree_name_both(pytester: pytest.Pytester) -> None:
    topo = EVIDENCE / "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
    four = EVIDENCE / "topo/l40s-4gpu-pcie-only-node-sys.txt"
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={topo}", f"--nvlink-evidence={four}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert "a100-sxm4-80gb-8gpu-distserve3.txt" in text
    assert "l40s-4gpu-pcie-only-node-sys.txt" in text


def test_unreadable_file_names_file_and_line(pytester: pytest.Pytester) -> None:
    sample = "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
    text = (EVIDENCE / sample).read_text().splitlines()
    row = next(i for i, line in enumerate(text) if line.startswith("GPU3"))
    text[row] = "GPU3    NV12    NV12"  # a row cut short: which cells are missing cannot be known
    path = pytester.path / "topo.txt"
    path.write_text("\n".join(text) + "\n")
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --nvlink-evidence: *topo.txt:{row + 1}: row GPU3 has 2 cells for 8 GPU columns*"]
    )
