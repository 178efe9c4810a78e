"""Summary tables: the collective verdict column, the evidence coverage width, and list-only runs."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from conftest import SNAPSHOTS, snapshot_with_lists

from pytest_nvlink.model import Node
from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.items import ItemLog, ItemResult
from pytest_nvlink.record.run import Run, RunOptions
from pytest_nvlink.report import collective_table, evidence_coverage


def _replay(name: str) -> Run:
    def no_probe() -> Node:
        raise AssertionError("a replay must not probe")

    return build_run(RunOptions(suite="h100-8gpu", replay=SNAPSHOTS / f"{name}.json"), no_probe)


def _judged(pytester: pytest.Pytester, run: Run) -> list[ItemResult]:
    """The collective items of the results record, judged by the plugin on the run's own node."""
    snapshot = pytester.path / "judged.json"
    from pytest_nvlink.model.document import save_snapshot

    save_snapshot(run.node, snapshot)
    args = ("--nvlink-suite=h100-8gpu", f"--nvlink-replay={snapshot}", "-k", "test_collective_busbw")
    recorded = pytester.inline_run(*args, "-p", "no:cacheprovider")
    log = ItemLog()
    for report in recorded.getreports("pytest_runtest_logreport"):
        log.add(report)
    return log.results()


def test_only_the_judged_size_gets_a_verdict(pytester: pytest.Pytester) -> None:
    run = _replay("h100-8gpu-healthy")
    judged = next(m for m in run.node.measurements.collectives if m.op == "all_reduce")
    # A sweep row far below the floor at a small size: the verdict is taken at the threshold's size only.
    small = dataclasses.replace(judged, size_bytes=1 << 20, busbw_gbps=20.0, algbw_gbps=10.0)
    run.node.measurements.collectives.append(small)
    items = _judged(pytester, run)
    lines = collective_table(run, items).splitlines()
    assert lines[0].split()[-1] == "verdict"
    rows = {(line.split()[0], line.split()[1]): line.split()[-1] for line in lines[2:]}
    assert rows[("all_reduce", "1")] == "(sweep)"
    assert rows[("all_reduce", "4096")] == "ok"
    assert "BELOW" not in collective_table(run, items)


def test_the_judged_size_below_its_floor_reads_below(pytester: pytest.Pytester) -> None:
    run = _replay("h100-8gpu-degraded")
    lines = collective_table(run, _judged(pytester, run)).splitlines()
    assert [line.split()[-1] for line in lines if line.startswith("all_reduce")] == ["BELOW"]


def test_without_a_verdict_no_row_is_marked_ok(pytester: pytest.Pytester) -> None:
    # The table reads the record: a run whose collective check did not run judged no row.
    table = collective_table(_replay("h100-8gpu-healthy"), [])
    assert " ok" not in table and "BELOW" not in table


def test_a_collective_over_fewer_ranks_than_the_suite_reads_as_its_failing_verdict(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    # all_reduce over 2 of the suite's 8 GPUs, well above its floor: its item fails (coverage), so its row must too.
    document = snapshot_with_lists(SNAPSHOTS / "h100-8gpu-healthy.json")
    for m in document["node"]["measurements"]["collectives"]:
        if m["op"] == "all_reduce":
            m["world_size"], m["rank_gpus"] = 2, [0, 1]
    snapshot = tmp_path / "two-ranks.json"
    snapshot.write_text(json.dumps(document), encoding="utf-8")
    report = tmp_path / "report.html"
    args = ("--nvlink-suite=h100-8gpu", f"--nvlink-replay={snapshot}", f"--nvlink-report={report}", "-rf")
    result = pytester.runpytest(*args, "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["FAILED nvlink/test_collectives.py::test_collective_busbw[[]all_reduce[]]*"])
    text = result.stdout.str()
    row = next(line for line in text.splitlines() if line.startswith("all_reduce ") and " 2 " in line)
    assert row.split()[-1] == "FAIL", row
    assert [line.split()[-1] for line in text.splitlines() if line.startswith("all_gather ")] == ["ok"]
    # The HTML table marks the same row, and only it, from the same verdict.
    page = report.read_text(encoding="utf-8")
    marked = re.findall(r"<tr><td>(\w+)</td>(?:(?!</tr>).)*?class=\"num below\"", page, re.S)
    assert marked == ["all_reduce"]


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
