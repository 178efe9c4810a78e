"""Every shipped threshold's boundary, judged by the real judges: a node exactly at a bound passes, one step
beyond it fails.

The table is generated from the shipped threshold files (each resolved through its ``extends`` chain) and
from every key the required-keys table and the threshold schema know. A step is one ulp for a figure
(``math.nextafter``), one for a count or a generation, one byte for a size or a share of copied bytes, one
ulp of the measurement window for an error rate. A key that is no bound is listed with the reason; a key
that is neither has no case and fails :func:`test_every_key_has_a_boundary_case_or_a_reason`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import SNAPSHOTS, as_recorded

from pytest_nvlink.config.required_keys import REQUIREMENTS
from pytest_nvlink.config.shipped import COLLECTIVE_OPS, shipped_names
from pytest_nvlink.config.suites import Suite, load_suite
from pytest_nvlink.config.thresholds import THRESHOLD_SCHEMA, Threshold, Thresholds, load_thresholds
from pytest_nvlink.judges import bandwidth, baseline, collectives, host_link, nvlink, platform, rack
from pytest_nvlink.judges.baseline_match import Baseline
from pytest_nvlink.judges.context import Context
from pytest_nvlink.judges.groups import PairSet
from pytest_nvlink.model import (
    ALL_ERROR_COUNTER_NAMES,
    ERROR_COUNTER_NAMES,
    NVLINK5_ERROR_COUNTER_NAMES,
    CollectiveMeasurement,
    Node,
    NvLinkInfo,
    P2PMeasurement,
)
from pytest_nvlink.model.host_link import HOST_LINK_DIRECTIONS, C2CInfo, C2CLink, HostLinkMeasurement
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome, Verdict

MIB = 1 << 20
COPIED = 10**9  # bytes of a proof-of-path copy: a share of it moves in steps of one byte

# Keys that bound nothing a node can sit on, and why.
NOT_BOUNDS: dict[str, str] = {
    "sku.name": "a label shown in reports; no verdict compares with it",
    "fabric.required": "a switch (the fabric check applies or not), not a figure with a boundary",
    "fabric.clique_required": "a switch (the rack clique check applies or not), not a figure with a boundary",
    "xid.fail": "a list of Xid numbers (membership, tests/test_xid.py), not a figure with a boundary",
    "inventory.mig": 'a mode, "off" or "on" (tests/test_mig_checks.py), not a figure with a boundary',
    "c2c.required": "a switch (the NVLink-C2C check applies or not), not a figure with a boundary",
    **{
        f"collectives.{op}.assumes_nvls": "chooses the likely cause a failing collective names; it moves no verdict"
        for op in COLLECTIVE_OPS
    },
}


@cache
def _snapshot(name: str) -> Node:
    return load_snapshot(SNAPSHOTS / f"{name}.json")


@cache
def _suite(name: str) -> Suite:
    return load_suite(name)


def _context(thresholds: Thresholds, *, rack_node: bool = False) -> Context:
    """The shipped healthy node, copied, judged against ``thresholds`` (an 8-GPU HGX, or the NVL72 rack).

    The HGX node's links are set to the threshold set's SKU (active count, version, speed), so that no
    figure at a P2P floor reads as beyond what the links can carry.
    """
    if rack_node:
        return Context(copy.deepcopy(_snapshot("gb200-nvl72-healthy")), _suite("gb200-nvl72"), thresholds)
    node = copy.deepcopy(_snapshot("h100-8gpu-healthy"))
    links = thresholds.value("nvlink.active_links")
    if links:
        for gpu in node.gpus:
            gpu.nvlinks = [_link(thresholds, number) for number in range(links)]
    return Context(node, _suite("h100-8gpu"), thresholds)


def _link(thresholds: Thresholds, number: int) -> NvLinkInfo:
    # NVLink 5 links report the NVLink5 counter set, older ones the DL set (model.error_counter_names_of).
    names = NVLINK5_ERROR_COUNTER_NAMES if thresholds.value("nvlink.version", 4) >= 5 else ERROR_COUNTER_NAMES
    zero = dict.fromkeys(names, 0)
    return NvLinkInfo(
        number,
        active=True,
        version=thresholds.value("nvlink.version", 4),
        speed_gbps=thresholds.value("nvlink.link_speed_min_gbps", 26.5),
        remote_type="switch",
        errors=dict(zero),
        errors_run=dict(zero),
    )


def _recorded(verdict: Verdict, ctx: Context) -> Outcome:
    outcome: Outcome = as_recorded(verdict, ctx).outcome
    return outcome  # an UNKNOWN counts as the run would count it (here: a failure)


# --- probes: one node at the given setting, judged ------------------------------------------------------------

Probe = Callable[[Thresholds, str, Any], Outcome]  # the setting: a figure, a count, ...


def _active_links(thresholds: Thresholds, key: str, count: float) -> Outcome:
    ctx = _context(thresholds)
    gpu = ctx.node.gpus[0]
    gpu.nvlinks = [dataclasses.replace(_link(thresholds, n), active=n < count) for n in range(int(count) + 2)]
    return _recorded(nvlink.nvlink_active_links(ctx, 0), ctx)


def _link_version(thresholds: Thresholds, key: str, version: float) -> Outcome:
    ctx = _context(thresholds)
    for link in ctx.node.gpus[0].nvlinks or []:
        link.version = int(version)
    return _recorded(nvlink.nvlink_version(ctx, 0), ctx)


def _link_speed(thresholds: Thresholds, key: str, speed: float) -> Outcome:
    ctx = _context(thresholds)
    for link in ctx.node.gpus[0].nvlinks or []:
        link.speed_gbps = speed
    return _recorded(nvlink.nvlink_speed(ctx, 0), ctx)


def _pcie(field_name: str, **others: str) -> Probe:
    """The PCIe check with ``field_name`` at the setting and the other PCIe facts at their own minimums."""

    def probe(thresholds: Thresholds, key: str, value: float) -> Outcome:
        ctx = _context(thresholds)
        gpu = ctx.node.gpus[0]
        for name, other_key in others.items():
            minimum = thresholds.value(other_key)
            if minimum is not None:
                setattr(gpu, name, minimum)
        setattr(gpu, field_name, int(value))
        return _recorded(platform.pcie_link(ctx, 0), ctx)

    return probe


def _figure(kind: str, *, grouped: bool) -> Probe:
    """A P2P figure of ``kind`` at the setting: one ordered pair, or every pair of GPU 0 as one group item
    (the group's quick pass, ``passing_figures``, compares on its own)."""

    def probe(thresholds: Thresholds, key: str, value: float) -> Outcome:
        ctx = _context(thresholds)
        unit = "us" if kind == "latency" else "GB/s"

        def measured(src: int, dst: int, asked: str = kind) -> P2PMeasurement:
            return P2PMeasurement(
                src, dst, asked, value, unit, bidirectional_sum=True if asked == "bidirectional" else None
            )

        def one(src: int, dst: int) -> Verdict:
            return bandwidth.p2p_figure(ctx, src, dst, kind, measured(src, dst))

        pairs = ((0, 1), *((0, dst) for dst in range(2, 8))) if grouped else ((0, 1),)
        items = PairSet(pairs, ordered=True, grouped=grouped)
        verdict = items.verdict(one, lambda group: bandwidth.passing_figures(ctx, group, kind, measured))
        return _recorded(verdict, ctx)

    return probe


def _proof(*, grouped: bool) -> Probe:
    """A copy of COPIED bytes of which ``share * COPIED`` crossed NVLink, judged by the proof of path."""

    def probe(thresholds: Thresholds, key: str, share: float) -> Outcome:
        ctx = _context(thresholds)
        nvlink_bytes = round(share * COPIED)

        def measured(src: int, dst: int, kind: str = "unidirectional") -> P2PMeasurement:
            floor = thresholds.value("p2p.unidirectional_min_gbps", 1.0)
            return P2PMeasurement(src, dst, kind, floor, "GB/s", bytes_copied=COPIED, nvlink_bytes=nvlink_bytes)

        pairs = ((0, 1), *((0, dst) for dst in range(2, 8))) if grouped else ((0, 1),)
        items = PairSet(pairs, ordered=True, grouped=grouped)
        verdict = items.verdict(
            lambda s, d: bandwidth.path_proof(ctx, s, d, measured(s, d)),
            lambda group: bandwidth.passing_proofs(ctx, group, measured),
        )
        return _recorded(verdict, ctx)

    return probe


def _sendrecv(thresholds: Thresholds, key: str, value: float) -> Outcome:
    """Every send/recv pair of the rack at the floor, one pair of tray 0 with another tray at the setting."""
    ctx = _context(thresholds, rack_node=True)
    pairs = [m for m in ctx.node.measurements.p2p if m.kind == "sendrecv"]
    for m in pairs:
        m.value = thresholds.value(key)
    per_host = ctx.suite.gpus_per_host or 1
    crossing = next(m for m in pairs if m.src // per_host == 0 and m.dst // per_host != 0)
    crossing.value = value
    return _recorded(rack.rack_sendrecv(ctx, 0), ctx)


def _error_counter(scope: str) -> Probe:
    """GPU 0's counters all zero but one: ``count`` of it on link 0 (total since driver load, or during the run)."""

    def probe(thresholds: Thresholds, key: str, count: float) -> Outcome:
        ctx = _context(thresholds)
        ctx.node.error_window_s = 10.0
        counter = _counter_of(key)
        _read_the_set_of(ctx, counter)
        link = (ctx.node.gpus[0].nvlinks or [])[0]
        counters = link.errors if scope == "total" else link.errors_run
        assert counters is not None
        counters[counter] = int(count)
        return _recorded(nvlink.nvlink_errors(ctx, 0), ctx)

    return probe


RATE_COUNT = 1000  # errors during the window of a rate probe: the rate moves by the window's ulp


def _error_rate(thresholds: Thresholds, key: str, window_s: float) -> Outcome:
    """RATE_COUNT errors of the key's counter on link 0 during a measurement window of ``window_s`` seconds."""
    ctx = _context(thresholds)
    ctx.node.error_window_s = window_s
    _read_the_set_of(ctx, _counter_of(key))
    runs = (ctx.node.gpus[0].nvlinks or [])[0].errors_run
    assert runs is not None
    runs[_counter_of(key)] = RATE_COUNT
    return _recorded(nvlink.nvlink_errors(ctx, 0), ctx)


def _read_the_set_of(ctx: Context, counter: str) -> None:
    """Every link reads the counter set ``counter`` belongs to, all zero: a file of NVLink 5 GPUs keeps the DL
    keys for sources that read the DL set, and each set is judged against its own keys."""
    names = NVLINK5_ERROR_COUNTER_NAMES if counter in NVLINK5_ERROR_COUNTER_NAMES else ERROR_COUNTER_NAMES
    for gpu in ctx.node.gpus:
        for link in gpu.nvlinks or []:
            link.errors, link.errors_run = dict.fromkeys(names, 0), dict.fromkeys(names, 0)


def _counter_of(key: str) -> str:
    # The longest name that fits: "link_recovery_failed" is not "link_recovery".
    return max((c for c in ALL_ERROR_COUNTER_NAMES if key.startswith(f"nvlink_errors.{c}_")), key=len)


def _op_of(key: str) -> str:
    return key.split(".")[1]


def _busbw(thresholds: Thresholds, key: str, value: float) -> Outcome:
    ctx = _context(thresholds)
    op = _op_of(key)
    size = thresholds.value(f"collectives.{op}.size_mib") * MIB
    return _recorded(collectives.collective(ctx, op, [_collective(ctx, op, size, value)]), ctx)


def _size(thresholds: Thresholds, key: str, size_bytes: float) -> Outcome:
    """A passing figure (the floor) recorded at ``size_bytes``: only the threshold's size counts."""
    ctx = _context(thresholds)
    op = _op_of(key)
    floor = thresholds.value(f"collectives.{op}.busbw_min_gbps")
    return _recorded(collectives.collective(ctx, op, [_collective(ctx, op, int(size_bytes), floor)]), ctx)


def _collective(ctx: Context, op: str, size_bytes: int, busbw: float) -> CollectiveMeasurement:
    count = ctx.suite.gpu_count
    return CollectiveMeasurement(
        op, size_bytes, count, 1000.0, busbw, busbw, correct=True, rank_gpus=list(range(count))
    )


def _baseline_of(ctx: Context, node: Node) -> Baseline:
    found = Baseline(node=node, file=Path("baseline.json"), saved_utc=None, schema_migrated=False)
    found.gpu_map = {gpu.index: gpu.index for gpu in ctx.node.gpus}
    return found


def _p2p_change(kind: str) -> Probe:
    """This run's ``kind`` figure of GPU 0 -> GPU 1 against the baseline's (the other kinds unchanged)."""

    def probe(thresholds: Thresholds, key: str, figures_then_now: tuple[float, float]) -> Outcome:
        ctx = _context(thresholds)
        base, now = figures_then_now
        unit = {"latency": "us"}.get(kind, "GB/s")
        then = {k: P2PMeasurement(0, 1, k, base, "us" if k == "latency" else "GB/s") for k in baseline.P2P_KINDS}
        old = Node(source="replay", gpus=ctx.node.gpus)
        old.measurements.p2p = list(then.values())
        figures: dict[str, P2PMeasurement | None] = {**then, kind: P2PMeasurement(0, 1, kind, now, unit)}
        return _recorded(baseline.p2p_pair(ctx, _baseline_of(ctx, old), 0, 1, figures), ctx)

    return probe


def _collective_change(thresholds: Thresholds, key: str, figures_then_now: tuple[float, float]) -> Outcome:
    ctx = _context(thresholds)
    base, now = figures_then_now
    size = int(thresholds.value("collectives.all_reduce.size_mib", 1024)) * MIB  # the judge's default size
    old = Node(source="replay", gpus=ctx.node.gpus)
    old.measurements.collectives = [_collective(ctx, "all_reduce", size, base)]
    results = [_collective(ctx, "all_reduce", size, now)]
    return _recorded(baseline.collective(ctx, _baseline_of(ctx, old), "all_reduce", results), ctx)


def _host_link_floor(thresholds: Thresholds, key: str, value: float) -> Outcome:
    """Every GPU's figures at their floors, GPU 0's directions held to ``key`` at the setting (the spread
    rule cannot fail it: all the others sit at the same floor)."""
    ctx = _context(thresholds)
    figures = []
    for gpu in ctx.node.gpus:
        for direction in HOST_LINK_DIRECTIONS:
            floor_key = host_link.DIRECTION_KEYS[direction]
            figure = value if gpu.index == 0 and floor_key == key else thresholds.value(floor_key)
            figures.append(HostLinkMeasurement(gpu.index, direction, figure, host_numa_node=gpu.numa_node))
    return _recorded(host_link.host_link(ctx, 0, figures), ctx)


HOST_LINK_MEDIAN = 1000.0  # every other GPU's figure: well above any shipped floor, so only the spread decides


def _host_link_spread(thresholds: Thresholds, key: str, value: float) -> Outcome:
    """Seven GPUs at HOST_LINK_MEDIAN, GPU 0 at ``value`` in every direction; a set without floors (the shared
    nvswitch-common) is judged with floors of 1 GB/s laid over it."""
    thresholds = copy.copy(thresholds)
    thresholds.values = dict(thresholds.values)
    for floor_key in set(host_link.DIRECTION_KEYS.values()) - set(thresholds.values):
        thresholds.values[floor_key] = Threshold(floor_key, 1.0, thresholds.files[-1])
    ctx = _context(thresholds)
    figures = [
        HostLinkMeasurement(gpu.index, d, value if gpu.index == 0 else HOST_LINK_MEDIAN, host_numa_node=gpu.numa_node)
        for gpu in ctx.node.gpus
        for d in HOST_LINK_DIRECTIONS
    ]
    return _recorded(host_link.host_link(ctx, 0, figures), ctx)


def _spread_steps(fraction: float) -> tuple[float, list[float]]:
    """The figure exactly ``fraction`` below HOST_LINK_MEDIAN (as the judge computes it), and one ulp lower."""
    at = HOST_LINK_MEDIAN * (1 - fraction)
    return at, [math.nextafter(at, -math.inf)]


def _c2c_speed(thresholds: Thresholds, key: str, speed: float) -> Outcome:
    """GPU 0 with ten active NVLink-C2C links, link 3 at the setting and the others at the floor."""
    ctx = _context(thresholds)
    floor = thresholds.value(key)
    links = [C2CLink(n, True, speed if n == 3 else floor) for n in range(10)]
    ctx.node.gpus[0].c2c = C2CInfo(link_count=10, links=links)
    return _recorded(host_link.c2c_link(ctx, 0), ctx)


# --- steps: the setting exactly at the bound, and the settings one step beyond it ------------------------------

Steps = Callable[[Any], tuple[Any, list[Any]]]


def _ulp_below(value: float) -> tuple[float, list[float]]:
    return value, [math.nextafter(value, -math.inf)]


def _ulp_above(value: float) -> tuple[float, list[float]]:
    return value, [math.nextafter(value, math.inf)]


def _one_below(value: float) -> tuple[float, list[float]]:
    return value, [value - 1]


def _one_above(value: float) -> tuple[float, list[float]]:
    return value, [value + 1]


def _one_either_side(value: float) -> tuple[float, list[float]]:
    return value, [v for v in (value - 1, value + 1) if v >= 0]


def _byte_either_side(size_mib: float) -> tuple[float, list[float]]:
    at = size_mib * MIB
    return at, [at - 1, at + 1, at + MIB]


def _share_step(direction: int) -> Steps:
    """A share of COPIED bytes exactly at the bound, and one byte beyond it."""

    def steps(share: float) -> tuple[float, list[float]]:
        at = round(share * COPIED)
        assert at / COPIED == share, f"{share} is not a whole number of bytes of {COPIED}"
        return share, [(at + direction) / COPIED]

    return steps


def _window_steps(limit: float) -> tuple[float, list[float]]:
    """The window over which RATE_COUNT errors are exactly ``limit`` per second, and one ulp shorter."""
    window = RATE_COUNT / limit
    assert RATE_COUNT / window == limit, f"no window gives exactly {limit}/s for {RATE_COUNT} errors"
    shorter = math.nextafter(window, 0.0)
    assert RATE_COUNT / shorter > limit
    return window, [shorter]


def _change_steps(worse: int) -> Steps:
    """(baseline figure, this run's figure) whose change, as baseline.py documents it ((now - then) / then
    * 100), is the tolerance in the worse direction (``worse`` -1: lower, +1: higher): exactly, or where no
    float gives exactly it (7 % of 100), the last figure at or within it; and this run's figure one ulp further,
    the first beyond it."""

    def steps(percent: float) -> tuple[tuple[float, float], list[tuple[float, float]]]:
        base = 100.0

        def change(now: float) -> float:
            return worse * (now - base) / base * 100.0

        at = next(
            n
            for n in _ulps_around(base * (1 + worse * percent / 100))
            if change(n) <= percent < change(math.nextafter(n, worse * math.inf))
        )
        assert percent - change(at) < 1e-12
        return (base, at), [(base, math.nextafter(at, worse * math.inf))]

    return steps


def _ulps_around(value: float, reach: int = 64) -> list[float]:
    below, above = [value], [value]
    for _ in range(reach):
        below.append(math.nextafter(below[-1], -math.inf))
        above.append(math.nextafter(above[-1], math.inf))
    return sorted(set(below + above), key=lambda v: abs(v - value))


@dataclass(frozen=True)
class Bound:
    """How a key bounds a node: the probes that judge a node at a setting, and the steps around the value."""

    probes: tuple[tuple[str, Probe], ...]
    steps: Steps
    rack: bool = False  # judged on the rack node: only threshold sets of a rack


def _one(name: str, probe: Probe, steps: Steps, *, rack_only: bool = False) -> Bound:
    return Bound(((name, probe),), steps, rack_only)


BOUNDS: tuple[tuple[str, Bound], ...] = (
    (r"nvlink\.active_links", _one("active links", _active_links, _one_either_side)),
    (r"nvlink\.version", _one("link version", _link_version, _one_either_side)),
    (r"nvlink\.link_speed_min_gbps", _one("link speed", _link_speed, _ulp_below)),
    (
        r"pcie\.generation_min",
        Bound(
            (
                (
                    "under load",
                    _pcie("pcie_gen_loaded", pcie_gen_max="pcie.generation_min", pcie_width_current="pcie.width_min"),
                ),
                (
                    "capability",
                    _pcie("pcie_gen_max", pcie_gen_loaded="pcie.generation_min", pcie_width_current="pcie.width_min"),
                ),
            ),
            _one_below,
        ),
    ),
    (
        r"pcie\.width_min",
        _one(
            "trained width",
            _pcie("pcie_width_current", pcie_gen_loaded="pcie.generation_min", pcie_gen_max="pcie.generation_min"),
            _one_below,
        ),
    ),
    *(
        (
            rf"p2p\.{kind}_min_gbps",
            Bound((("one pair", _figure(kind, grouped=False)), ("group", _figure(kind, grouped=True))), _ulp_below),
        )
        for kind in ("unidirectional", "bidirectional")
    ),
    (
        r"p2p\.latency_max_us",
        Bound(
            (("one pair", _figure("latency", grouped=False)), ("group", _figure("latency", grouped=True))), _ulp_above
        ),
    ),
    (
        r"p2p\.nvlink_counter_fraction_min",
        Bound((("one pair", _proof(grouped=False)), ("group", _proof(grouped=True))), _share_step(-1)),
    ),
    (
        r"p2p\.nvlink_counter_fraction_max",
        Bound((("one pair", _proof(grouped=False)), ("group", _proof(grouped=True))), _share_step(+1)),
    ),
    (r"host_link\.(h2d|d2h|bidir)_min_gbps", _one("host-link figure", _host_link_floor, _ulp_below)),
    (r"host_link\.below_median_max_fraction", _one("below the node's median", _host_link_spread, _spread_steps)),
    (r"c2c\.link_max_bw_min_gbps", _one("C2C link bandwidth", _c2c_speed, _ulp_below)),
    (r"p2p\.sendrecv_min_gbps", _one("send/recv pair", _sendrecv, _ulp_below, rack_only=True)),
    (r"nvlink_errors\.\w+_total_max", _one("total", _error_counter("total"), _one_above)),
    (r"nvlink_errors\.\w+_run_max", _one("during the run", _error_counter("run"), _one_above)),
    (r"nvlink_errors\.\w+_per_s_max", _one("rate during the run", _error_rate, _window_steps)),
    (r"collectives\.\w+\.busbw_min_gbps", _one("busbw", _busbw, _ulp_below)),
    (r"collectives\.\w+\.size_mib", _one("size judged", _size, _byte_either_side)),
    (
        r"baseline\.p2p_drop_max_pct",
        Bound(
            (("unidirectional", _p2p_change("unidirectional")), ("bidirectional", _p2p_change("bidirectional"))),
            _change_steps(-1),
        ),
    ),
    (r"baseline\.latency_rise_max_pct", _one("latency", _p2p_change("latency"), _change_steps(+1))),
    (r"baseline\.collective_drop_max_pct", _one("all_reduce", _collective_change, _change_steps(-1))),
)


def bound_of(key: str) -> Bound | None:
    return next((bound for pattern, bound in BOUNDS if re.fullmatch(pattern, key)), None)


def _required_table_keys() -> set[str]:
    """The required-keys table's keys, ``{op}`` expanded to every collective a shipped suite measures."""
    ops = {op for name in shipped_names("suites") for op in load_suite(name).measure.collectives}
    return {key.format(op=op) for requirement in REQUIREMENTS for key in requirement.keys for op in sorted(ops)}


def _shipped_sets() -> dict[str, Thresholds]:
    return {name: load_thresholds(name) for name in shipped_names("thresholds")}


def known_keys() -> set[str]:
    """Every key a shipped file sets or waives, the required-keys table names, or the schema accepts."""
    found = set(THRESHOLD_SCHEMA) | _required_table_keys()
    for thresholds in _shipped_sets().values():
        found |= set(thresholds.values) | set(thresholds.waivers)
    return found


def test_every_key_has_a_boundary_case_or_a_reason() -> None:
    uncovered = sorted(key for key in known_keys() if bound_of(key) is None and key not in NOT_BOUNDS)
    assert not uncovered, f"threshold keys without a boundary case in BOUNDS or a reason in NOT_BOUNDS: {uncovered}"
    both = sorted(key for key in NOT_BOUNDS if bound_of(key) is not None)
    assert not both, f"keys both bounded and listed as no bound: {both}"


# Keys no shipped file sets (waived everywhere): judged at a value laid over the set that waives them.
OVERLAID_VALUE = 0


def _cases() -> list[tuple[str, str]]:
    cases: list[tuple[str, str]] = []
    sets = _shipped_sets()
    set_anywhere = {key for thresholds in sets.values() for key in thresholds.values}
    for name, thresholds in sets.items():
        is_rack = thresholds.get("p2p.sendrecv_min_gbps") is not None
        for key in sorted(thresholds.values):
            bound = bound_of(key)
            if bound is not None and (is_rack or not bound.rack):
                cases.append((name, key))
    for key in sorted(_required_table_keys() - set_anywhere):
        waived_in = next((name for name, t in sets.items() if t.waiver(key) is not None), None)
        assert waived_in is not None, f"{key}: required but neither set nor waived by any shipped file"
        cases.append((f"{waived_in}+{key}={OVERLAID_VALUE}", key))
    return cases


def _thresholds_of(case: str, key: str) -> Thresholds:
    name, _, overlay = case.partition("+")
    thresholds = load_thresholds(name)
    if overlay:
        waiver = thresholds.waivers.pop(key)
        thresholds.values[key] = Threshold(key, OVERLAID_VALUE, waiver.file)
    return thresholds


CASES = _cases()


@pytest.mark.parametrize(("case", "key"), CASES, ids=[f"{case}:{key}" for case, key in CASES])
def test_a_node_at_the_bound_passes_and_one_step_beyond_fails(case: str, key: str) -> None:
    thresholds = _thresholds_of(case, key)
    bound = bound_of(key)
    assert bound is not None
    at, beyond = bound.steps(thresholds.value(key))
    for name, probe in bound.probes:
        assert probe(thresholds, key, at) is Outcome.PASS, f"{key} ({name}) exactly at {at}"
        for step in beyond:
            assert probe(thresholds, key, step) is Outcome.FAIL, f"{key} ({name}) at {step}, beyond {at}"


def test_every_shipped_set_and_every_required_key_is_in_the_table() -> None:
    """The generated cases cover every shipped set, and every bounding key of the required-keys table."""
    assert {case.partition("+")[0] for case, _ in CASES} == set(shipped_names("thresholds"))
    judged = {key for _, key in CASES}
    assert sorted(_required_table_keys() - set(NOT_BOUNDS) - judged) == []
