"""Fail closed on thresholds: missing keys fail, waivers (with reasons) are the only not-applicable,
unread error counters are unknown, and run increases are judged apart from lifetime totals."""

from __future__ import annotations

import copy
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import DATA, SNAPSHOTS, as_recorded

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import Waiver, load_thresholds
from pytest_nvlink.judges import bandwidth, collectives, nvlink, platform
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import CollectiveMeasurement, P2PMeasurement
from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome, Verdict

GB = 10**9
UNI = P2PMeasurement(0, 1, "unidirectional", 370.0, "GB/s", bytes_copied=GB, nvlink_bytes=GB, pcie_bytes=0)
LATENCY = P2PMeasurement(0, 1, "latency", 3.0, "us")
BUSBW = CollectiveMeasurement("all_reduce", 4096 << 20, 8, 1000.0, 250.0, 450.0)


def context(snapshot: str = "h100-8gpu-healthy", suite: str = "h100-8gpu") -> Context:
    loaded = load_suite(suite)
    return Context(load_snapshot(SNAPSHOTS / f"{snapshot}.json"), loaded, load_thresholds(loaded.thresholds_ref))


JUDGES: list[tuple[str, Callable[[Context], Verdict]]] = [
    ("nvlink.active_links", lambda c: nvlink.nvlink_active_links(c, 0)),
    ("nvlink.version", lambda c: nvlink.nvlink_version(c, 0)),
    ("nvlink.link_speed_min_gbps", lambda c: nvlink.nvlink_speed(c, 0)),
    ("fabric.required", lambda c: platform.fabric(c, 0)),
    ("p2p.unidirectional_min_gbps", lambda c: bandwidth.p2p_figure(c, 0, 1, "unidirectional", UNI)),
    ("p2p.latency_max_us", lambda c: bandwidth.p2p_figure(c, 0, 1, "latency", LATENCY)),
    ("p2p.nvlink_counter_fraction_min", lambda c: bandwidth.path_proof(c, 0, 1, UNI)),
    ("collectives.all_reduce.busbw_min_gbps", lambda c: collectives.collective(c, "all_reduce", [BUSBW])),
]


@pytest.mark.parametrize(("key", "judge"), JUDGES, ids=[k for k, _ in JUDGES])
def test_a_missing_key_fails_and_only_a_waiver_makes_a_check_not_apply(
    key: str, judge: Callable[[Context], Verdict]
) -> None:
    ctx = context()
    assert judge(ctx).ok
    del ctx.thresholds.values[key]
    missing = judge(ctx)
    assert missing.outcome is Outcome.FAIL
    assert f"neither sets nor waives {key}" in missing.message and "h100-sxm" in missing.message
    ctx.thresholds.waivers[key] = Waiver(key, "our reason", Path("/x/site.toml"))
    waived = judge(ctx)
    assert waived.outcome is Outcome.NOT_APPLICABLE
    assert waived.message == f"waived by site.toml:waive.{key}: our reason"
    assert ("waived_key", key) in waived.properties
    assert ("waiver_file", "/x/site.toml") in waived.properties
    assert ("waiver_reason", "our reason") in waived.properties


def test_pcie_needs_both_keys_or_their_waivers() -> None:
    ctx = context()
    del ctx.thresholds.values["pcie.width_min"]
    assert platform.pcie_link(ctx, 0).outcome is Outcome.FAIL
    ctx.thresholds.waivers["pcie.width_min"] = Waiver("pcie.width_min", "why", Path("s.toml"))
    assert platform.pcie_link(ctx, 0).ok  # the generation is still judged
    del ctx.thresholds.values["pcie.generation_min"]
    ctx.thresholds.waivers["pcie.generation_min"] = Waiver("pcie.generation_min", "why", Path("s.toml"))
    assert platform.pcie_link(ctx, 0).outcome is Outcome.NOT_APPLICABLE


