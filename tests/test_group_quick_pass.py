"""A per-source item's quick pass gives the verdict judging every pair one by one gives.

Each pair check hands its group a quick pass (``passing_figures``, ``passing_proofs``,
``passing_paths``, ``passing_statuses``): the judge's own pass tests over the whole group in one loop.
It may say "every pair passes" only where each pair's judge passes with the same ranking figure;
otherwise the group is judged pair by pair. These tests run the shipped check functions twice on
damaged synthetic nodes, once as shipped and once with the quick pass ignored, and compare the
verdicts, their properties and the per-pair records.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synthetic_node import write_synthetic

from pytest_nvlink.checks import test_bandwidth as bandwidth_checks
from pytest_nvlink.checks import test_topology as topology_checks
from pytest_nvlink.config.suites import PairExpectation
from pytest_nvlink.judges import bandwidth, topology
from pytest_nvlink.judges.context import Context
from pytest_nvlink.judges.groups import AllPass, Pair, PairSet, pair_records
from pytest_nvlink.model import Node
from pytest_nvlink.model.figures import RecordedMeasurements
from pytest_nvlink.plugin.kit import CheckKit
from pytest_nvlink.plugin.pairs import pair_sets
from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.run import Run, RunOptions
from pytest_nvlink.verdict import Outcome, Verdict

COUNT = 12


class OneByOne(PairSet):
    """The same pairs, judged one by one whatever quick pass the check offers."""

    def verdict(self, judge: Callable[[int, int], Verdict], all_pass: AllPass | None = None) -> Verdict:
        return super().verdict(judge)


@pytest.fixture(scope="module")
def run_12(tmp_path_factory: pytest.TempPathFactory) -> Run:
    files = write_synthetic(tmp_path_factory.mktemp("twelve"), COUNT, pair_items="source")
    return build_run(RunOptions(suite=str(files.suite), replay=files.snapshot), lambda: pytest.fail("no probe"))


CHECKS: dict[str, Callable[..., None]] = {
    "unidirectional": bandwidth_checks.test_p2p_unidirectional,
    "bidirectional": bandwidth_checks.test_p2p_bidirectional,
    "latency": bandwidth_checks.test_p2p_latency,
    "path_proof": bandwidth_checks.test_p2p_path_proof,
    "p2p_status": topology_checks.test_p2p_status,
    "path": topology_checks.test_path,
}


def _judged(check: str, context: Context, pairs: PairSet) -> Verdict:
    judged: list[Verdict] = []
    CHECKS[check](CheckKit(context, RecordedMeasurements(context.node), judged.append), pairs)
    (verdict,) = judged
    return verdict


def _both_ways(context: Context, check: str) -> list[tuple[Verdict, Verdict]]:
    """(as shipped, one by one) for every source GPU's group of the check."""
    groups = pair_sets(context.suite, ordered=check != "path")
    assert all(group.grouped for group in groups)
    return [(_judged(check, context, group), _judged(check, context, OneByOne(*_fields(group)))) for group in groups]


def _fields(group: PairSet) -> tuple[Any, ...]:
    return tuple(getattr(group, f.name) for f in dataclasses.fields(group))


def _same(shipped: Verdict, one_by_one: Verdict) -> None:
    assert (shipped.outcome, shipped.message, shipped.properties) == (
        one_by_one.outcome,
        one_by_one.message,
        one_by_one.properties,
    )
    assert pair_records(shipped) == pair_records(one_by_one)


def _context(run: Run, node: Node, **suite_changes: Any) -> Context:
    suite = dataclasses.replace(run.suite, **suite_changes) if suite_changes else run.suite
    return Context(node, suite, run.thresholds)


@pytest.mark.parametrize("check", CHECKS)
def test_a_healthy_node_passes_every_group_at_once(run_12: Run, check: str) -> None:
    """The quick pass takes every group of a healthy node: the pairs are judged when the record reads them."""
    for shipped, one_by_one in _both_ways(_context(run_12, copy.deepcopy(run_12.node)), check):
        assert shipped.outcome is Outcome.PASS
        assert shipped.__dict__.get("_pairs") is None  # not judged yet: the quick pass decided
        _same(shipped, one_by_one)


def _figures(node: Node, src: int, dst: int, kind: str) -> list[Any]:
    return [m for m in node.measurements.p2p if (m.src, m.dst, m.kind) == (src, dst, kind)]


Change = Callable[[Node, int, int], None]


