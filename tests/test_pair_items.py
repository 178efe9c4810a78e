"""Item granularity follows the domain: per pair up to 16 GPUs, per source GPU above ([suite] pair_items)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from synthetic_node import SyntheticFiles, degrade_pair, synthetic_node, write_synthetic

from pytest_nvlink.report.json_results import load_schema

PAIR_CHECKS_ONLY = "test_path or test_p2p_status or test_p2p_unidirectional"


def _run(pytester: pytest.Pytester, files: SyntheticFiles, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        f"--nvlink-suite={files.suite}", f"--nvlink-replay={files.snapshot}", "-p", "no:cacheprovider", *args
    )


def _collected(result: pytest.RunResult) -> list[str]:
    return [line.strip() for line in result.outlines if "::" in line]


def test_eight_gpus_keep_one_item_per_pair(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = _run(pytester, write_synthetic(tmp_path, 8), "--co", "-q", "-k", PAIR_CHECKS_ONLY)
    ids = _collected(result)
    assert "nvlink/test_topology.py::test_path[gpu0-gpu1]" in ids
    assert "nvlink/test_bandwidth.py::test_p2p_unidirectional[gpu7-gpu6]" in ids
    assert len(ids) == 28 + 56 + 56


def test_a_24_gpu_domain_gets_one_item_per_source_gpu(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = _run(pytester, write_synthetic(tmp_path, 24), "-q", "-k", PAIR_CHECKS_ONLY, "-rA")
    result.assert_outcomes(passed=23 + 24 + 24)
    text = result.stdout.str()
    assert "test_p2p_unidirectional[gpu17->*]" in text
    assert "test_path[gpu22-*]" in text and "test_path[gpu23-*]" not in text


def test_a_72_gpu_domain_collects_source_items(pytester: pytest.Pytester, tmp_path: Path) -> None:
    ids = _collected(_run(pytester, write_synthetic(tmp_path, 72), "--co", "-q", "-k", "test_p2p_latency"))
    assert ids == [f"nvlink/test_bandwidth.py::test_p2p_latency[gpu{i}->*]" for i in range(72)]


def test_pair_items_pair_forces_one_item_per_pair(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = _run(pytester, write_synthetic(tmp_path, 24, pair_items="pair"), "--co", "-q", "-k", "test_path")
    ids = _collected(result)
    assert len(ids) == 24 * 23 // 2 and "nvlink/test_topology.py::test_path[gpu0-gpu23]" in ids


def test_pair_items_source_groups_a_small_node(pytester: pytest.Pytester, tmp_path: Path) -> None:
    ids = _collected(_run(pytester, write_synthetic(tmp_path, 4, pair_items="source"), "--co", "-q", "-k", "test_path"))
    assert ids == [f"nvlink/test_topology.py::test_path[gpu{i}-*]" for i in range(3)]


def test_invalid_pair_items_is_a_usage_error_with_file_and_key(pytester: pytest.Pytester, tmp_path: Path) -> None:
    files = write_synthetic(tmp_path, 8, pair_items="per-gpu")
    result = _run(pytester, files)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{files.suite}:suite.pair_items: expected 'auto', 'pair', 'source', got 'per-gpu'*"])


@pytest.fixture
def degraded_24(tmp_path: Path) -> SyntheticFiles:
    node = synthetic_node(24)
    degrade_pair(node, 17, 3)
    degrade_pair(node, 17, 20, uni_gbps=120.0)
    return write_synthetic(tmp_path, 24, node=node)


def test_a_degraded_pair_fails_its_source_item_naming_the_peer(
    pytester: pytest.Pytester, tmp_path: Path, degraded_24: SyntheticFiles
) -> None:
    json_path, xml_path = tmp_path / "results.json", tmp_path / "junit.xml"
    result = _run(
        pytester,
        degraded_24,
        "-k",
        "test_p2p_unidirectional",
        f"--nvlink-json={json_path}",
        f"--junitxml={xml_path}",
    )
    result.assert_outcomes(passed=23, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_p2p_unidirectional[[]gpu17->*[]] _*",
            "GPU 17 -> 23 peer(s): 2 of 23 pair(s) fail (worst GPU 17 -> GPU 3, measured 37.2): GPU 17 -> GPU 3: "
            "unidirectional bandwidth 37.2 GB/s, below 335.0 GB/s*; GPU 17 -> GPU 20: unidirectional bandwidth 120.0*",
        ]
    )

    document = json.loads(json_path.read_text(encoding="utf-8"))
    jsonschema.validate(document, load_schema())
    items = {item["nodeid"]: item for item in document["items"]}
    item = items["nvlink/test_bandwidth.py::test_p2p_unidirectional[gpu17->*]"]
    assert item["outcome"] == "fail"
    matrix = {(pair["src"], pair["dst"]): pair for pair in item["pairs"]}
    assert len(matrix) == 23 and all(src == 17 for src, _ in matrix)
    assert (matrix[(17, 3)]["outcome"], matrix[(17, 3)]["measured"]) == ("fail", "37.2")
    assert matrix[(17, 5)]["outcome"] == "pass"
    passing = items["nvlink/test_bandwidth.py::test_p2p_unidirectional[gpu3->*]"]
    assert len(passing["pairs"]) == 23 and {p["outcome"] for p in passing["pairs"]} == {"pass"}

    cases = {case.get("name"): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_p2p_unidirectional[gpu17->*]"].iter("property")}
    assert props["failing_pairs"] == "gpu17-gpu3, gpu17-gpu20"
    assert (props["worst_pair"], props["measured"], props["unit"]) == ("gpu17-gpu3", "37.2", "GB/s")
    # The per-pair matrix lives in the results record, not in JUnit's properties.
    assert not any(name == "pairs" for name in props)


def test_the_html_report_names_the_failing_pairs(
    pytester: pytest.Pytester, tmp_path: Path, degraded_24: SyntheticFiles
) -> None:
    report = tmp_path / "report.html"
    _run(pytester, degraded_24, "-k", "test_p2p_unidirectional", f"--nvlink-report={report}")
    page = report.read_text(encoding="utf-8")
    assert "pairs not passing (2 of 23): GPU 17→3 fail 37.2 GB/s, GPU 17→20 fail 120 GB/s" in page
