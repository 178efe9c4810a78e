"""Every failing JUnit test case says measured vs expected and which threshold or suite key set it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EVIDENCE, SNAPSHOTS

from pytest_nvlink.verdict import missing_report_properties

SHIPPED = sorted(path.stem for path in SNAPSHOTS.glob("*.json"))


def _failing_cases(xml_path: Path) -> dict[str, dict[str, str]]:
    cases = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            props = [(p.get("name", ""), p.get("value", "")) for p in case.iter("property")]
            cases[case.get("name", "")] = dict(props)
            assert missing_report_properties(props) == [], (case.get("name"), props)
    return cases


@pytest.mark.parametrize("snapshot", SHIPPED)
def test_every_failure_of_a_shipped_snapshot_names_its_figures_and_key(
    pytester: pytest.Pytester, snapshot: str
) -> None:
    xml_path = pytester.path / "junit.xml"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-replay={snapshot}", f"--junitxml={xml_path}", "-p", "no:cacheprovider"
    )
    cases = _failing_cases(xml_path)
    assert len(cases) == result.parseoutcomes().get("failed", 0)
    assert "pytest-nvlink defect" not in result.stdout.str()


def test_the_formerly_bare_failures_now_carry_keys(pytester: pytest.Pytester) -> None:
    xml_path = pytester.path / "vm.xml"
    pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-vm-pcie", f"--junitxml={xml_path}")
    cases = _failing_cases(xml_path)
    assert len(cases) == 354
    transport = cases["test_nccl_transport"]
    assert transport["measured"] == "32 of 32 on SHM/NET"
    assert (transport["suite_key"], Path(transport["suite_file"]).name) == ("topology.default", "h100-8gpu.toml")
    version = cases["test_nvlink_version[gpu0]"]
    assert (version["measured"], version["expected"], version["threshold_key"]) == ("0", "18", "nvlink.active_links")
    status = cases["test_p2p_status[gpu0-gpu1]"]
    assert status["suite_key"] == "topology.default"


def test_evidence_failures_name_their_key(pytester: pytest.Pytester) -> None:
    xml_path = pytester.path / "evidence.xml"
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu",
        f"--nvlink-evidence={EVIDENCE / 'topo' / 'a100-sxm4-80gb-8gpu-distserve3.txt'}",
        f"--junitxml={xml_path}",
    )
    cases = _failing_cases(xml_path)
    assert len(cases) == result.parseoutcomes()["failed"] > 0
    assert cases["test_nccl_transport"]["measured"] == "unknown"


def test_missing_report_properties_names_the_gaps() -> None:
    assert missing_report_properties([]) == [
        "measured",
        "expected",
        "unit",
        "threshold_key/threshold_file or suite_key/suite_file",
    ]
    complete = [("measured", "1"), ("expected", "2"), ("unit", "x"), ("suite_key", "k"), ("suite_file", "f")]
    assert missing_report_properties(complete) == []
    assert missing_report_properties(complete[:-1]) == ["threshold_key/threshold_file or suite_key/suite_file"]


def test_a_failure_without_properties_is_flagged_as_a_plugin_defect(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_own="""
        from pytest_nvlink.verdict import failed

        def test_bare(nvlink_judge):
            nvlink_judge(failed("bare failure", [("measured", "1")]))
        """
    )
    result = pytester.runpytest("test_own.py", "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*bare failure [[]pytest-nvlink defect: no JUnit expected, unit, threshold_key/threshold_file or *report it]"]
    )


def test_a_lost_gpu_fails_with_the_suite_key(pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]) -> None:
    install_fake_nvml("h100-8gpu-healthy", lost_gpus=[7])
    xml_path = pytester.path / "lost.xml"
    pytester.runpytest("--nvlink-suite=h100-8gpu", "-k", "gpu_count or gpu7", f"--junitxml={xml_path}")
    cases = _failing_cases(xml_path)
    assert "test_gpu_count" in cases and "test_path[gpu0-gpu7]" in cases
    assert cases["test_nvlink_speed[gpu7]"]["suite_key"] == "suite.gpu_count"
    assert cases["test_gpu_count"]["measured"] == "7"