def _figure_set(kind: str, field: str, value: Any) -> Change:
    """Set ``field`` of the pair's ``kind`` figures; a callable value is worked out from the figure."""

    def change(node: Node, src: int, dst: int) -> None:
        for m in node.measurements.p2p:
            if (m.src, m.dst, m.kind) == (src, dst, kind):
                setattr(m, field, value(m) if callable(value) else value)

    return change


def _status_set(field: str, value: str | None) -> Change:
    def change(node: Node, src: int, dst: int) -> None:
        for status in node.p2p or []:
            if (status.src, status.dst) == (src, dst):
                setattr(status, field, value)

    return change


def _path_set(value: str) -> Change:
    def change(node: Node, src: int, dst: int) -> None:
        for path in node.paths or []:
            if {path.a, path.b} == {src, dst}:
                path.path = value

    return change


def _drop_figures(node: Node, src: int, dst: int) -> None:
    node.measurements.p2p = [m for m in node.measurements.p2p if (m.src, m.dst) != (src, dst)]


def _drop_status(node: Node, src: int, dst: int) -> None:
    node.p2p = [status for status in node.p2p or [] if (status.src, status.dst) != (src, dst)]


def _gpu_lost(node: Node, src: int, dst: int) -> None:
    gpu = node.gpu(dst)
    if gpu is not None:
        gpu.problem = "GPU is lost"


def _link_set(link: int, field: str, value: object) -> Change:
    def change(node: Node, src: int, dst: int) -> None:
        gpu = node.gpu(src if field == "active" else dst)
        if gpu is not None and gpu.nvlinks:
            setattr(gpu.nvlinks[link], field, value)

    return change


def _drop_gpu(node: Node, src: int, dst: int) -> None:
    node.gpus = [gpu for gpu in node.gpus if gpu.index != dst]


# One change to a healthy node: what a damaged, edited or partial source can hold.
CHANGES: list[Change] = [
    _figure_set("unidirectional", "value", 37.2),  # slow
    _figure_set("unidirectional", "value", 335.0),  # at the floor
    _figure_set("bidirectional", "value", 3000.0),  # beyond what the links carry
    _figure_set("bidirectional", "bidirectional_sum", False),  # per direction: counts twice
    _figure_set("latency", "value", 90.0),
    _figure_set("unidirectional", "value", None),
    _figure_set("latency", "value", math.nan),
    _figure_set("unidirectional", "nvlink_bytes", 1000),  # bytes bypassed NVLink
    _figure_set("unidirectional", "nvlink_bytes", lambda m: m.bytes_copied * 3),  # counted three times
    _figure_set("unidirectional", "nvlink_bytes", None),
    _figure_set("unidirectional", "bytes_copied", 0),
    _drop_figures,
    _status_set("nvlink", "not_supported"),
    _status_set("write", None),
    _drop_status,
    _path_set("SYS"),
    _path_set("NV12"),
    lambda node, src, dst: setattr(node, "paths", None),
    _gpu_lost,
    _drop_gpu,
    _link_set(0, "active", False),  # a link down on the source
    _link_set(1, "speed_gbps", None),  # a peer's link speed unknown
]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("change", range(len(CHANGES)))
def test_each_damage_reads_as_judged_pair_by_pair(run_12: Run, change: int, check: str) -> None:
    node = copy.deepcopy(run_12.node)
    CHANGES[change](node, 3, 8)
    for shipped, one_by_one in _both_ways(_context(run_12, node), check):
        _same(shipped, one_by_one)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.lists(
        st.tuples(st.sampled_from(range(len(CHANGES))), st.integers(0, COUNT - 1), st.integers(1, COUNT - 1)),
        min_size=1,
        max_size=3,
    ),
    check=st.sampled_from(sorted(CHECKS)),
)
def test_a_damaged_node_reads_as_judged_pair_by_pair(
    run_12: Run, changes: list[tuple[int, int, int]], check: str
) -> None:
    node = copy.deepcopy(run_12.node)
    for change, src, step in changes:
        CHANGES[change](node, src, (src + step) % COUNT)
    for shipped, one_by_one in _both_ways(_context(run_12, node), check):
        _same(shipped, one_by_one)


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize(
    "suite_change",
    [
        {"pairs": {(2, 7): PairExpectation(2, 7, "SYS")}},  # one pair expected on PCIe
        {"gpus_per_host": 4},  # three hosts: the pairs across them leave the groups
    ],
    ids=["a pcie pair", "hosts of 4"],
)
def test_a_suite_that_excuses_pairs_reads_as_judged_pair_by_pair(
    run_12: Run, check: str, suite_change: dict[str, Any]
) -> None:
    context = _context(run_12, copy.deepcopy(run_12.node), **suite_change)
    for shipped, one_by_one in _both_ways(context, check):
        _same(shipped, one_by_one)


