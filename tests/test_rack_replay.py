"""Replaying GB200 NVL72 rack snapshots through the whole plugin: each fault fails with its sentence.

Only the rack-level checks are selected (``-k``): they are the subject here, and per-pair item ids of a
72-GPU suite are not (they follow the suite's item granularity). Results are read from the JSON record
and the JUnit XML the run writes.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.report.json_results import load_schema

RACK_DATA = Path(__file__).resolve().parent / "data" / "rack"
SELECTED = "rack or nccl_transport or gpu_count or nvlink_active_links or fabric"


@dataclass(frozen=True)
class RackRun:
    ret: int | pytest.ExitCode
    items: list[dict[str, Any]]
    junit: dict[str, ET.Element]
    document: dict[str, Any]

    def failed(self, check: str) -> list[dict[str, Any]]:
        return [item for item in self.items if item["check"] == check and item["outcome"] == "fail"]

    def messages(self, check: str) -> str:
        return "\n".join(item["message"] for item in self.failed(check))

    def failed_checks(self) -> set[str]:
        return {item["check"] for item in self.items if item["outcome"] == "fail"}


def _replay(pytester: pytest.Pytester, snapshot: Path) -> RackRun:
    out, xml = pytester.path / "results.json", pytester.path / "junit.xml"
    result = pytester.runpytest(
        "--nvlink-suite=gb200-nvl72",
        f"--nvlink-replay={snapshot}",
        f"--nvlink-json={out}",
        f"--junitxml={xml}",
        "-k",
        SELECTED,
        "-p",
        "no:cacheprovider",
    )
    document = json.loads(out.read_text())
    jsonschema.validate(document, load_schema())
    cases = {f"{c.get('classname')}::{c.get('name')}": c for c in ET.parse(xml).getroot().iter("testcase")}
    return RackRun(result.ret, document["items"], cases, document)


def _junit_failures(run: RackRun, name: str) -> list[str]:
    return [
        failure.get("message", "")
        for key, case in run.junit.items()
        if key.split("::")[-1].startswith(name)
        for failure in case.findall("failure")
    ]


def test_healthy_rack_passes_every_rack_check(pytester: pytest.Pytester) -> None:
    run = _replay(pytester, SNAPSHOTS / "gb200-nvl72-healthy.json")
    assert run.ret == 0
    assert run.failed_checks() == set()
    checks = {item["check"] for item in run.items}
    assert {"test_rack_trays", "test_rack_tray", "test_rack_clique", "test_rack_sendrecv"} <= checks
    assert sum(item["check"] == "test_rack_clique" for item in run.items) == 18
    assert {item["area"] for item in run.items if item["check"].startswith("test_rack")} == {"rack"}
    # Only the rack checks were selected (-k): the run proves them, not the suite, so it is PARTIAL, not PASS.
    assert run.document["verdict"] == "PARTIAL" and run.document["left_out"]["not_run"] == {}


def test_faulty_rack_fails_the_wrong_clique_and_the_links_down(pytester: pytest.Pytester) -> None:
    run = _replay(pytester, SNAPSHOTS / "gb200-nvl72-faulty.json")
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    assert run.failed_checks() == {
        "test_rack_clique",
        "test_nvlink_active_links",
        "test_rack_sendrecv",
        "test_nccl_transport",
    }
    (clique,) = run.failed("test_rack_clique")
    assert "tray 5 (host gb200-r07-c06) is in clique 32765 of cluster" in clique["message"]
    assert "the rack's majority (17 of 18 trays) is in clique 32766" in clique["message"]
    assert len(run.failed("test_nvlink_active_links")) == 4
    assert "16 of 18 NVLinks active" in run.messages("test_nvlink_active_links")
    assert "inactive link(s): 16, 17" in run.messages("test_nvlink_active_links")
    assert "rack traffic left NVLink" in run.messages("test_nccl_transport")
    assert any("is in clique 32765" in message for message in _junit_failures(run, "test_rack_clique"))


def test_missing_tray_fails_as_missing(pytester: pytest.Pytester) -> None:
    run = _replay(pytester, RACK_DATA / "gb200-nvl72-missing-tray.json")
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    assert "tray 17 (GPUs 68-71) missing: the rack has 17 of 18 trays" in run.messages("test_rack_trays")
    assert "tray 17 missing" in run.messages("test_rack_tray")
    assert "found 68: tray 17 missing" in run.messages("test_gpu_count")
    assert len(run.failed("test_rack_tray")) == 1  # the other 17 trays are whole
    assert any("tray 17 (GPUs 68-71) missing" in m for m in _junit_failures(run, "test_rack_trays"))


def test_net_between_trays_fails_as_rack_traffic_leaving_nvlink(pytester: pytest.Pytester) -> None:
    run = _replay(pytester, RACK_DATA / "gb200-nvl72-net-between-trays.json")
    assert run.failed_checks() == {"test_nccl_transport"}
    message = run.messages("test_nccl_transport")
    assert message.startswith("rack traffic left NVLink: NCCL used NET between trays on 4 of 36 channel(s)")
    assert "rank 31 [GPU 31 (gb200-r07-c08, GPU 3 there)] -> rank 32 [GPU 32 (gb200-r07-c09, GPU 0 there)]" in message
    assert "via NET/IB/0/GDRDMA" in message
    (item,) = run.failed("test_nccl_transport")
    assert dict(item["properties"])["suite_key"] == "suite.gpus_per_host"


def test_slow_cross_tray_pair_fails_on_both_trays(pytester: pytest.Pytester) -> None:
    run = _replay(pytester, RACK_DATA / "gb200-nvl72-slow-pair.json")
    assert run.failed_checks() == {"test_rack_sendrecv"}
    failed = run.failed("test_rack_sendrecv")
    assert sorted(dict(item["properties"])["tray"] for item in failed) == ["14", "2"]
    for item in failed:
        assert "GPU 9 (gb200-r07-c03, GPU 1 there) <-> GPU 56 (gb200-r07-c15, GPU 0 there)" in item["message"]
        assert "send/recv 212.6 GB/s per direction, below 600.0 GB/s" in item["message"]
        assert "(gb200-nvl72.toml:p2p.sendrecv_min_gbps)" in item["message"]
        props = dict(item["properties"])
        assert (props["measured"], props["threshold_key"]) == ("212.6", "p2p.sendrecv_min_gbps")
    assert len(_junit_failures(run, "test_rack_sendrecv")) == 2
