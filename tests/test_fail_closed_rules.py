"""Fail-closed rules, each pinned by a test that fails when the rule is inverted.

One waived key never excuses an unwaived one; a fact this run cannot tell never counts as unchanged
from the baseline; a group mixing passing pairs with pairs without evidence fails; two evidence files
that disagree on a P2P status stop the run; impossible numbers (a negative counter, a window of no
length, NaN, infinity) never pass; a rack with more or fewer hosts than trays fails; a collective at
another size than the threshold's does not count; the direction of ``--p2p_read`` matrices is kept;
damaged NCCL ``Channel`` lines and non-numeric p2pBandwidthLatencyTest cells are refused.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import pytest
from conftest import SNAPSHOTS, as_recorded, topo_p2p_text

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import Waiver, load_thresholds
from pytest_nvlink.core.values import value_problems
from pytest_nvlink.judges import bandwidth, baseline, collectives, nvlink, platform, rack
from pytest_nvlink.judges.baseline_match import Baseline
from pytest_nvlink.judges.context import Context
from pytest_nvlink.judges.groups import PairSet, combine
from pytest_nvlink.model import CollectiveMeasurement, Node, P2PMeasurement
from pytest_nvlink.sources.evidence.load import EvidenceConflict, load_evidence
from pytest_nvlink.sources.evidence.parsers import nccl_log, p2p_latency
from pytest_nvlink.sources.evidence.parsers.common import ParseError
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome, failed, passed, unknown

MIB = 1 << 20


def _context(snapshot: str = "h100-8gpu-healthy", suite: str = "h100-8gpu") -> Context:
    loaded = load_suite(suite)
    return Context(load_snapshot(SNAPSHOTS / f"{snapshot}.json"), loaded, load_thresholds(loaded.thresholds_ref))


def _waive(ctx: Context, key: str) -> None:
    ctx.thresholds.values.pop(key, None)
    ctx.thresholds.waivers[key] = Waiver(key, "not here", Path("site.toml"))


# --- waivers: all of a check's keys, never any --------------------------------------------------------------


@pytest.mark.parametrize("waived_key", ["pcie.generation_min", "pcie.width_min"])
def test_one_waived_key_does_not_excuse_an_unset_one(waived_key: str) -> None:
    ctx = _context()
    other = next(k for k in ("pcie.generation_min", "pcie.width_min") if k != waived_key)
    _waive(ctx, waived_key)
    del ctx.thresholds.values[other]
    verdict = platform.pcie_link(ctx, 0)
    assert verdict.outcome is Outcome.FAIL, verdict.message
    assert f"neither sets nor waives {other}" in verdict.message
    missing = ctx.missing_threshold("pcie.generation_min", "pcie.width_min")
    assert missing.outcome is Outcome.FAIL and ("threshold_key", other) in missing.properties


def test_every_waived_key_makes_the_check_not_apply() -> None:
    ctx = _context()
    for key in ("pcie.generation_min", "pcie.width_min"):
        _waive(ctx, key)
    assert platform.pcie_link(ctx, 0).outcome is Outcome.NOT_APPLICABLE


def test_a_waived_error_limit_does_not_excuse_an_unset_one() -> None:
    ctx = _context()
    _waive(ctx, "nvlink_errors.recovery_total_max")
    del ctx.thresholds.values["nvlink_errors.replay_total_max"]
    verdict = nvlink.nvlink_errors(ctx, 0)
    assert verdict.outcome is Outcome.FAIL
    assert "neither sets nor waives nvlink_errors.replay_total_max" in verdict.message


# --- baseline: a fact now unknown is not unchanged -------------------------------------------------------------


def _baseline(ctx: Context, node: Node) -> Baseline:
    found = Baseline(node=node, file=Path("baseline.json"), saved_utc=None, schema_migrated=False)
    found.gpu_map = {gpu.index: gpu.index for gpu in ctx.node.gpus}
    return found


def test_a_gpu_fact_this_run_cannot_tell_is_not_unchanged() -> None:
    ctx = _context()
    then = copy.deepcopy(ctx.node)
    ctx.node.gpus[0].pcie_width_current = None  # the baseline recorded x16; this run could not read it
    verdict = baseline.gpu_facts(ctx, _baseline(ctx, then), 0)
    assert verdict.outcome is Outcome.UNKNOWN, verdict.message
    assert as_recorded(verdict, ctx).outcome is Outcome.FAIL
    assert "PCIe width 16 in the baseline, unknown now" in as_recorded(verdict, ctx).message
    assert baseline.gpu_facts(ctx, _baseline(ctx, copy.deepcopy(ctx.node)), 0).outcome is Outcome.PASS


def test_a_figure_this_run_lacks_is_not_within_tolerance() -> None:
    ctx = _context()
    figures = {k: P2PMeasurement(0, 1, k, 10.0 if k == "latency" else 400.0, "GB/s") for k in baseline.P2P_KINDS}
    old = Node(source="replay", gpus=ctx.node.gpus)
    old.measurements.p2p = list(figures.values())
    assert baseline.p2p_pair(ctx, _baseline(ctx, old), 0, 1, dict(figures)).outcome is Outcome.PASS
    verdict = baseline.p2p_pair(ctx, _baseline(ctx, old), 0, 1, {**figures, "unidirectional": None})
    assert as_recorded(verdict, ctx).outcome is Outcome.FAIL
    assert "unidirectional: not measured in this run" in verdict.message


# --- groups: passing pairs beside pairs without evidence ---------------------------------------------------------

GROUP = PairSet(((0, 1), (0, 2)), ordered=True, grouped=True, suite_file="suite.toml", unknown_is=Outcome.NO_EVIDENCE)


def test_a_group_with_a_passing_pair_and_a_pair_without_evidence_fails() -> None:
    """groups.py: "any other mixture fails (fail closed)": neither a pass nor "no evidence" for the group."""
    mixed = [((0, 1), passed("uni 400 GB/s", [])), ((0, 2), unknown("the figure", "no file has it", []))]
    verdict = combine(GROUP, mixed)
    assert verdict.outcome is Outcome.FAIL, verdict.message
    assert "mixed outcomes (1 pass, 1 no_evidence)" in verdict.message
    none = combine(GROUP, [(pair, unknown("the figure", "no file has it", [])) for pair in GROUP.pairs])
    assert none.outcome is Outcome.NO_EVIDENCE


def test_a_group_with_a_failing_pair_and_a_pair_without_evidence_fails() -> None:
    verdict = combine(GROUP, [((0, 1), failed("slow", [])), ((0, 2), unknown("the figure", "no file", []))])
    assert verdict.outcome is Outcome.FAIL and "1 of 2 pair(s) fail" in verdict.message


# --- evidence files that disagree ------------------------------------------------------------------------------


def test_a_p2p_status_conflict_between_two_files_stops_the_run(tmp_path: Path) -> None:
    ok, refused = tmp_path / "a.txt", tmp_path / "b.txt"
    ok.write_text(topo_p2p_text("r", 2), encoding="utf-8")
    refused.write_text(topo_p2p_text("r", 2, cell="NS"), encoding="utf-8")
    assert load_evidence([ok]).p2p_status(0, 1) is not None
    with pytest.raises(EvidenceConflict, match=r"P2P read GPU0->GPU1: .*a\.txt says 'ok' but .*b\.txt says"):
        load_evidence([ok, refused])


# --- impossible values ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["errors", "errors_run"])
def test_a_negative_error_counter_is_impossible_not_within_limits(scope: str) -> None:
    ctx = _context()
    ctx.node.error_window_s = 10.0
    for link in ctx.node.gpus[0].nvlinks or []:
        setattr(link, scope, {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0, "ecc_data": 0})
    links = ctx.node.gpus[0].nvlinks or []
    getattr(links[1], scope)["replay"] = -1
    verdict = nvlink.nvlink_errors(ctx, 0)
    assert verdict.outcome is Outcome.FAIL, verdict.message
    assert "impossible NVLink error counter value(s): link 1 replay -1" in verdict.message
    assert value_problems(ctx.node.gpus[0]) == [
        (f"nvlinks[1].{scope}.replay", "-1 is impossible here (must not be negative)")
    ]


def test_an_error_rate_over_a_window_of_no_length_is_not_judged_as_a_rate() -> None:
    ctx = _context()
    ctx.node.error_window_s = 0.0
    for link in ctx.node.gpus[0].nvlinks or []:
        link.errors_run = {"replay": 0, "recovery": 0, "crc_flit": 5, "crc_data": 0, "ecc_data": 0}
    verdict = nvlink.nvlink_errors(ctx, 0)
    assert verdict.outcome is Outcome.UNKNOWN, verdict.message
    assert "the length of the measurement window was not recorded" in verdict.message
    assert as_recorded(verdict, ctx).outcome is Outcome.FAIL


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("kind", ["unidirectional", "latency"])
def test_a_figure_that_is_not_a_finite_number_never_passes(kind: str, value: float) -> None:
    ctx = _context()
    for gpu in ctx.node.gpus:
        gpu.nvlinks = None  # no link capacity to refuse an infinite bandwidth with: the bound alone decides
    figure = P2PMeasurement(0, 1, kind, value, "us" if kind == "latency" else "GB/s")
    verdict = bandwidth.p2p_figure(ctx, 0, 1, kind, figure)
    assert verdict.outcome is not Outcome.PASS, verdict.message
    assert value_problems(figure) == [("value", f"{value} is not a finite number")]


def test_a_group_with_one_infinite_figure_never_passes_quickly() -> None:
    """The group's quick pass verifies only its worst pair: it must not take an infinite figure on trust."""
    ctx = _context()
    for gpu in ctx.node.gpus:
        gpu.nvlinks = None

    def figure(src: int, dst: int, kind: str = "unidirectional") -> P2PMeasurement:
        return P2PMeasurement(src, dst, kind, math.inf if dst == 3 else 400.0, "GB/s")

    group = PairSet(tuple((0, dst) for dst in range(1, 8)), ordered=True, grouped=True)
    verdict = group.verdict(
        lambda s, d: bandwidth.p2p_figure(ctx, s, d, "unidirectional", figure(s, d)),
        lambda pairs: bandwidth.passing_figures(ctx, pairs, "unidirectional", figure),
    )
    assert verdict.outcome is Outcome.FAIL, verdict.message
    assert "GPU 0 -> GPU 3: unidirectional bandwidth inf GB/s is not a possible figure" in verdict.message


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_a_busbw_that_is_not_a_possible_figure_never_passes(value: float) -> None:
    ctx = _context()
    size = ctx.thresholds.value("collectives.all_reduce.size_mib") * MIB
    odd = CollectiveMeasurement("all_reduce", size, 8, 1.0, value, value, correct=True, rank_gpus=list(range(8)))
    verdict = collectives.collective(ctx, "all_reduce", [odd])
    assert verdict.outcome is Outcome.FAIL, verdict.message
    assert "is not a possible figure" in verdict.message


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_link_speed_that_is_not_a_finite_number_never_passes(value: float) -> None:
    ctx = _context()
    (ctx.node.gpus[0].nvlinks or [])[3].speed_gbps = value
    verdict = nvlink.nvlink_speed(ctx, 0)
    assert verdict.outcome is Outcome.FAIL, verdict.message
    assert "link(s) 3 run at" in verdict.message


