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


def test_unknowns_are_properties_and_summary_lines_and_fabric_health_unknown_is_recorded(
    pytester: pytest.Pytester,
) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    assert node.nvlink_bw_mode is None  # the shipped node's R550 driver predates nvmlSystemGetNvlinkBwMode
    fabric = node.gpus[0].fabric
    assert fabric is not None
    fabric.degraded_bandwidth = None
    node.unknown_reasons["gpu0.fabric.health"] = "the fabric info has no healthMask"
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
    # A driver that reports no fabric health does not fail the GPU: registration is judged, health recorded.
    result.assert_outcomes(passed=8 + 8 + 5)
    cases = {case.get("name", ""): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    speed = cases["test_nvlink_speed[gpu2]"]
    assert _properties(speed)["nvlink_bw_mode"] == "unknown"
    assert _properties(speed)["nvlink_bw_mode_reason"] == "NVML: Function Not Found"
    fabric_props = _properties(cases["test_fabric[gpu0]"])
    assert fabric_props["fabric_health"] == "unknown"
    assert fabric_props["fabric_health_reason"] == "the fabric info has no healthMask"
    assert "fabric_health" not in _properties(cases["test_fabric[gpu1]"])
    assert _properties(cases["test_collective_busbw[all_reduce]"])["validated"] == "no"
    assert "validated" not in _properties(cases["test_collective_busbw[all_gather]"])
    result.stdout.fnmatch_lines(
        [
            "recorded unknowns (not proven by this run):",
            "  - NVLink bandwidth mode unknown (NVML: Function Not Found): a reduced system mode could not be excluded",
            "  - fabric health unknown on GPU(s) 0 (the fabric info has no healthMask); registration alone was judged",
            "  - collectives not validated (nccl-tests -c 0 or #wrong N/A): all_reduce",
        ]
    )


def test_probe_records_why_fabric_health_is_unknown(install_fake_nvml: Callable[..., Any]) -> None:
    from pytest_nvlink.sources.live.probe import probe_node

    module = install_fake_nvml("h100-8gpu-healthy", absent_functions=["nvmlDeviceGetGpuFabricInfoV"])
    node = probe_node(module)
    fabric = node.gpus[0].fabric
    assert fabric is not None and fabric.state == "completed" and fabric.degraded_bandwidth is None
    assert fabric.health_problems is None
    assert "without healthMask: a driver before R550" in node.unknown_reasons["gpu0.fabric.health"]


def test_r535_driver_without_the_v_call_passes_registration_and_records_health_unknown(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]
) -> None:
    """R535 has nvmlDeviceGetGpuFabricInfo only: every NVSwitch GPU used to fail "health unknown"."""
    install_fake_nvml("h100-8gpu-healthy", missing_functions=["nvmlDeviceGetGpuFabricInfoV"])
    xml_path = pytester.path / "out.xml"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "-k", "test_fabric", "-p", "no:cacheprovider", f"--junitxml={xml_path}"
    )
    result.assert_outcomes(passed=8, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        ["  - fabric health unknown on GPU(s) 0, 1, 2, 3, 4, 5, 6, 7 (the driver reports no fabric health*"]
    )
    cases = {case.get("name", ""): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    assert _properties(cases["test_fabric[gpu5]"])["fabric_health"] == "unknown"


def test_live_route_unhealthy_fails_the_gpu_by_name(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]
) -> None:
    """Only DEGRADED_BW used to be decoded: ROUTE_UNHEALTHY in the mask and an Unhealthy summary passed."""
    module = install_fake_nvml("h100-8gpu-healthy")
    served = module.fake_state.node
    served.gpus[3].fabric.health_problems = ["route_unhealthy", "summary:unhealthy"]
    served.gpus[6].fabric.health_problems = ["incorrect_configuration:insufficient_nvlinks"]
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "-k", "test_fabric", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6, failed=2, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        [
            "*GPU 3: fabric health reports route_unhealthy, summary:unhealthy although registration completed*",
            "*GPU 6: fabric health reports incorrect_configuration:insufficient_nvlinks although registration*",
        ],
        consecutive=False,
    )