@pytest.mark.parametrize(
    "key", ["p2p.unidirectional_min_gbps", "p2p.latency_max_us", "p2p.nvlink_counter_fraction_max"]
)
def test_a_missing_threshold_reads_as_judged_pair_by_pair(run_12: Run, key: str) -> None:
    values = {k: v for k, v in run_12.thresholds.values.items() if k != key}
    thresholds = dataclasses.replace(run_12.thresholds, values=values)
    context = Context(copy.deepcopy(run_12.node), run_12.suite, thresholds)
    for check in ("unidirectional", "latency", "path_proof"):
        for shipped, one_by_one in _both_ways(context, check):
            _same(shipped, one_by_one)


def test_a_quick_pass_the_worst_pairs_own_judge_disagrees_with_is_not_taken() -> None:
    """Defence in depth: the worst pair is judged at once, and a disagreement judges every pair."""
    group = PairSet(((0, 1), (0, 2)), ordered=True, grouped=True)
    calls: list[Pair] = []

    def judge(src: int, dst: int) -> Verdict:
        calls.append((src, dst))
        return Verdict(Outcome.FAIL, f"GPU {src} -> GPU {dst}: slow", [("measured", "1.0")])

    def says_all_pass(pairs: Sequence[Pair]) -> list[float | None]:
        return [5.0, 7.0]

    verdict = group.verdict(judge, says_all_pass)
    assert verdict.outcome is Outcome.FAIL and "2 of 2 pair(s) fail" in verdict.message
    assert calls == [(0, 1), (0, 1), (0, 2)]


def test_only_the_worst_pair_is_judged_until_the_record_reads_the_others(run_12: Run) -> None:
    context = _context(run_12, copy.deepcopy(run_12.node))
    provider = RecordedMeasurements(context.node)
    group = pair_sets(context.suite, ordered=True)[4]
    judged: list[Pair] = []

    def judge(src: int, dst: int) -> Verdict:
        judged.append((src, dst))
        return bandwidth.p2p_figure(context, src, dst, "latency", provider.p2p(src, dst, "latency"))

    verdict = group.verdict(judge, lambda pairs: bandwidth.passing_figures(context, pairs, "latency", provider.p2p))
    assert verdict.outcome is Outcome.PASS and len(judged) == 1
    records = pair_records(verdict)
    assert records is not None and len(records) == len(group.pairs) == len(judged) - 1
    assert {(r["src"], r["dst"]) for r in records} == set(group.pairs)
    assert topology.passing_paths(context, ()) == []


def test_a_quickly_passed_group_copies_and_pickles_with_every_pair(run_12: Run) -> None:
    """As a group judged pair by pair: a copy or a pickle holds every pair's verdict, not the judge behind them."""
    context = _context(run_12, copy.deepcopy(run_12.node))
    group = pair_sets(context.suite, ordered=True)[2]
    shipped = _judged("latency", context, group)
    one_by_one = _judged("latency", context, OneByOne(*_fields(group)))
    assert shipped.__dict__.get("_pairs") is None
    for copied in (copy.copy(shipped), copy.deepcopy(shipped), pickle.loads(pickle.dumps(shipped))):
        _same(copied, one_by_one)
        assert type(copied) is type(shipped)


def test_a_group_verdict_replaced_keeps_its_pairs_and_compares_with_them(run_12: Run) -> None:
    context = _context(run_12, copy.deepcopy(run_12.node))
    group = pair_sets(context.suite, ordered=True)[5]
    for shipped in (_judged("latency", context, group), _judged("latency", context, OneByOne(*_fields(group)))):
        replaced = dataclasses.replace(shipped, message="changed")
        assert replaced.message == "changed" and pair_records(replaced) == pair_records(shipped)
        assert len(pair_records(replaced) or []) == len(group.pairs)
        assert replaced != shipped and dataclasses.replace(shipped) == shipped
    other = _judged("latency", context, pair_sets(context.suite, ordered=True)[6])
    assert dataclasses.replace(other, message=shipped.message, properties=shipped.properties) != shipped
