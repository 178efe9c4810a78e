"""--nvlink-json and --nvlink-report: one record from the verdicts, its schema, and what the page shows."""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from conftest import EVIDENCE, SNAPSHOTS
from report_outputs import DEMOS, Outputs, write_outputs

from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.audit import AuditCounts
from pytest_nvlink.record.items import ItemLog, item_result
from pytest_nvlink.record.results import FAIL, INCOMPLETE, PASS, Results, run_verdict
from pytest_nvlink.record.run import RunOptions
from pytest_nvlink.report.html import render_html
from pytest_nvlink.report.json_results import load_schema
from pytest_nvlink.report.pictures import p2p_scale
from pytest_nvlink.sources.snapshot.file import load_snapshot


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outputs]:
    folder = tmp_path_factory.mktemp("reports")
    return {snapshot: write_outputs(snapshot, folder) for snapshot in DEMOS}


def _junit_failures(path: Path) -> dict[str, str]:
    """JUnit's failure message per node id: what the record must carry, taken from another reporter."""
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is not None:
            module = case.get("classname", "").replace(".", "/") + ".py"
            message = failure.get("message", "")
            if message.endswith("[truncated; full report in element text]"):
                # pytest's JUnit cuts long messages; the element's text holds the whole report.
                message = (failure.text or "").strip()
            found[f"{module}::{case.get('name')}"] = message.removeprefix("Failed: ")
    return found


@pytest.mark.parametrize("snapshot", list(DEMOS))
def test_results_json_follows_its_schema_and_carries_every_verdict(outputs: dict[str, Outputs], snapshot: str) -> None:
    document = json.loads(outputs[snapshot].json.read_text(encoding="utf-8"))
    jsonschema.validate(document, load_schema())
    verdict, failed = DEMOS[snapshot]
    assert document["verdict"] == verdict
    assert document["counts"].get("failed", 0) == failed
    assert len(document["items"]) == 388
    assert document["audit"] == "partial audit: 388 of 388 checks had evidence"
    assert document["audit_counts"] == {"judged": 388, "applicable": 388}
    junit = _junit_failures(outputs[snapshot].junit)
    recorded = {item["nodeid"]: item["message"] for item in document["items"] if item["pytest_outcome"] == "failed"}
    assert len(junit) == failed
    assert recorded == junit


def test_a_failure_in_the_json_names_figures_key_and_file(outputs: dict[str, Outputs]) -> None:
    document = json.loads(outputs["h100-8gpu-degraded"].json.read_text(encoding="utf-8"))
    item = next(i for i in document["items"] if i["nodeid"].endswith("test_p2p_unidirectional[gpu2-gpu6]"))
    assert item["outcome"] == "fail" and item["area"] == "bandwidth" and item["check"] == "test_p2p_unidirectional"
    props = item["properties"]
    assert (props["measured"], props["expected"], props["unit"]) == ("37.2", ">= 335.0", "GB/s")
    assert props["threshold_key"] == "p2p.unidirectional_min_gbps"
    assert props["threshold_file"].endswith("h100-sxm.toml")
    assert document["node"]["host"] == "hgx-h100-02"


def test_the_schema_rejects_a_failure_without_figures(outputs: dict[str, Outputs]) -> None:
    document = json.loads(outputs["h100-8gpu-degraded"].json.read_text(encoding="utf-8"))
    failing = next(i for i in document["items"] if i["outcome"] == "fail")
    del failing["properties"]["measured"]
    with pytest.raises(jsonschema.ValidationError, match="'measured' is a required property"):
        jsonschema.validate(document, load_schema())