def test_pcie_only_sku_makes_per_link_checks_not_apply_citing_its_file() -> None:
    ctx = context("h100-8gpu-vm-pcie", suite="l40s-4gpu")
    for verdict in (nvlink.nvlink_version(ctx, 0), nvlink.nvlink_errors(ctx, 0)):
        assert verdict.outcome is Outcome.NOT_APPLICABLE
        assert verdict.message == "the SKU has no NVLink (l40s.toml:nvlink.active_links = 0)"


# --- NVLink error counters --------------------------------------------------------------------


def test_counters_never_read_are_unknown_not_zero() -> None:
    ctx = context()
    for link in ctx.node.gpus[0].nvlinks or []:
        link.errors = {"crc_data": 0}  # live: only the CRC data counter answered
    verdict = as_recorded(nvlink.nvlink_errors(ctx, 0), ctx)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith("could not determine the NVLink error counters of GPU 0: not read: replay")
    assert "recovery (total)" in verdict.message and "ecc_data (total)" in verdict.message
    ctx.node.source = "evidence"  # nvidia-smi nvlink -e printing "Replay Errors: N/A"
    assert as_recorded(nvlink.nvlink_errors(ctx, 0), ctx).outcome is Outcome.NO_EVIDENCE


def test_a_sku_without_a_counter_waives_it_instead() -> None:
    ctx = context()
    for link in ctx.node.gpus[0].nvlinks or []:
        assert link.errors is not None
        del link.errors["ecc_data"]
    assert as_recorded(nvlink.nvlink_errors(ctx, 0), ctx).outcome is Outcome.FAIL
    key = "nvlink_errors.ecc_data_total_max"
    del ctx.thresholds.values[key]
    ctx.thresholds.waivers[key] = Waiver(key, "no ECC data counter on this SKU", Path("site.toml"))
    verdict = nvlink.nvlink_errors(ctx, 0)
    assert verdict.ok
    assert ("waived_keys", "nvlink_errors.crc_flit_total_max, nvlink_errors.crc_data_total_max, " + key) in (
        verdict.properties
    )


def test_negative_counters_cannot_cancel_out() -> None:
    ctx = context()
    links = ctx.node.gpus[5].nvlinks or []
    links[7].errors = {**(links[7].errors or {}), "replay": 3}
    links[8].errors = {**(links[8].errors or {}), "replay": -3}
    verdict = nvlink.nvlink_errors(ctx, 5)
    assert verdict.outcome is Outcome.FAIL and "impossible" in verdict.message and "link 8 replay -3" in verdict.message


def _totals_only(ctx: Context) -> Context:
    """A topology-only run or an old snapshot: no increase during a run was recorded."""
    ctx.node.error_window_s = None
    for gpu in ctx.node.gpus:
        for link in gpu.nvlinks or []:
            link.errors_run = None
    return ctx


def test_totals_only_says_what_was_judged() -> None:
    verdict = nvlink.nvlink_errors(_totals_only(context()), 0)
    assert verdict.ok
    assert "judged: lifetime totals only" in verdict.message
    assert ("errors_judged", "lifetime totals only") in verdict.properties
    assert ("errors_total_replay", "0") in verdict.properties


def test_nothing_judged_is_not_a_pass() -> None:
    ctx = _totals_only(context())
    for counter in ("replay", "recovery", "ecc_data"):
        key = f"nvlink_errors.{counter}_total_max"
        del ctx.thresholds.values[key]
        ctx.thresholds.waivers[key] = Waiver(key, "we judge the run increase only", Path("site.toml"))
    verdict = as_recorded(nvlink.nvlink_errors(ctx, 0), ctx)  # a snapshot without run figures: totals, all waived
    assert verdict.outcome is Outcome.FAIL
    assert "nothing was judged: every limit that applies is waived and no increase during a run" in verdict.message
    assert nvlink.nvlink_errors(_with_run(ctx, 0, 60.0), 0).ok


