"""Around the measurement campaign: error-counter increases (not lifetime totals) and PCIe under load."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from conftest import SNAPSHOTS, serve_live_node, tiny_collective_thresholds
from fake_pynvml import make_fake_pynvml

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.judges import platform
from pytest_nvlink.judges.context import Context
from pytest_nvlink.measure.campaign import CampaignWatch
from pytest_nvlink.model import Measurements, Node
from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome


def _node() -> Node:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.measurements = Measurements()
    node.error_window_s = None
    for gpu in node.gpus:
        gpu.pcie_gen_loaded = None
        for link in gpu.nvlinks or []:
            link.errors_run = None
    return node


def _clock(*times: float) -> Callable[[], float]:
    values = itertools.chain(times, itertools.repeat(times[-1]))
    return lambda: next(values)


def test_errors_run_is_the_increase_during_the_campaign_and_totals_stay() -> None:
    node = _node()
    served = copy.deepcopy(node)  # what the fake NVML answers from
    served.gpus[5].nvlinks[7].errors = {**(served.gpus[5].nvlinks[7].errors or {}), "replay": 40}  # type: ignore[index]
    fake = make_fake_pynvml(served)
    with CampaignWatch(node, loads_gpus=True, nvml=fake, clock=_clock(100.0, 130.0)):
        link = served.gpus[5].nvlinks[7]  # type: ignore[index]
        link.errors = {**(link.errors or {}), "replay": 43, "crc_flit": 2}
    run = node.gpus[5].nvlinks[7].errors_run  # type: ignore[index]
    assert run == {"replay": 3, "recovery": 0, "crc_flit": 2, "crc_data": 0, "ecc_data": 0}
    assert node.gpus[0].nvlinks[0].errors_run == dict.fromkeys(run, 0)  # type: ignore[index]
    assert node.gpus[5].nvlinks[7].errors == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0, "ecc_data": 0}  # type: ignore[index]
    assert node.error_window_s == 30.0


def test_campaigns_add_up_and_an_unreadable_counter_is_absent_with_its_reason() -> None:
    node = _node()
    fake = make_fake_pynvml(copy.deepcopy(node))
    fake.grow_errors_on_read(2, 4, "replay", 5)
    with CampaignWatch(node, loads_gpus=True, nvml=fake, clock=_clock(0.0, 10.0)):
        pass
    fake.inject_error("nvmlDeviceGetNvLinkErrorCounter", 999, gpu=1)
    with CampaignWatch(node, loads_gpus=False, nvml=fake, clock=_clock(50.0, 70.0)):
        pass
    assert node.gpus[2].nvlinks[4].errors_run["replay"] == 10  # type: ignore[index]
    assert node.gpus[1].nvlinks[0].errors_run == {}  # type: ignore[index]
    assert node.unknown_reasons["gpu1.nvlink0.errors_run.replay"].startswith("NVML: ")
    assert node.error_window_s == 30.0


def test_pcie_generation_is_sampled_under_load_not_taken_from_the_idle_reading() -> None:
    node = _node()
    served = copy.deepcopy(node)
    for gpu in served.gpus:
        gpu.pcie_gen_current = 1  # idle: the link is parked at Gen1
    fake = make_fake_pynvml(served)
    with CampaignWatch(node, loads_gpus=True, nvml=fake) as watch:
        for gpu in served.gpus:
            gpu.pcie_gen_current = 5 if gpu.index != 3 else 4  # under load; GPU 3 sits behind a Gen4 riser
        watch.moved_traffic = True
    assert [gpu.pcie_gen_loaded for gpu in node.gpus] == [5, 5, 5, 4, 5, 5, 5, 5]
    suite = load_suite("h100-8gpu")
    ctx = Context(node, suite, load_thresholds(suite.thresholds_ref))
    verdict = platform.pcie_link(ctx, 3)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith(
        "GPU 3: PCIe generation under load Gen4, below 5 (h100-sxm.toml:pcie.generation_min)"
    )
    assert platform.pcie_link(ctx, 2).ok


def test_a_campaign_that_measured_nothing_proves_no_pcie_generation() -> None:
    node = _node()
    fake = make_fake_pynvml(copy.deepcopy(node))
    with CampaignWatch(node, loads_gpus=True, nvml=fake) as watch:
        watch.moved_traffic = False
    assert node.gpus[0].pcie_gen_loaded is None
    assert node.unknown_reasons["gpu0.pcie_gen_loaded"] == "the measurement campaign measured nothing, so no load ran"


def _replay_pcie(pytester: pytest.Pytester, change: Callable[[Node], None]) -> pytest.RunResult:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    change(node)
    save_snapshot(node, pytester.path / "pcie.json")
    return pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-replay={pytester.path / 'pcie.json'}", "-k", "pcie_link"
    )


def test_replayed_link_trained_narrow_or_slow_fails_although_capability_is_full(pytester: pytest.Pytester) -> None:
    def damage(node: Node) -> None:
        node.gpus[2].pcie_width_current = 8  # max width stays x16: the slot could, the link did not
        node.gpus[3].pcie_gen_loaded = 4
        node.gpus[4].pcie_gen_loaded = None
        node.unknown_reasons["gpu4.pcie_gen_loaded"] = "the collectives ran on gloo (CPU), which does not load the GPUs"

    result = _replay_pcie(pytester, damage)
    result.assert_outcomes(passed=5, failed=3)
    result.stdout.fnmatch_lines(
        [
            "GPU 2: PCIe link trained at width x8, below 16 (h100-sxm.toml:pcie.width_min); likely cause: a riser*",
            "GPU 3: PCIe generation under load Gen4, below 5 (h100-sxm.toml:pcie.generation_min)*",
            "could not determine the PCIe generation of GPU 4 under load (width x16 ok): not measured under load: "
            "the collectives ran on gloo (CPU)*",
        ]
    )


def test_topology_only_live_run_reports_generation_not_measured_under_load(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]
) -> None:
    install_fake_nvml("h100-8gpu-healthy")
    xml_path = pytester.path / "out.xml"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "-k", "pcie_link", "-p", "no:cacheprovider", f"--junitxml={xml_path}"
    )
    result.assert_outcomes(failed=8, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        [
            "could not determine the PCIe generation of GPU 0 under load (width x16 ok): not measured under load: no "
            "measurement campaign ran in this session*"
        ]
    )
    assert 'name="pcie_gen_under_load" value="not_measured"' in xml_path.read_text(encoding="utf-8")


SUITE = """
[suite]
description = "two H100 on one NVSwitch, for the harness test"
thresholds = "tiny.toml"
gpu_count = 2
gpu_models = ["H100"]
nvswitch = true
[topology]
default = "NV18"
[measure]
collective_iterations = 2
collective_warmup = 1
timeout_s = 120
collectives = ["all_reduce"]
"""
TINY = tiny_collective_thresholds("all_reduce")
# GPU 1 link 3 gains 2 replay errors between any two reads, and the session runs its items in
# reverse, so the error and PCIe checks come before the collectives.
GROW_ERRORS = 'module.grow_errors_on_read(1, 3, "replay", 2)'
REVERSE_ITEMS = "def pytest_collection_modifyitems(items):\n    items.reverse()"


def test_live_error_checks_see_the_campaign_deltas_whatever_the_order(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_live_node(pytester, monkeypatch, _node(), 2, setup=GROW_ERRORS, hooks=REVERSE_ITEMS)
    pytester.makefile(".toml", suite=SUITE, tiny=TINY)
    save = pytester.path / "saved.json"
    result = pytester.runpytest_subprocess(
        f"--nvlink-suite={pytester.path / 'suite.toml'}",
        "--nvlink-backend=gloo",
        "-k",
        "collective_busbw or nvlink_errors or pcie_link",
        f"--nvlink-save={save}",
        "-p",
        "no:cacheprovider",
        "-p",
        "fake_nvml_plugin",
        "-v",
        timeout=300,
    )
    text = result.stdout.str()
    # The first item to run is an error/PCIe check; it starts the planned campaign before judging.
    first_item = text.index("nvlink/test_platform.py::test_pcie_link[gpu1]")
    assert first_item < text.index("nvlink: collectives: starting 2 gloo ranks") < text.index("FAILED", first_item)
    assert first_item < text.index("test_collective_busbw[all_reduce]")
    result.stdout.fnmatch_lines(
        [
            "*could not determine the PCIe generation of GPU 1 under load (width x16 ok): not measured under load: "
            "the collectives ran on gloo (CPU), which does not load the GPUs*"
        ]
    )
    result.stdout.fnmatch_lines(
        ["NVLink error counter increase during this run (* s of measurements): GPU 1 link 3: replay 2"]
    )
    saved = load_snapshot(save)
    links = saved.gpus[1].nvlinks or []
    assert links[3].errors_run == {"replay": 2, "recovery": 0, "crc_flit": 0, "crc_data": 0, "ecc_data": 0}
    assert links[3].errors == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0, "ecc_data": 0}
    assert links[2].errors_run == dict.fromkeys(links[2].errors_run or {}, 0) and links[2].errors_run
    assert saved.error_window_s is not None and saved.error_window_s > 0
    assert len(saved.measurements.collectives) == 1


def test_summary_keeps_run_increase_and_lifetime_totals_apart(pytester: pytest.Pytester) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-degraded.json")
    links = node.gpus[5].nvlinks or []
    links[7].errors_run = {"replay": 0, "recovery": 0, "crc_flit": 1, "crc_data": 0, "ecc_data": 0}
    save_snapshot(node, pytester.path / "old-errors.json")
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-replay={pytester.path / 'old-errors.json'}", "-k", "nvlink_errors"
    )
    result.stdout.fnmatch_lines(
        [
            "NVLink error counter increase during this run (412 s of measurements): GPU 5 link 7: crc_flit 1",
            "NVLink error counter lifetime totals (since driver load): GPU 5 link 7: crc_flit 12, replay 3",
        ]
    )