@pytest.mark.parametrize("snapshot", list(DEMOS))
def test_html_report_is_self_contained_and_shows_the_verdict(outputs: dict[str, Outputs], snapshot: str) -> None:
    page = outputs[snapshot].html.read_text(encoding="utf-8")
    verdict, failed = DEMOS[snapshot]
    assert f'<header class="banner {verdict}" id="verdict">' in page
    assert f"<h1>{verdict}: h100-8gpu on " in page
    assert f"<h2>Failures ({failed})</h2>" in page
    assert not re.search(r"https?://", page), "the report must make no network request"
    assert "<script" not in page and not re.search(r"\son[a-z]+=", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert page.count("<svg") == 4  # unidirectional, bidirectional and latency heatmaps, and the host-link bars


def test_degraded_report_shows_failures_first_and_marks_the_slow_pair(outputs: dict[str, Outputs]) -> None:
    page = outputs["h100-8gpu-degraded"].html.read_text(encoding="utf-8")
    assert page.index('id="failures"') < page.index('id="topology"') < page.index('id="p2p-unidirectional"')
    assert "GPU 2 -&gt; GPU 6: unidirectional bandwidth 37.2 GB/s, below 335.0 GB/s" in page
    assert ">37.2!</text>" in page and ">36.8!</text>" in page  # below the SKU floor, on the heatmap
    assert "worst pair: GPU 6 -&gt; GPU 2 at 36.8 GB/s" in page
    assert 'class="mismatch">NV16≠NV18</td>' in page
    # Eight fabric failures: three shown, the rest named.
    assert "… and 5 more test_fabric failure(s): gpu3, gpu4, gpu5, gpu6, gpu7" in page


def test_the_colour_scale_is_fixed_by_the_sku_not_by_the_figures(outputs: dict[str, Outputs]) -> None:
    healthy = outputs["h100-8gpu-healthy"].html.read_text(encoding="utf-8")
    degraded = outputs["h100-8gpu-degraded"].html.read_text(encoding="utf-8")
    scale = "Colour scale 0 to 477 GB/s fixed by the SKU (active_links x link_speed_min_gbps)"
    assert scale in healthy and scale in degraded  # 18 links x 26.5 GB/s in h100-sxm.toml


def _results(host: str) -> Results:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-degraded.json")
    node.host = host
    run = build_run(RunOptions(suite="h100-8gpu"), lambda: node)
    report = SimpleNamespace(
        nodeid="nvlink/test_inventory.py::test_driver",
        when="call",
        outcome="failed",
        keywords={"nvlink": 1},
        user_properties=[("outcome", "fail"), ("message", "driver <b>x</b>"), ("measured", "1"), ("expected", "2")],
    )
    return Results(run, [item_result(report)], "partial audit: 1 of 1 checks had evidence", AuditCounts(1, 1))


def test_html_escapes_every_value() -> None:
    page = render_html(_results('<script>alert("x")</script>'))
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "driver &lt;b&gt;x&lt;/b&gt;" in page


def _item(outcome: str, pytest_outcome: str) -> SimpleNamespace:
    return SimpleNamespace(
        nodeid=f"nvlink/test_x.py::test_{outcome}",
        when="call",
        outcome=pytest_outcome,
        keywords={"nvlink": 1},
        user_properties=[("outcome", outcome), ("message", outcome)],
    )


@pytest.mark.parametrize(
    ("items", "verdict"),
    [
        ([("pass", "passed"), ("not_applicable", "skipped")], PASS),
        ([("pass", "passed"), ("fail", "failed")], FAIL),
        ([("pass", "passed"), ("no_evidence", "failed")], INCOMPLETE),
        ([("pass", "passed"), ("no_evidence", "skipped")], INCOMPLETE),
        ([("not_applicable", "skipped")], INCOMPLETE),
        ([("pass", "passed"), ("no_evidence", "skipped"), ("fail", "failed")], FAIL),
    ],
)
def test_run_verdict(items: list[tuple[str, str]], verdict: str) -> None:
    log = ItemLog()
    for outcome, pytest_outcome in items:
        log.add(_item(outcome, pytest_outcome))
    assert run_verdict(log.results()) == verdict


def test_an_item_without_a_verdict_fails_the_run_with_pytests_reason() -> None:
    report = SimpleNamespace(
        nodeid="nvlink/test_x.py::test_crashed",
        when="setup",
        outcome="failed",
        passed=False,
        keywords={"nvlink": 1},
        user_properties=[],
        longrepr=SimpleNamespace(reprcrash=SimpleNamespace(message="RuntimeError: fixture broke")),
    )
    item = item_result(report)
    assert (item.outcome, item.pytest_outcome, item.message) == ("unjudged", "error", "RuntimeError: fixture broke")
    assert run_verdict([item]) == FAIL


@pytest.mark.parametrize("option", ["--nvlink-json", "--nvlink-report"])
def test_an_output_that_cannot_be_written_stops_the_run_first(pytester: pytest.Pytester, option: str) -> None:
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", f"{option}={pytester.path}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option}: {pytester.path} is a folder; give a file name such as*"])


@pytest.mark.parametrize(
    ("kind", "high", "limit"),
    [("unidirectional", 477.0, 335.0), ("bidirectional", 954.0, 666.0), ("latency", 20.0, 10.0)],
)
def test_heatmap_scales_come_from_the_threshold_file(kind: str, high: float, limit: float) -> None:
    scale = p2p_scale(_results("host").run, kind)
    assert scale is not None
    assert (scale.low, round(scale.high, 6), scale.limit) == (0.0, high, limit)
    assert scale.higher_is_better is (kind != "latency")


def test_under_xdist_the_record_holds_the_same_verdicts(outputs: dict[str, Outputs], tmp_path: Path) -> None:
    snapshot = "h100-8gpu-degraded"
    parallel = write_outputs(snapshot, tmp_path, "-n", "2")
    serial_items = json.loads(outputs[snapshot].json.read_text(encoding="utf-8"))["items"]
    parallel_document = json.loads(parallel.json.read_text(encoding="utf-8"))
    assert sorted(parallel_document["items"], key=lambda i: i["nodeid"]) == sorted(
        serial_items, key=lambda i: i["nodeid"]
    )
    assert parallel_document["verdict"] == "FAIL" and parallel_document["counts"] == {"passed": 358, "failed": 30}
    assert "<h2>Failures (30)</h2>" in parallel.html.read_text(encoding="utf-8")


def test_a_collective_sweep_is_drawn_against_message_size() -> None:
    results = _results("host")
    measurements = results.run.node.measurements.collectives
    judged = next(m for m in measurements if m.op == "all_reduce")
    measurements.append(dataclasses.replace(judged, size_bytes=judged.size_bytes // 4, busbw_gbps=120.0))
    page = render_html(results)
    assert "<h3>all_reduce: busbw against message size</h3>" in page
    assert page.count("<polyline") == 1 and ">1024</text>" in page and ">4096</text>" in page


def test_an_evidence_run_without_full_coverage_reads_incomplete(pytester: pytest.Pytester) -> None:
    report = pytester.path / "audit.html"
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu",
        "--nvlink-evidence-missing=skip",
        f"--nvlink-evidence={EVIDENCE / 'topo/a100-sxm4-80gb-8gpu-distserve3.txt'}",
        f"--nvlink-report={report}",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 0
    page = report.read_text(encoding="utf-8")
    assert '<header class="banner INCOMPLETE" id="verdict">' in page
    assert "partial audit: 29 of 380 checks had evidence (351 without evidence, 8 not applicable)" in page
    row = "<td>nvlinks</td><td>test_nvlink_active_links, test_nvlink_version, test_nvlink_speed</td><td>(none)</td>"
    assert row in page


def test_inherited_nccl_settings_are_on_the_banner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    page = render_html(_results("host"))
    assert "<dt>NCCL settings</dt><dd>inherited: NCCL_P2P_DISABLE=1</dd>" in page