# --- racks: as many hosts as trays -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rack_node() -> Node:
    return load_snapshot(SNAPSHOTS / "gb200-nvl72-healthy.json")


def _rack_context(node: Node) -> Context:
    suite = load_suite("gb200-nvl72")
    return Context(copy.deepcopy(node), suite, load_thresholds(suite.thresholds_ref))


def test_a_rack_with_more_hosts_than_trays_fails(rack_node: Node) -> None:
    ctx = _rack_context(rack_node)
    assert rack.rack_trays(ctx).outcome is Outcome.PASS
    ctx.node.gpus[5] = dataclasses.replace(ctx.node.gpus[5], host="stray-host")  # tray 1 gains a 19th host
    verdict = rack.rack_trays(ctx)
    assert verdict.outcome is Outcome.FAIL, verdict.message
    assert "the rack's GPUs name 19 hosts, expected 18" in verdict.message


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_send_recv_figure_that_is_not_a_finite_number_never_passes(rack_node: Node, value: float) -> None:
    ctx = _rack_context(rack_node)
    assert rack.rack_sendrecv(ctx, 0).outcome is Outcome.PASS
    per_host = ctx.suite.gpus_per_host or 1
    crossing = next(
        m for m in ctx.node.measurements.p2p if m.kind == "sendrecv" and m.src // per_host == 0 and m.dst >= per_host
    )
    crossing.value = value
    verdict = rack.rack_sendrecv(ctx, 0)
    assert verdict.outcome is Outcome.FAIL, verdict.message


