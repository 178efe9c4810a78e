"""NVLink error counters per architecture: Hopper on the DL set, Blackwell on its NVLink 5 counters."""

from __future__ import annotations

import copy
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from conftest import SNAPSHOTS
from fake_nvml_api import C
from fake_pynvml import make_fake_pynvml

from pytest_nvlink.config.required_keys import check_required_keys, required_keys
from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import error_run_key, error_total_key, load_thresholds
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.measure.campaign import CampaignWatch
from pytest_nvlink.model import ERROR_COUNTER_NAMES, NVLINK5_ERROR_COUNTER_NAMES, Measurements, Node
from pytest_nvlink.sources.live.probe import probe_node
from pytest_nvlink.sources.snapshot.file import load_snapshot

NVLINK5_ZEROS = dict.fromkeys(NVLINK5_ERROR_COUNTER_NAMES, 0)


def blackwell_node() -> Node:
    """The healthy HGX H100 snapshot as an HGX B200: NVLink 5 links at 53.125 GB/s, NVLink 5 counters."""
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.measurements = Measurements()
    node.error_window_s = None
    for gpu in node.gpus:
        gpu.name = "NVIDIA B200"
        gpu.pcie_gen_loaded = None
        for link in gpu.nvlinks or []:
            link.version, link.speed_gbps = 5, 53.125
            link.errors, link.errors_run = dict(NVLINK5_ZEROS), None
    return node


def _probe(fake: Any, tmp_path: Path) -> Node:
    (tmp_path / "cpuinfo").write_text("flags\t: fpu\n")
    return probe_node(fake, cpuinfo_path=tmp_path / "cpuinfo", sysfs_pci=tmp_path)


def test_the_fake_answers_per_architecture() -> None:
    blackwell = make_fake_pynvml(blackwell_node())
    hopper = make_fake_pynvml(load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json"))
    symbol = C["NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS"]
    for fake, architecture, dl, nvlink5 in (
        (blackwell, C["NVML_DEVICE_ARCH_BLACKWELL"], C["NVML_ERROR_NOT_SUPPORTED"], C["NVML_SUCCESS"]),
        (hopper, C["NVML_DEVICE_ARCH_HOPPER"], None, C["NVML_ERROR_NOT_SUPPORTED"]),
    ):
        fake.nvmlInit()
        handle = fake.nvmlDeviceGetHandleByIndex(0)
        assert fake.nvmlDeviceGetArchitecture(handle) == architecture
        try:
            fake.nvmlDeviceGetNvLinkErrorCounter(handle, 0, fake.NVML_NVLINK_ERROR_DL_REPLAY)
            code = None
        except fake.NVMLError as exc:
            code = exc.value
        assert code == dl
        (answer,) = fake.nvmlDeviceGetFieldValues(handle, [(symbol, 0)])
        assert answer.nvmlReturn == nvlink5


def test_probe_reads_the_nvlink5_set_on_blackwell_and_the_dl_set_on_hopper(tmp_path: Path) -> None:
    served = blackwell_node()
    served.gpus[2].nvlinks[5].errors = {**NVLINK5_ZEROS, "symbol": 4}  # type: ignore[index]
    node = _probe(make_fake_pynvml(served), tmp_path)
    assert node.gpus[2].nvlinks[5].errors == {**NVLINK5_ZEROS, "symbol": 4}  # type: ignore[index]
    assert not [key for key in node.unknown_reasons if ".errors" in key]
    hopper = _probe(make_fake_pynvml(load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")), tmp_path)
    assert set(hopper.gpus[0].nvlinks[0].errors or {}) == set(ERROR_COUNTER_NAMES)  # type: ignore[index]


def test_a_driver_that_does_not_say_the_architecture_reads_the_set_that_answers(tmp_path: Path) -> None:
    fake = make_fake_pynvml(blackwell_node(), missing_functions={"nvmlDeviceGetArchitecture"})
    node = _probe(fake, tmp_path)
    # The DL counters are tried first and answer NotSupported on Blackwell; the NVLink 5 fields answer.
    assert node.gpus[0].nvlinks[0].errors == NVLINK5_ZEROS  # type: ignore[index]
    assert fake.fake_state.calls_to("nvmlDeviceGetNvLinkErrorCounter")


def test_the_campaign_records_the_nvlink5_increase() -> None:
    node = blackwell_node()
    fake = make_fake_pynvml(copy.deepcopy(node))
    fake.grow_errors_on_read(3, 7, "link_recovery_failed", 1)
    ticks = iter([0.0, 20.0, 20.0])
    with CampaignWatch(node, loads_gpus=True, nvml=fake, clock=lambda: next(ticks)):
        pass
    assert node.gpus[3].nvlinks[7].errors_run == {**NVLINK5_ZEROS, "link_recovery_failed": 1}  # type: ignore[index]
    assert node.gpus[0].nvlinks[0].errors_run == NVLINK5_ZEROS  # type: ignore[index]
    assert not [key for key in node.unknown_reasons if "errors_run" in key]


def test_an_nvlink5_set_requires_the_nvlink5_keys_not_the_dl_ones() -> None:
    suite = load_suite("b200-8gpu")
    keys = required_keys(suite, 5)
    for counter in NVLINK5_ERROR_COUNTER_NAMES:
        assert error_total_key(counter) in keys and error_run_key(counter) in keys
    assert not {error_total_key(c) for c in ERROR_COUNTER_NAMES} & set(keys)
    assert error_total_key("replay") in required_keys(load_suite("h100-8gpu"), 4)
    for name in ("b200-sxm", "gb200", "gb200-nvl72", "gb300-nvl72"):
        thresholds = load_thresholds(name)
        assert thresholds.value("nvlink.version") == 5
        assert all(thresholds.get(error_run_key(c)) is not None for c in NVLINK5_ERROR_COUNTER_NAMES), name
    check_required_keys(suite, load_thresholds("b200-sxm"))


def test_a_set_that_says_nvlink5_without_its_counter_keys_stops_the_run(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text('extends = "h100-sxm"\n[nvlink]\nversion = 5\n')
    with pytest.raises(ConfigError, match=r"nvlink_errors\.symbol_total_max: required key missing"):
        check_required_keys(load_suite("b200-8gpu"), load_thresholds(str(site)))


def _properties(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def test_whole_plugin_judges_a_blackwell_node_on_its_nvlink5_counters(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the DL counters answer NotSupported on Blackwell, so every GPU's errors were unknown."""
    served = blackwell_node()
    served.gpus[2].nvlinks[5].errors = {**NVLINK5_ZEROS, "symbol": 4}  # type: ignore[index]
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml(served))
    xml_path = pytester.path / "out.xml"
    result = pytester.runpytest(
        "--nvlink-suite=b200-8gpu", "-k", "nvlink_errors", "-p", "no:cacheprovider", f"--junitxml={xml_path}"
    )
    result.assert_outcomes(passed=7, failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        [
            "*GPU 2: NVLink symbol errors 4 since the driver loaded (worst on link 5) exceed 0 "
            "(b200-sxm.toml:nvlink_errors.symbol_total_max)*"
        ]
    )
    cases = {case.get("name", ""): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    passed = _properties(cases["test_nvlink_errors[gpu0]"])
    assert passed["errors_total_symbol"] == "0" and passed["errors_total_link_recovery_failed"] == "0"
    assert "errors_total_replay" not in passed
