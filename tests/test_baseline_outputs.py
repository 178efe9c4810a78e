"""The baseline comparison in the results record, the results JSON and the HTML report (not only the terminal)."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from test_baseline import HEALTHY, Document, _copy, _p2p, _run, _slower_link_down_new_driver, _swap_gpu3

from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.audit import AuditCounts
from pytest_nvlink.record.items import item_result
from pytest_nvlink.record.results import Results
from pytest_nvlink.record.run import RunOptions
from pytest_nvlink.report.html import render_html
from pytest_nvlink.report.json_results import load_schema, results_document
from pytest_nvlink.sources.snapshot.file import load_snapshot

P2P_2_6 = "nvlink/test_baseline.py::test_baseline_p2p[gpu2-gpu6]"
FACTS_3 = "nvlink/test_baseline.py::test_baseline_facts[gpu3]"


def _outputs(pytester: pytest.Pytester, after: Path) -> tuple[dict[str, Any], str, str]:
    """(results JSON, text of the HTML page, the page's baseline section as text) of a run against HEALTHY."""
    json_path, html_path = pytester.path / "results.json", pytester.path / "report.html"
    _run(pytester, after, f"--nvlink-baseline={HEALTHY}", f"--nvlink-json={json_path}", f"--nvlink-report={html_path}")
    document: dict[str, Any] = json.loads(json_path.read_text(encoding="utf-8"))
    jsonschema.validate(document, load_schema())
    page = html_path.read_text(encoding="utf-8")
    found = re.search(r'<section id="baseline">(.*?)</section>', page, re.S)
    assert found is not None, "no baseline section in the report"
    return document, page, _text(found.group(1))


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def _failures_section(page: str) -> str:
    found = re.search(r'<section id="failures">(.*?)</section>', page, re.S)
    assert found is not None
    return _text(found.group(1))


def test_a_slower_pair_a_link_down_and_a_new_driver_in_json_and_html(pytester: pytest.Pytester, tmp_path: Path) -> None:
    after = _copy(tmp_path, "after", _slower_link_down_new_driver)
    document, page, section = _outputs(pytester, after)
    baseline = document["baseline"]
    assert baseline["file"] == str(HEALTHY)
    assert (baseline["host"], baseline["driver_version"]) == ("hgx-h100-01", "550.54.15")
    assert baseline["label"] == "hgx-h100-01 2026-11-20T10:02Z, driver 550.54.15"
    assert baseline["environment_changes"] == [
        {"what": "driver", "baseline": "550.54.15", "now": "560.35.03", "text": "driver 550.54.15 → 560.35.03"}
    ]
    assert baseline["failed"] == [P2P_2_6, FACTS_3]
    assert (baseline["unmatched_gpus"], baseline["improvements"], baseline["problem"]) == ([], [], None)
    assert baseline["schema_migrated"] is False
    # The delta itself is the failing item's message, as JUnit has it.
    messages = {item["nodeid"]: item["message"] for item in document["items"]}
    assert "10.0 % below baseline 370.0 GB/s" in messages[P2P_2_6]

    assert section.startswith(
        f"Compared with baseline baseline {HEALTHY} (hgx-h100-01 2026-11-20T10:02Z, driver 550.54.15) "
        "Changed since the baseline what baseline now driver 550.54.15 560.35.03 "
    )
    assert "2 failed (their deltas are under Failures, area baseline); 0 improvement(s)." in section
    assert "swapped" not in section
    failures = _failures_section(page)
    assert "GPU 2 -> GPU 6: unidirectional 333.0 GB/s, 10.0 % below baseline 370.0 GB/s" in failures
    assert "active NVLinks 18 in the baseline, 17 now" in failures


def _swap_gpu3_and_faster_latency(document: Document) -> None:
    _swap_gpu3(document)
    _p2p(document, 0, 1, "latency")["value"] = 1.0


def test_a_swapped_gpu_and_an_improvement_in_json_and_html(pytester: pytest.Pytester, tmp_path: Path) -> None:
    after = _copy(tmp_path, "after", _swap_gpu3_and_faster_latency)
    document, _, section = _outputs(pytester, after)
    baseline = document["baseline"]
    swapped = "GPU 3 was serial "
    [unmatched] = baseline["unmatched_gpus"]
    assert unmatched["gpu"] == 3 and unmatched["reason"].startswith(swapped)
    assert "now serial 1654000000003: no baseline for it" in unmatched["reason"]
    [improvement] = baseline["improvements"]
    assert improvement["nodeid"] == "nvlink/test_baseline.py::test_baseline_p2p[gpu0-gpu1]"
    assert improvement["text"].startswith("improved: GPU 0 -> GPU 1: latency 1.0 us, ")
    assert baseline["environment_changes"] == []
    assert len(baseline["failed"]) == 1 + 14 + 1  # GPU 3's facts, its 14 ordered pairs and its host link

    assert "Changed since the baseline Nothing recorded." in section
    assert f"GPUs without a baseline (swapped or replaced) {unmatched['reason']}" in section
    failed = "16 failed (their deltas are under Failures, area baseline)"
    assert f"{failed}; 1 improvement(s). {improvement['text']}" in section


def test_without_a_baseline_the_record_has_none_and_the_page_no_section() -> None:
    node = load_snapshot(HEALTHY)
    results = Results(
        build_run(RunOptions(suite="h100-8gpu"), lambda: node), [], "partial audit: 0 of 0", AuditCounts(0, 0)
    )
    assert results.baseline is None
    assert results_document(results)["baseline"] is None
    assert 'id="baseline"' not in render_html(results)


def test_every_improvement_of_one_item_is_kept() -> None:
    report = SimpleNamespace(
        nodeid="nvlink/test_baseline.py::test_baseline_p2p[gpu0-gpu1]",
        when="call",
        outcome="passed",
        keywords={"nvlink": 1},
        user_properties=[("outcome", "pass"), *[("baseline_improved", f"improved: {x}") for x in "ab"]],
    )
    assert item_result(report).improvements == ["improved: a", "improved: b"]