def _with_run(ctx: Context, gpu: int, window: float | None, **increase: int) -> Context:
    ctx = copy.deepcopy(ctx)
    ctx.node.error_window_s = window
    for node_gpu in ctx.node.gpus:
        for link in node_gpu.nvlinks or []:
            link.errors_run = {name: 0 for name in (link.errors or {})}
    run = (ctx.node.gpus[gpu].nvlinks or [])[7].errors_run
    assert run is not None
    run.update(increase)
    return ctx


def test_an_old_replay_fails_the_totals_key_and_says_it_predates_the_run() -> None:
    ctx = _with_run(context("h100-8gpu-degraded"), 5, 60.0)
    verdict = nvlink.nvlink_errors(ctx, 5)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith(
        "GPU 5: NVLink replay errors 3 since the driver loaded (worst on link 7) exceed 0 "
        "(nvswitch-common.toml:nvlink_errors.replay_total_max)"
    )
    assert "predate this run" in verdict.message
    assert ("threshold_key", "nvlink_errors.replay_total_max") in verdict.properties
    assert ("errors_run_replay", "0") in verdict.properties and ("errors_total_replay", "3") in verdict.properties


def test_a_replay_during_the_run_fails_the_run_key() -> None:
    ctx = _with_run(context(), 2, 60.0, replay=1)
    verdict = nvlink.nvlink_errors(ctx, 2)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith(
        "GPU 2: NVLink replay errors grew by 1 during this run (worst on link 7), above 0 "
        "(nvswitch-common.toml:nvlink_errors.replay_run_max)"
    )


def test_crc_errors_are_judged_as_a_rate_over_the_campaign() -> None:
    slow = nvlink.nvlink_errors(_with_run(context(), 1, 100.0, crc_flit=500), 1)  # 5 per second
    assert slow.ok and "the increase during this run and the lifetime totals" in slow.message
    assert ("error_window_s", "100") in slow.properties
    fast = nvlink.nvlink_errors(_with_run(context(), 1, 10.0, crc_flit=5000), 1)  # 500 per second
    assert fast.outcome is Outcome.FAIL
    assert "crc_flit errors grew at 500.0/s during this run's 10 s of measurements" in fast.message
    assert "above 100.0/s (nvswitch-common.toml:nvlink_errors.crc_flit_per_s_max)" in fast.message


def test_run_deltas_without_a_window_or_for_some_links_only_are_unknown() -> None:
    windowless = _with_run(context(), 1, None, crc_flit=5)
    no_window = as_recorded(nvlink.nvlink_errors(windowless, 1), windowless)
    assert (
        no_window.outcome is Outcome.FAIL and "length of the measurement window was not recorded" in no_window.message
    )
    partial = _with_run(context(), 1, 30.0)
    (partial.node.gpus[1].nvlinks or [])[4].errors_run = None
    verdict = as_recorded(nvlink.nvlink_errors(partial, 1), partial)
    assert verdict.outcome is Outcome.FAIL and "replay (run) on link(s) 4" in verdict.message


# --- the whole plugin -------------------------------------------------------------------------

SUITE_NV18 = """
[suite]
description = "8 GPUs NV18 over NVSwitch, with a thin threshold set"
thresholds = "thin.toml"
gpu_count = 8
gpu_models = ["H100 80GB HBM3"]
nvswitch = true
[topology]
default = "NV18"
[measure]
collectives = ["all_reduce"]
"""
THIN = """
[p2p]
# Source: test
unidirectional_min_gbps = 335.0
[collectives.all_reduce]
# Source: test
size_mib = 4096
# Source: test
busbw_min_gbps = 400.0
"""


