"""Summary tables: the collective verdict column, the evidence coverage width, and list-only runs."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.model import Node
from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.run import Run, RunOptions
from pytest_nvlink.report import collective_table, evidence_coverage


def _replay(name: str) -> Run:
    def no_probe() -> Node:
        raise AssertionError("a replay must not probe")

    return build_run(RunOptions(suite="h100-8gpu", replay=SNAPSHOTS / f"{name}.json"), no_probe)


def test_only_the_judged_size_gets_a_verdict() -> None:
    run = _replay("h100-8gpu-healthy")
    judged = next(m for m in run.node.measurements.collectives if m.op == "all_reduce")
    # A sweep row far below the floor at a small size: the verdict is taken at the threshold's size only.
    small = dataclasses.replace(judged, size_bytes=1 << 20, busbw_gbps=20.0, algbw_gbps=10.0)
    run.node.measurements.collectives.append(small)
    lines = collective_table(run).splitlines()
    assert lines[0].split()[-1] == "verdict"
    rows = {(line.split()[0], line.split()[1]): line.split()[-1] for line in lines[2:]}
    assert rows[("all_reduce", "1")] == "(sweep)"
    assert rows[("all_reduce", "4096")] == "ok"
    assert "BELOW" not in collective_table(run)


def test_the_judged_size_below_its_floor_reads_below() -> None:
    lines = collective_table(_replay("h100-8gpu-degraded")).splitlines()
    assert [line.split()[-1] for line in lines if line.startswith("all_reduce")] == ["BELOW"]


def test_evidence_coverage_lists_a_few_files_and_counts_the_rest() -> None:
    files = [f"burn-in/node-17/nccl-tests-run-{i:03d}-all_reduce-8gpu.txt" for i in range(120)]
    node = Node(source="evidence", provenance={"collectives": ", ".join(files), "paths": "burn-in/topo.txt"})
    table = evidence_coverage(node)
    assert max(len(line) for line in table.splitlines()) < 200
    assert "… and 117 more (120 files)" in table
    assert files[0] in table and files[3] not in table
    assert "burn-in/topo.txt" in table
    assert "(none)" in table


@pytest.mark.parametrize("option", ["--co", "--fixtures"])
def test_listing_runs_print_no_verdict_tables(pytester: pytest.Pytester, option: str) -> None:
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-degraded", option)
    assert result.ret == 0
    text = result.stdout.str()
    assert "nvlink_judge" in text or "test_nvlink_active_links[gpu3]" in text
    for table in ("pytest-nvlink summary", "topology (nvidia-smi", "worst unidirectional pair", "first failure"):
        assert table not in text
