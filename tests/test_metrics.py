"""``--nvlink-metrics``: the Prometheus textfile, parsed back with prometheus-client's own parser."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.audit import AuditCounts
from pytest_nvlink.record.items import item_result
from pytest_nvlink.record.results import Results
from pytest_nvlink.record.run import RunOptions
from pytest_nvlink.report.metrics import render_metrics, write_metrics
from pytest_nvlink.sources.snapshot.file import load_snapshot

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"


def _results(snapshot: str, outcome: str) -> Results:
    node = load_snapshot(SNAPSHOTS / f"{snapshot}.json")
    node.host = 'gpu"017'  # a quote in a label value must be escaped, not end the label
    run = build_run(RunOptions(suite="h100-8gpu"), lambda: node)
    report = SimpleNamespace(
        nodeid="nvlink/test_bandwidth.py::test_p2p_unidirectional[gpu2-gpu6]",
        when="call",
        outcome="failed" if outcome == "fail" else "passed",
        keywords={"nvlink": 1},
        user_properties=[("outcome", outcome), ("message", "m"), ("measured", "37.2"), ("expected", ">= 335.0")],
    )
    return Results(run, [item_result(report)], "partial audit: 1 of 1 checks had evidence", AuditCounts(1, 1))


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_degraded_demo_exposes_its_verdict_failures_and_figures() -> None:
    samples = _samples(render_metrics(_results("h100-8gpu-degraded", "fail"), now=1_700_000_000.0))
    host = ("host", 'gpu"017')
    assert samples[("pytest_nvlink_verdict", (host, ("suite", "h100-8gpu"), ("verdict", "FAIL")))] == 1
    assert samples[("pytest_nvlink_verdict", (host, ("suite", "h100-8gpu"), ("verdict", "PASS")))] == 0
    failed = (
        ("check", "test_p2p_unidirectional"),
        host,
        ("item", "nvlink/test_bandwidth.py::test_p2p_unidirectional[gpu2-gpu6]"),
    )
    assert samples[("pytest_nvlink_check_failed", tuple(sorted(failed)))] == 1
    slow = tuple(sorted([("dst", "6"), host, ("kind", "unidirectional"), ("src", "2")]))
    assert round(samples[("pytest_nvlink_p2p_bandwidth_gbps", slow)], 1) == 37.2
    assert samples[("pytest_nvlink_nvlinks_active", (("gpu", "3"), host))] == 16
    assert samples[("pytest_nvlink_run_timestamp_seconds", (host,))] == 1_700_000_000.0


def test_a_figure_that_was_not_measured_is_left_out_not_zero() -> None:
    results = _results("h100-8gpu-healthy", "pass")
    node = results.run.node
    node.measurements.p2p[0].value = None
    node.gpus[1].nvlinks = None
    samples = _samples(render_metrics(results))
    first = node.measurements.p2p[0]
    assert not any(
        name == "pytest_nvlink_p2p_bandwidth_gbps"
        and ("src", str(first.src)) in labels
        and ("dst", str(first.dst)) in labels
        and ("kind", first.kind) in labels
        for name, labels in samples
    )
    assert not any(name == "pytest_nvlink_nvlinks_active" and ("gpu", "1") in labels for name, labels in samples)
    assert samples[("pytest_nvlink_verdict", (("host", 'gpu"017'), ("suite", "h100-8gpu"), ("verdict", "PASS")))] == 1


def test_the_file_is_written_whole_in_place(tmp_path: Path) -> None:
    path = tmp_path / "textfile" / "nvlink.prom"
    write_metrics(_results("h100-8gpu-healthy", "pass"), path)
    assert _samples(path.read_text(encoding="utf-8"))
    assert [p.name for p in path.parent.iterdir()] == ["nvlink.prom"]


def test_the_option_writes_the_file_beside_the_other_outputs(pytester: pytest.Pytester) -> None:
    """``--nvlink-metrics`` on the degraded demo: one file node_exporter can read, whose verdict is FAIL."""
    result = pytester.runpytest_subprocess(
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-degraded",
        "--nvlink-metrics=textfile/nvlink-{host}.prom",
        "--nvlink-json=results.json",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    written = list((pytester.path / "textfile").glob("nvlink-*.prom"))
    assert [path.name for path in written] == ["nvlink-hgx-h100-02.prom"]
    result.stdout.fnmatch_lines(["pytest-nvlink: Prometheus metrics written to *nvlink-hgx-h100-02.prom"])
    samples = _samples(written[0].read_text(encoding="utf-8"))
    verdict = ("pytest_nvlink_verdict", (("host", "hgx-h100-02"), ("suite", "h100-8gpu"), ("verdict", "FAIL")))
    assert samples[verdict] == 1
    failing = [labels for name, labels in samples if name == "pytest_nvlink_check_failed"]
    assert len(failing) == result.parseoutcomes()["failed"]


def test_the_same_path_as_another_output_is_refused_before_the_run(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-healthy",
        "--nvlink-metrics=out.json",
        "--nvlink-json=out.json",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert not (pytester.path / "out.json").exists()
