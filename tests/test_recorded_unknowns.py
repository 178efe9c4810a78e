"""Unknowns that used to pass silently: bandwidth mode, fabric health, unvalidated collectives."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.sources.snapshot.file import load_snapshot


def _properties(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def test_unknowns_are_properties_and_summary_lines_and_fabric_health_unknown_fails(pytester: pytest.Pytester) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    assert node.nvlink_bw_mode is None  # the shipped node's R550 driver predates nvmlSystemGetNvlinkBwMode
    fabric = node.gpus[0].fabric
    assert fabric is not None
    fabric.degraded_bandwidth = None
    node.unknown_reasons["gpu0.fabric.degraded_bandwidth"] = "the fabric info has no healthMask"
    for m in node.measurements.collectives:
        if m.op == "all_reduce":
            m.correct = None  # nccl-tests -c 0
    save_snapshot(node, pytester.path / "unknowns.json")
    xml_path = pytester.path / "out.xml"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-replay={pytester.path / 'unknowns.json'}",
        "-k",
        "nvlink_speed or test_fabric or collective_busbw",
        f"--junitxml={xml_path}",
    )
    result.assert_outcomes(passed=8 + 7 + 5, failed=1)
    cases = {case.get("name", ""): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    speed = cases["test_nvlink_speed[gpu2]"]
    assert _properties(speed)["nvlink_bw_mode"] == "unknown"
    assert _properties(speed)["nvlink_bw_mode_reason"] == "NVML: Function Not Found"
    failure = cases["test_fabric[gpu0]"].find("failure")
    assert failure is not None
    assert (
        "could not determine the NVSwitch fabric health of GPU 0 (registration completed): healthMask DEGRADED_BW "
        "unknown: the fabric info has no healthMask; an NVSwitch system needs the answer "
        "(h100-sxm.toml:fabric.required)" in (failure.text or "")
    )
    assert _properties(cases["test_collective_busbw[all_reduce]"])["validated"] == "no"
    assert "validated" not in _properties(cases["test_collective_busbw[all_gather]"])
    result.stdout.fnmatch_lines(
        [
            "recorded unknowns (not proven by this run):",
            "  - NVLink bandwidth mode unknown (NVML: Function Not Found): a reduced system mode could not be excluded",
            "  - fabric health (degraded bandwidth) unknown on GPU(s) 0",
            "  - collectives not validated (nccl-tests -c 0 or #wrong N/A): all_reduce",
        ]
    )


def test_probe_records_why_fabric_health_is_unknown(install_fake_nvml: Callable[..., Any]) -> None:
    from pytest_nvlink.sources.live.probe import probe_node

    module = install_fake_nvml("h100-8gpu-healthy", absent_functions=["nvmlDeviceGetGpuFabricInfoV"])
    node = probe_node(module)
    fabric = node.gpus[0].fabric
    assert fabric is not None and fabric.state == "completed" and fabric.degraded_bandwidth is None
    assert "no healthMask" in node.unknown_reasons["gpu0.fabric.degraded_bandwidth"]