def test_thin_threshold_set_is_a_usage_error_not_216_skips(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", suite=SUITE_NV18, thin=THIN)
    result = pytester.runpytest(
        f"--nvlink-suite={pytester.path / 'suite.toml'}", "--nvlink-replay=h100-8gpu-degraded", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"ERROR: {pytester.path / 'thin.toml'}:nvlink.active_links: required key missing" in err
    assert f"suite {pytester.path / 'suite.toml'}" in err
    assert "threshold set " in err and "thin.toml" in err
    assert "fabric.required" in err and "nvlink_errors.replay_total_max" in err


def _junit(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, ET.Element]]:
    xml_path = pytester.path / "out.xml"
    result = pytester.runpytest(*args, f"--junitxml={xml_path}", "-rs", "-p", "no:cacheprovider")
    cases = {case.get("name", ""): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    return result, cases


def _properties(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def test_site_waiver_skips_with_its_reason_and_junit_properties(pytester: pytest.Pytester) -> None:
    site = pytester.makefile(".toml", site='[waive]\n"p2p.latency_max_us" = "latency is our vendor\'s problem"\n')
    result, cases = _junit(
        pytester,
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-healthy",
        f"--nvlink-thresholds={site}",
        "-k",
        "p2p_latency",
    )
    result.assert_outcomes(skipped=56)
    result.stdout.fnmatch_lines(
        ["SKIPPED * does not apply: waived by site.toml:waive.p2p.latency_max_us: latency is our vendor's problem"]
    )
    props = _properties(cases["test_p2p_latency[gpu0-gpu1]"])
    assert props["waived_key"] == "p2p.latency_max_us"
    assert props["waiver_file"] == str(site)
    assert props["waiver_reason"] == "latency is our vendor's problem"


def test_old_key_names_in_a_site_file_say_what_replaced_them(pytester: pytest.Pytester) -> None:
    site = pytester.makefile(".toml", site="[nvlink_errors]\ncrc_flit_max = 100\n")
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", f"--nvlink-thresholds={site}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: *site.toml:nvlink_errors.crc_flit_max: renamed: *use nvlink_errors.crc_flit_total_max "
            "(total since the driver loaded) and nvlink_errors.crc_flit_per_s_max (increase during the run)"
        ]
    )


def test_infinite_latency_limit_is_a_usage_error(pytester: pytest.Pytester) -> None:
    site = pytester.makefile(".toml", site="[p2p]\nlatency_max_us = 1e400\n")
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", f"--nvlink-thresholds={site}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *site.toml:p2p.latency_max_us: inf is not a finite number"])


def test_unread_counter_fails_through_the_plugin(pytester: pytest.Pytester) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    for link in node.gpus[3].nvlinks or []:
        link.errors = {"crc_data": 0}
    save_snapshot(node, pytester.path / "node.json")
    result, cases = _junit(
        pytester, "--nvlink-suite=h100-8gpu", f"--nvlink-replay={pytester.path / 'node.json'}", "-k", "nvlink_errors"
    )
    result.assert_outcomes(passed=7, failed=1)
    failure = cases["test_nvlink_errors[gpu3]"].find("failure")
    assert failure is not None
    assert failure.get("message", "") == (
        "Failed: could not determine the NVLink error counters of GPU 3: not read: replay (total) on all 18 links; "
        "recovery (total) on all 18 links; ecc_data (total) on all 18 links"
    )


def test_run_increase_is_judged_through_the_plugin(pytester: pytest.Pytester) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.error_window_s = 120.0
    for gpu in node.gpus:
        for link in gpu.nvlinks or []:
            link.errors_run = dict.fromkeys(link.errors or {}, 0)
    (node.gpus[6].nvlinks or [])[2].errors_run = {
        **dict.fromkeys(("replay", "crc_flit", "crc_data", "ecc_data"), 0),
        "recovery": 2,
    }
    save_snapshot(node, pytester.path / "node.json")
    result, cases = _junit(
        pytester, "--nvlink-suite=h100-8gpu", f"--nvlink-replay={pytester.path / 'node.json'}", "-k", "nvlink_errors"
    )
    result.assert_outcomes(passed=7, failed=1)
    failure = cases["test_nvlink_errors[gpu6]"].find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith(
        "Failed: GPU 6: NVLink recovery errors grew by 2 during this run (worst on link 2), above 0 "
        "(nvswitch-common.toml:nvlink_errors.recovery_run_max)"
    )
    passing = _properties(cases["test_nvlink_errors[gpu0]"])
    assert passing["errors_judged"] == "run increase and lifetime totals"
    assert passing["errors_total_replay"] == "0" and passing["errors_run_replay"] == "0"


def test_nvlink_e_without_a_counter_is_no_evidence(pytester: pytest.Pytester) -> None:
    sample = DATA / "evidence/nvlink/a100-sxm4-40gb-vm-brev-nvlink-e-all.txt"
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu", f"--nvlink-evidence={sample}", "-k", "nvlink_errors", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(failed=8)
    result.stdout.fnmatch_lines(
        ["*no evidence for the NVLink error counters of GPU 0: not read: ecc_data (total) on all 12 links"]
    )
    assert "replay (total)" not in result.stdout.str()  # replay, recovery and CRC were read


def _relabelled(pytester: pytest.Pytester, names: list[str]) -> Path:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    for gpu, name in zip(node.gpus, names, strict=True):
        gpu.name = name
    save_snapshot(node, pytester.path / "node.json")
    return pytester.path / "node.json"


def test_auto_does_not_take_a_gb200_for_a_b200(pytester: pytest.Pytester) -> None:
    node = _relabelled(pytester, ["NVIDIA GB200"] * 8)
    result = pytester.runpytest("--nvlink-suite=auto", f"--nvlink-replay={node}", "-p", "no:cacheprovider")
    # No suite fits, so only the inventory gate runs and fails (b200-8gpu must not be taken).
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*8 x NVIDIA GB200: no shipped suite has 8 GPUs; gb200-4gpu expects 4*"])
    result.stdout.no_fnmatch_line("*auto-selected suite b200-8gpu*")


def test_gpu_model_matches_exactly_through_the_plugin(pytester: pytest.Pytester) -> None:
    node = _relabelled(pytester, ["NVIDIA H200"] + ["NVIDIA H200 NVL"] + ["nvidia  h200"] * 6)
    result = pytester.runpytest(
        "--nvlink-suite=h200-8gpu", f"--nvlink-replay={node}", "-k", "gpu_model", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(
        ["*GPU 1 is a 'NVIDIA H200 NVL', not one of the models suite h200-8gpu accepts (H200, h200-8gpu.toml*"]
    )


def test_gb200_pcie_is_waived_with_its_reason_not_a_gen1_x1_pass(pytester: pytest.Pytester) -> None:
    result, cases = _junit(
        pytester, "--nvlink-suite=gb200-4gpu", "--nvlink-replay=h100-8gpu-healthy", "-k", "pcie_link"
    )
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(
        ["SKIPPED * does not apply: waived by gb200.toml:waive.pcie.generation_min: GB200 GPUs attach to Grace*"]
    )
    assert _properties(cases["test_pcie_link[gpu0]"])["waived_key"] == "pcie.generation_min"


def test_live_probe_with_only_crc_data_answering_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fake_pynvml import make_fake_pynvml

    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    for link in node.gpus[4].nvlinks or []:
        link.errors = {"crc_data": 0}  # the other counters raise NVMLError_NotSupported in the fake
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml(node))
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "-k", "nvlink_errors", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(
        ["*could not determine the NVLink error counters of GPU 4: not read: replay (total) on all 18 links*"]
    )


def test_nvlink_e_with_replay_na_is_no_evidence_not_a_pass(pytester: pytest.Pytester) -> None:
    counters = ("Replay Errors: N/A", "Recovery Errors: 0", "CRC Flit Errors: 0", "CRC Data Errors: 0")
    lines = [f"\t Link {n}: {c}" for n in range(12) for c in (*counters, "ECC Data Errors: 0")]
    capture = pytester.makefile(".txt", errors="GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n" + "\n".join(lines) + "\n")
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu",
        f"--nvlink-evidence={capture}",
        "-k",
        "nvlink_errors and gpu0",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*no evidence for the NVLink error counters of GPU 0: not read: replay (total) on all 12 links"]
    )
