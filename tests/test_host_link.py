"""The host link of each GPU: the judge (floors, the node's median, not measured, likely cause), NVLink-C2C,
the threshold keys, and the degraded demo's failing GPU in every output."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path

import pytest
from conftest import SNAPSHOTS, as_recorded

from pytest_nvlink.config.required_keys import check_required_keys
from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.fleet.outliers import node_figures
from pytest_nvlink.judges import host_link
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import Node
from pytest_nvlink.model.host_link import HOST_LINK_DIRECTIONS, C2CInfo, C2CLink, HostLinkMeasurement
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome

FLOOR = 48.0  # h100-sxm.toml's host_link.h2d/d2h floor
HEALTHY = 55.0


@cache
def _healthy() -> Node:
    return load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")


def _context(thresholds: str = "h100-sxm", suite: str = "h100-8gpu") -> Context:
    return Context(copy.deepcopy(_healthy()), load_suite(suite), load_thresholds(thresholds))


def _figures(ctx: Context, **gpu0: float | None) -> list[HostLinkMeasurement]:
    """Every GPU at HEALTHY in every direction (bidirectional at the floor's ratio), GPU 0's directions as given."""
    figures = []
    for gpu in ctx.node.gpus:
        for direction in HOST_LINK_DIRECTIONS:
            value: float | None = HEALTHY if not direction.startswith("bidir") else 45.0
            if gpu.index == 0 and direction in gpu0:
                value = gpu0[direction]
            figures.append(HostLinkMeasurement(gpu.index, direction, value, host_numa_node=gpu.numa_node))
    return figures


def test_at_the_floor_passes_and_just_below_fails() -> None:
    ctx = _context()
    assert host_link.host_link(ctx, 0, _figures(ctx, h2d=HEALTHY)).outcome is Outcome.PASS
    # Below the floor and so far below the median that only the floor is named first.
    at = host_link.host_link(ctx, 0, _figures(ctx, d2h=FLOOR))
    below = host_link.host_link(ctx, 0, _figures(ctx, d2h=math.nextafter(FLOOR, 0)))
    assert at.outcome is Outcome.PASS
    assert below.outcome is Outcome.FAIL
    assert below.message.startswith("GPU 0: device->host bandwidth 48.0 GB/s, below 48.0 GB/s")
    assert "(h100-sxm.toml:host_link.d2h_min_gbps)" in below.message


def test_the_failure_names_gpu_direction_figure_floor_key_and_properties() -> None:
    ctx = _context()
    verdict = host_link.host_link(ctx, 0, _figures(ctx, h2d=14.2))
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith(
        "GPU 0: host->device bandwidth 14.2 GB/s, below 48.0 GB/s (h100-sxm.toml:host_link.h2d_min_gbps); likely cause:"
    )
    props = dict(verdict.properties)
    assert props["measured"] == "14.2" and props["expected"] == ">= 48.0" and props["unit"] == "GB/s"
    assert props["threshold_key"] == "host_link.h2d_min_gbps"
    assert props["threshold_file"].endswith("h100-sxm.toml")
    assert props["direction"] == "h2d" and props["host_link_h2d_gbps"] == "14.2"
    assert props["host_link_d2h_gbps"] == "55" and props["gpu_index"] == "0"


def test_a_pageable_figure_is_not_held_to_the_pinned_floor_and_the_worst_pinned_figure_is() -> None:
    ctx = _context()
    figures = _figures(ctx)
    pageable = HostLinkMeasurement(0, "h2d", 9.0, conditions={"memory": "pageable"})
    assert host_link.host_link(ctx, 0, [*figures, pageable]).outcome is Outcome.PASS
    # A second pinned (or unstated) figure of the same GPU and direction: the link is as good as its worst.
    slow = HostLinkMeasurement(0, "h2d", 14.2, method="sm")
    verdict = host_link.host_link(ctx, 0, [*figures, slow])
    assert verdict.outcome is Outcome.FAIL and "host->device bandwidth 14.2 GB/s" in verdict.message
    # Only pageable figures for a direction: not measured, never passed.
    only_pageable = [m for m in figures if (m.gpu, m.direction) != (0, "h2d")] + [pageable]
    missing = host_link.host_link(ctx, 0, only_pageable)
    assert missing.outcome is not Outcome.PASS and "pageable host memory are not held" in missing.message


def test_a_gpu_far_below_the_median_fails_above_the_floor() -> None:
    ctx = _context()
    # 55 x (1 - 0.15) = 46.75 < the floor, so lift the median: everyone at 70, GPU 0 at 58 (17 % below).
    figures = [dataclasses.replace(m, value=70.0) if m.direction == "h2d" else m for m in _figures(ctx)]
    figures = [dataclasses.replace(m, value=58.0) if (m.gpu, m.direction) == (0, "h2d") else m for m in figures]
    verdict = host_link.host_link(ctx, 0, figures)
    assert verdict.outcome is Outcome.FAIL
    assert "host->device bandwidth 58.0 GB/s, 17 % below the node's median 70.0 GB/s, more than 15 %" in verdict.message
    assert "(nvswitch-common.toml:host_link.below_median_max_fraction)" in verdict.message
    props = dict(verdict.properties)
    assert props["threshold_key"] == "host_link.below_median_max_fraction" and props["direction"] == "h2d"
    assert props["measured"] == "58" and props["expected"] == ">= 59.5 (node median 70 less 0.15)"
    near = [dataclasses.replace(m, value=60.0) if (m.gpu, m.direction) == (0, "h2d") else m for m in figures]
    assert host_link.host_link(ctx, 0, near).outcome is Outcome.PASS  # 14 % below: within the spread
    assert host_link.host_link(ctx, 1, figures).outcome is Outcome.PASS


def test_a_gpu_without_a_figure_fails_as_not_measured_never_passes() -> None:
    ctx = _context()
    figures = [m for m in _figures(ctx) if not (m.gpu == 2 and m.direction == "bidir_d2h")]
    verdict = as_recorded(host_link.host_link(ctx, 2, figures), ctx)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith("GPU 2: host link not measured (device->host (both directions at once)):")
    ctx.node.unknown_reasons["gpu2.host_link"] = "the host-link campaign crashed"
    assert "the host-link campaign crashed" in as_recorded(host_link.host_link(ctx, 2, figures), ctx).message
    nothing = as_recorded(host_link.host_link(ctx, 2, []), ctx)
    assert nothing.outcome is Outcome.FAIL and "not measured" in nothing.message


def test_a_figure_with_an_error_fails_with_the_error() -> None:
    ctx = _context()
    figures = _figures(ctx, d2h=None)
    figures = [dataclasses.replace(m, error="cudaErrorLaunchTimeout") if m.value is None else m for m in figures]
    verdict = host_link.host_link(ctx, 0, figures)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith("GPU 0: host link not measured: the device->host copy failed: cudaErrorLaunch")


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        ({"pcie_width_current": 8}, "the PCIe link trained at x8 of x16 (pcie_width_current vs pcie_width_max)"),
        ({"pcie_gen_loaded": 4}, "the PCIe link runs at Gen4 of Gen5 (pcie_gen_loaded vs pcie_gen_max)"),
        (
            {"pcie_gen_loaded": None, "pcie_gen_current": 3},
            "the PCIe link runs at Gen3 of Gen5 (pcie_gen_current, read at idle vs pcie_gen_max)",
        ),
        ({"virtualization_mode": "passthrough"}, "a VM (virtualization mode passthrough): DMA passes the hypervisor"),
        ({}, "nothing in the probe's facts explains it"),
    ],
)
def test_the_likely_cause_cites_the_link_facts(change: dict[str, object], cause: str) -> None:
    ctx = _context()
    for name, value in change.items():
        setattr(ctx.node.gpus[0], name, value)
    verdict = host_link.host_link(ctx, 0, _figures(ctx, h2d=20.0))
    assert verdict.outcome is Outcome.FAIL
    assert f"likely cause: {cause}" in verdict.message


def test_the_likely_cause_names_a_host_buffer_on_the_far_numa_node() -> None:
    ctx = _context()
    figures = [
        dataclasses.replace(m, value=30.0, host_numa_node=1) if (m.gpu, m.direction) == (0, "h2d") else m
        for m in _figures(ctx)
    ]
    verdict = host_link.host_link(ctx, 0, figures)
    assert "the pinned host buffer sat on NUMA node 1 while GPU 0 hangs off NUMA node 0" in verdict.message


def test_a_waived_key_leaves_its_directions_unjudged_and_all_waived_does_not_apply() -> None:
    ctx = _context()
    thresholds = ctx.thresholds
    from pytest_nvlink.config.thresholds import Waiver

    key = "host_link.bidir_min_gbps"
    thresholds.waivers[key] = Waiver(key, "the host cannot run both directions at once", thresholds.files[-1])
    del thresholds.values[key]
    figures = [m for m in _figures(ctx) if not m.direction.startswith("bidir")]
    assert host_link.host_link(ctx, 0, figures).outcome is Outcome.PASS
    for other in ("host_link.h2d_min_gbps", "host_link.d2h_min_gbps", "host_link.below_median_max_fraction"):
        thresholds.waivers[other] = Waiver(other, "a site without host-link figures", thresholds.files[-1])
        del thresholds.values[other]
    verdict = host_link.host_link(ctx, 0, figures)
    assert verdict.outcome is Outcome.NOT_APPLICABLE and "waived by" in verdict.message


def _c2c_context() -> Context:
    ctx = _context("gb200", "gb200-4gpu")
    for gpu in ctx.node.gpus:
        gpu.c2c = C2CInfo(link_count=10, links=[C2CLink(n, True, 45.0) for n in range(10)])
    return ctx


def test_c2c_links_are_judged_as_links() -> None:
    ctx = _c2c_context()
    assert host_link.c2c_link(ctx, 0).outcome is Outcome.PASS
    gpu = ctx.node.gpus[0]
    assert gpu.c2c is not None
    gpu.c2c.links[4].active = False
    down = host_link.c2c_link(ctx, 0)
    assert down.outcome is Outcome.FAIL
    assert down.message.startswith("GPU 0: NVLink-C2C link(s) 4 inactive (9 of 10 active")
    gpu.c2c.links[4] = C2CLink(4, True, 21.5)
    slow = host_link.c2c_link(ctx, 0)
    assert slow.outcome is Outcome.FAIL
    assert "link 4 21.5 GB/s, below 40.0 GB/s (gb200.toml:c2c.link_max_bw_min_gbps)" in slow.message
    gpu.c2c.links[4] = C2CLink(4, None, None)
    assert host_link.c2c_link(ctx, 0).outcome is Outcome.UNKNOWN
    gpu.c2c = C2CInfo(link_count=0, links=[])
    assert host_link.c2c_link(ctx, 0).outcome is Outcome.FAIL
    gpu.c2c = None
    unread = host_link.c2c_link(ctx, 0)
    assert unread.outcome is Outcome.UNKNOWN and "NVLink-C2C links of GPU 0 unknown" in unread.message


def test_c2c_does_not_apply_where_the_sku_says_pcie() -> None:
    verdict = host_link.c2c_link(_context(), 0)
    assert verdict.outcome is Outcome.NOT_APPLICABLE
    assert verdict.message == "the SKU's host link is PCIe, not NVLink-C2C (h100-sxm.toml:c2c.required = false)"


def _site(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "site.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("value", ["nan", "inf", "-1.0", "0.0", "20000.0"])
def test_an_impossible_floor_is_an_input_error_naming_file_and_key(tmp_path: Path, value: str) -> None:
    site = _site(tmp_path, f"[host_link]\nh2d_min_gbps = {value}\n")
    with pytest.raises(ConfigError, match=r"site\.toml:host_link\.h2d_min_gbps: "):
        load_thresholds("h100-sxm", site)


@pytest.mark.parametrize("value", ["0.0", "1.5", "nan"])
def test_an_impossible_spread_is_an_input_error(tmp_path: Path, value: str) -> None:
    site = _site(tmp_path, f"[host_link]\nbelow_median_max_fraction = {value}\n")
    with pytest.raises(ConfigError, match=r"site\.toml:host_link\.below_median_max_fraction: "):
        load_thresholds("h100-sxm", site)


def test_a_missing_host_link_key_fails_naming_file_and_key(tmp_path: Path) -> None:
    thresholds = load_thresholds("h100-sxm")
    del thresholds.values["host_link.d2h_min_gbps"]
    with pytest.raises(ConfigError, match=r"h100-sxm\.toml:host_link\.d2h_min_gbps: required key missing"):
        check_required_keys(load_suite("h100-8gpu"), thresholds)


def test_c2c_required_without_a_link_floor_is_refused(tmp_path: Path) -> None:
    site = _site(tmp_path, "[c2c]\nrequired = true\n")
    with pytest.raises(ConfigError, match=r"site\.toml:c2c\.link_max_bw_min_gbps: required key missing"):
        load_thresholds("h100-sxm", site)


def test_the_fleet_takes_each_direction_s_slowest_gpu_as_an_outlier_candidate() -> None:
    ctx = _context()
    document = {"host_link": [dataclasses.asdict(m) for m in _figures(ctx, h2d=14.2)]}
    found = {family: figure for family, _, _, figure in node_figures(document)}
    assert found["host link h2d"].value == 14.2 and found["host link h2d"].where == "GPU 0"
    assert found["host link d2h"].value == HEALTHY


def test_the_degraded_demo_fails_gpu3_in_terminal_junit_json_and_html(pytester: pytest.Pytester) -> None:
    out = pytester.path
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-degraded",
        "-p",
        "no:cacheprovider",
        f"--junitxml={out / 'junit.xml'}",
        f"--nvlink-json={out / 'results.json'}",
        f"--nvlink-report={out / 'report.html'}",
    )
    sentence = "GPU 3: host->device bandwidth 14.2 GB/s, below 48.0 GB/s (h100-sxm.toml:host_link.h2d_min_gbps)"
    result.stdout.fnmatch_lines([f"{sentence}; likely cause: *"])
    result.stdout.fnmatch_lines(["FAILED nvlink/test_host_link.py::test_host_link[[]gpu3]*"])
    result.stdout.fnmatch_lines(["host link per GPU (GB/s, *): h2d 14.2-55.3, *; below the floor: GPU 3 h2d 14.2 < 48"])
    cases = {case.get("name"): case for case in ET.parse(out / "junit.xml").getroot().iter("testcase")}
    case = cases["test_host_link[gpu3]"]
    assert case.find("failure") is not None and sentence in (case.find("failure").get("message") or "")  # type: ignore[union-attr]
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["measured"] == "14.2" and props["threshold_key"] == "host_link.h2d_min_gbps"
    assert str(props["threshold_file"]).endswith("h100-sxm.toml")
    assert cases["test_host_link[gpu2]"].find("failure") is None
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    items = {item["nodeid"]: item for item in results["items"]}
    item = items["nvlink/test_host_link.py::test_host_link[gpu3]"]
    assert item["outcome"] == "fail" and item["message"].startswith(sentence)
    assert items["nvlink/test_host_link.py::test_host_link[gpu0]"]["outcome"] == "pass"
    figures = results["node"]["measurements"]["host_link"]
    assert {(m["gpu"], m["direction"]) for m in figures} == {(g, d) for g in range(8) for d in HOST_LINK_DIRECTIONS}
    html = (out / "report.html").read_text(encoding="utf-8")
    assert '<section id="host-link">' in html
    bars = re.findall(r'data-gpu="(\d+)" data-direction="([^"]+)" data-value="([^"]+)"', html)
    assert len(bars) == 32
    assert ("3", "H2D", "14.2") in bars and ("0", "H2D", "55.3") in bars
    # Fixed scale: 0 .. Gen5 x16 (3.938 GB/s per lane x 16 = 63.0 GB/s); GPU 3's bar is 14.2 / 63.008 of 420 px.
    assert "Scale 0 to 63.008 GB/s fixed by the SKU (PCIe Gen5 x16 per direction)" in html
    gpu3 = re.search(r'data-gpu="3" data-direction="H2D".*?</g>', html, re.S)
    assert gpu3 is not None and 'width="94.7"' in gpu3.group(0) and "14.2!" in gpu3.group(0)


def test_on_grace_the_host_link_item_also_judges_the_c2c_links() -> None:
    ctx = _c2c_context()
    figures = [
        dataclasses.replace(m, value=352.0 if not m.direction.startswith("bidir") else 176.0) for m in _figures(ctx)
    ]
    healthy = host_link.with_c2c(host_link.host_link(ctx, 0, figures), host_link.c2c_link(ctx, 0))
    assert healthy.outcome is Outcome.PASS and "10 of 10 active" in healthy.message
    gpu = ctx.node.gpus[0]
    assert gpu.c2c is not None
    gpu.c2c.links[7].active = False
    down = host_link.with_c2c(host_link.host_link(ctx, 0, figures), host_link.c2c_link(ctx, 0))
    assert down.outcome is Outcome.FAIL and down.message.startswith("GPU 0: NVLink-C2C link(s) 7 inactive")
    slow = [dataclasses.replace(m, value=200.0) if (m.gpu, m.direction) == (0, "h2d") else m for m in figures]
    both = host_link.with_c2c(host_link.host_link(ctx, 0, slow), host_link.c2c_link(ctx, 0))
    assert both.message.startswith("GPU 0: host->device bandwidth 200.0 GB/s, below 310.0 GB/s (gb200.toml:")
    assert "likely cause: NVLink-C2C link(s) 7 inactive" in both.message
    assert "; GPU 0: NVLink-C2C link(s) 7 inactive" in both.message
    pcie = _context()
    alone = host_link.host_link(pcie, 0, _figures(pcie))
    assert host_link.with_c2c(alone, host_link.c2c_link(pcie, 0)) is alone


def test_a_c2c_link_at_zero_gb_s_fails_live_and_replayed_alike(tmp_path: Path) -> None:
    from pytest_nvlink.model.document import save_snapshot

    ctx = _c2c_context()
    gpu = ctx.node.gpus[0]
    assert gpu.c2c is not None
    gpu.c2c.links[3] = C2CLink(3, True, 0.0)
    verdict = host_link.c2c_link(ctx, 0)
    assert verdict.outcome is Outcome.FAIL and "link 3 0.0 GB/s, below 40.0 GB/s" in verdict.message
    # A live run saves what NVML said (an inactive link may report 0): the replay reads it and judges the same.
    path = tmp_path / "zero.json"
    save_snapshot(ctx.node, path)
    replayed = Context(load_snapshot(path), ctx.suite, ctx.thresholds)
    assert host_link.c2c_link(replayed, 0).message == verdict.message


def test_every_floor_waived_with_the_spread_key_still_set_does_not_apply_and_does_not_crash() -> None:
    from pytest_nvlink.config.thresholds import Waiver

    ctx = _context()
    thresholds = ctx.thresholds
    for key in ("host_link.h2d_min_gbps", "host_link.d2h_min_gbps", "host_link.bidir_min_gbps"):
        thresholds.waivers[key] = Waiver(key, "a site without host-link floors", thresholds.files[-1])
        del thresholds.values[key]
    verdict = host_link.host_link(ctx, 0, _figures(ctx))
    assert verdict.outcome is Outcome.NOT_APPLICABLE and "waived by" in verdict.message


def test_the_baseline_compares_each_gpu_s_worst_figure_as_the_floor_judge_does() -> None:
    from pytest_nvlink.judges import baseline as baseline_judge
    from pytest_nvlink.judges.baseline_match import Baseline, match_gpus

    ctx = _context()
    then = _figures(ctx) + [dataclasses.replace(m, method="sm") for m in _figures(ctx)]
    old = copy.deepcopy(ctx.node)
    old.measurements.host_link = then
    given = Baseline(node=old, file=Path("b.json"), saved_utc=None, schema_migrated=False)
    match_gpus(ctx.node, given)
    # GPU 0's second (SM) host->device figure drops 11 %: above the floor, past baseline.p2p_drop_max_pct.
    now = _figures(ctx) + [
        dataclasses.replace(m, method="sm", value=49.0 if (m.gpu, m.direction) == (0, "h2d") else m.value)
        for m in _figures(ctx)
    ]
    assert host_link.host_link(ctx, 0, now).outcome is Outcome.PASS
    verdict = baseline_judge.host_link(ctx, given, 0, now)
    assert verdict.outcome is Outcome.FAIL and "49" in verdict.message