def test_a_rack_with_fewer_hosts_than_trays_fails(rack_node: Node) -> None:
    ctx = _rack_context(rack_node)
    first = ctx.node.gpus[0].host
    for gpu in ctx.node.gpus[4:8]:  # tray 1's GPUs name tray 0's host
        gpu.host = first
    verdict = rack.rack_trays(ctx)
    assert verdict.outcome is Outcome.FAIL and "name 17 hosts, expected 18" in verdict.message


# --- collectives: only the threshold's size counts ---------------------------------------------------------------


@pytest.mark.parametrize("factor", [2, 0.5])
def test_a_collective_at_another_size_than_the_thresholds_does_not_count(factor: float) -> None:
    ctx = _context()
    size = ctx.thresholds.value("collectives.all_reduce.size_mib") * MIB
    fast = CollectiveMeasurement("all_reduce", int(size * factor), 8, 1.0, 900.0, 900.0, correct=True)
    assert collectives.pick_collective("all_reduce", size // MIB, [fast]) is None
    verdict = collectives.collective(ctx, "all_reduce", [fast])
    assert verdict.outcome is Outcome.UNKNOWN, verdict.message
    assert f"no all_reduce result at {size // MIB} MiB" in verdict.message
    assert as_recorded(verdict, ctx).outcome is Outcome.FAIL


# --- parsers: direction, damage and non-numbers --------------------------------------------------------------------

READS = (
    "Device: 0, NVIDIA H100, pciBusID: 3b, pciDeviceID: 0, pciDomainID:0\n"
    "Device: 1, NVIDIA H100, pciBusID: d8, pciDeviceID: 0, pciDomainID:0\n"
    "Unidirectional P2P=Enabled Bandwidth {variant}Matrix (GB/s)\n"
    "   D\\D     0      1\n"
    "     0 1500.00 {zero_one}\n"
    "     1 {one_zero} 1500.00\n"
)


def _p2p_figures(
    tmp_path: Path, variant: str, zero_one: str = "301.00", one_zero: str = "302.00"
) -> dict[tuple[int, int], P2PMeasurement]:
    path = tmp_path / f"p2p{len(variant)}.txt"
    path.write_text(READS.format(variant=variant, zero_one=zero_one, one_zero=one_zero), encoding="utf-8")
    node = load_evidence([path])
    return {(m.src, m.dst): m for m in node.measurements.p2p if m.kind == "unidirectional"}


def test_p2p_read_matrices_flow_column_to_row(tmp_path: Path) -> None:
    writes = _p2p_figures(tmp_path, "")
    assert (writes[(0, 1)].value, writes[(1, 0)].value) == (301.0, 302.0)  # the row GPU writes into the column GPU
    reads = _p2p_figures(tmp_path, "(P2P Reads) ")
    assert (reads[(1, 0)].value, reads[(0, 1)].value) == (301.0, 302.0)  # the row GPU reads from the column GPU


@pytest.mark.parametrize("cell", ["inf", "nan", "-inf", "NaN", "INF"])
def test_p2p_cells_that_are_not_numbers_are_refused_as_figures(tmp_path: Path, cell: str) -> None:
    # A printed NaN or infinity stops the run naming its line (issue 24: never a figure, never "no value").
    text = READS.format(variant="", zero_one=cell, one_zero="302.00")
    with pytest.raises(ParseError, match=r"line 5: a matrix cell is .*not a number"):
        p2p_latency.parse(text)


NCCL_HEAD = "h:1:2 [0] NCCL INFO NCCL version 2.21.5\n"


@pytest.mark.parametrize(
    "damaged",
    [
        "Channel 00/0 : 0[0] -> 1 via P2P/CUMEM",  # a device number lost
        "Channel 00/0 : 0[0] -> [1] via P2P/CUMEM",  # a rank lost
        "Channel 0x/0 : 0[0] -> 1[1] via P2P/CUMEM",  # a channel number garbled
        "Channel 00/0 : 0[0] -> 1[1] via",  # cut after "via"
        "Channel 00/0 : 0[0] -> 1[1]",  # cut before "via"
        "Channel 00/0 : 0[0] -> 1[1] vi SHM/direct/direct",  # "via" garbled
    ],
)
def test_a_damaged_nccl_channel_line_is_refused_naming_its_line(damaged: str) -> None:
    good = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"
    assert [c.transport for c in nccl_log.parse(NCCL_HEAD + good).channels] == ["SHM"]
    with pytest.raises(ParseError, match="Channel NN/N") as info:
        nccl_log.parse(NCCL_HEAD + good + f"h:1:2 [0] NCCL INFO {damaged}\n")
    assert info.value.line_no == 3


def test_nccl_ring_listings_are_not_transport_lines() -> None:
    listing = "h:1:2 [0] NCCL INFO Channel 00/02 :    0   1\n"
    assert nccl_log.parse(NCCL_HEAD + listing).channels == ()
