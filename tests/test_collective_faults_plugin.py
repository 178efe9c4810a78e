"""The in-process collective campaign under pytest: a rank asleep mid-collective, in the results and JUnit."""

from __future__ import annotations

import json
import time

import pytest
from conftest import REPO, SNAPSHOTS, serve_live_node, tiny_collective_thresholds

from pytest_nvlink.measure.worker import FAULT_ENV
from pytest_nvlink.model import Measurements
from pytest_nvlink.sources.snapshot.file import load_snapshot

pytest.importorskip("torch.distributed")

SUITE = """
[suite]
description = "two H100 on one NVSwitch, for the hung-rank test"
thresholds = "tiny.toml"
gpu_count = 2
gpu_models = ["H100"]
nvswitch = true
[topology]
default = "NV18"
[measure]
collective_iterations = 2
collective_warmup = 1
timeout_s = 20
collectives = ["all_reduce", "all_gather", "broadcast"]
"""


def test_a_rank_asleep_mid_collective_fails_that_op_and_the_later_ones_by_name(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.measurements = Measurements()
    serve_live_node(pytester, monkeypatch, node, 2)
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{REPO / 'tests'}:{REPO}")  # this checkout's plugin
    monkeypatch.setenv(FAULT_ENV, "hang:rank=1:op=all_gather:step=check")
    pytester.makefile(".toml", suite=SUITE, tiny=tiny_collective_thresholds("all_reduce", "all_gather", "broadcast"))
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        f"--nvlink-suite={pytester.path / 'suite.toml'}",
        "--nvlink-backend=gloo",
        f"--nvlink-json={pytester.path / 'results.json'}",
        f"--junitxml={pytester.path / 'junit.xml'}",
        "-k",
        "collective_busbw",
        "-p",
        "no:cacheprovider",
        "-p",
        "fake_nvml_plugin",
        timeout=300,
    )
    assert time.monotonic() - started < 120  # the 20 s session, bounded by the ranks' own step watches
    result.assert_outcomes(passed=1, failed=2, deselected=result.parseoutcomes()["deselected"])
    items = {
        item["nodeid"].split("::")[-1]: item
        for item in json.loads((pytester.path / "results.json").read_text())["items"]
    }
    assert items["test_collective_busbw[all_reduce]"]["outcome"] == "pass"
    assert items["test_collective_busbw[all_gather]"]["outcome"] == "fail"
    assert items["test_collective_busbw[broadcast]"]["outcome"] == "fail"
    junit = (pytester.path / "junit.xml").read_text()
    text = json.dumps(items["test_collective_busbw[all_gather]"])
    for where in (text, junit):
        assert "rank 1 (cpu) hung in all_gather at 1 MiB (data check) for over " in where
        assert "rank 0 (cpu) hung in all_gather at 1 MiB (barrier before timing)" in where
    assert "not run: all_gather failed first: rank 1 (cpu) hung" in json.dumps(
        items["test_collective_busbw[broadcast]"]
    )
