"""The live measurement path through the whole plugin: fake NVML, real gloo ranks in spawned processes."""

from __future__ import annotations

import pytest
from conftest import SNAPSHOTS, serve_live_node, tiny_collective_thresholds

from pytest_nvlink.model import Measurements
from pytest_nvlink.sources.snapshot.file import load_snapshot

SUITE = """
[suite]
description = "two H100 on one NVSwitch, for the harness test"
thresholds = "tiny.toml"
gpu_count = 2
gpu_models = ["H100 80GB HBM3"]
nvswitch = true
[topology]
default = "NV18"
[measure]
collective_iterations = 2
collective_warmup = 1
timeout_s = 120
collectives = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
"""
TINY = tiny_collective_thresholds("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


@pytest.fixture
def two_gpu_node(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.measurements = Measurements()
    serve_live_node(pytester, monkeypatch, node, 2)
    pytester.makefile(".toml", suite=SUITE, tiny=TINY)


def test_collectives_run_for_real_on_gloo_and_are_judged(pytester: pytest.Pytester, two_gpu_node: None) -> None:
    save = pytester.path / "saved.json"
    result = pytester.runpytest_subprocess(
        f"--nvlink-suite={pytester.path / 'suite.toml'}",
        "--nvlink-backend=gloo",
        "-k",
        "collective or nccl",
        f"--nvlink-save={save}",
        "-p",
        "no:cacheprovider",
        "-p",
        "fake_nvml_plugin",
        timeout=300,
    )
    result.assert_outcomes(passed=5, failed=1, deselected=31)
    # gloo writes no NCCL log, and the audit says so instead of passing.
    result.stdout.fnmatch_lines(["*could not determine the transports NCCL used: no NCCL INFO log captured*"])
    result.stdout.fnmatch_lines(["nvlink: collectives: starting 2 gloo ranks", "nvlink: collective all_reduce 1*"])
    saved = load_snapshot(save).measurements.collectives
    assert sorted(m.op for m in saved) == ["all_gather", "all_reduce", "all_to_all", "broadcast", "reduce_scatter"]
    assert all(m.correct and m.backend == "gloo" and m.busbw_gbps for m in saved)


def test_p2p_without_cuda_fails_with_the_reason(pytester: pytest.Pytester, two_gpu_node: None) -> None:
    result = pytester.runpytest_subprocess(
        f"--nvlink-suite={pytester.path / 'suite.toml'}",
        "-k",
        "p2p_unidirectional",
        "-p",
        "no:cacheprovider",
        "-p",
        "fake_nvml_plugin",
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*could not determine the unidirectional P2P bandwidth GPU 0 -> GPU 1: *CUDA*"])
