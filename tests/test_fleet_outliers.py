"""fleet/outliers.py on its own: each node's worst figure, the rules' boundaries, the sentence.

Written against the mutants benchmarks/mutation.py found surviving (issue 28): every rule here has a
boundary case on both sides, and every figure family a case that shows which figure is the worst.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_nvlink.fleet.outliers import (
    Family,
    Figure,
    NodeFigure,
    Outlier,
    OutlierSettings,
    collect_families,
    find_outliers,
    judge_family,
    node_figures,
    size_text,
)

GIB = 1 << 30


def _pair(kind: str, value: float | None, src: int, dst: int, error: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "value": value, "src": src, "dst": dst, "error": error}


def _coll(op: str, size: int, busbw: float | None, error: str | None = None) -> dict[str, Any]:
    return {"op": op, "size_bytes": size, "busbw_gbps": busbw, "error": error}


def test_each_p2p_family_takes_the_node_s_worst_pair() -> None:
    measurements = {
        "p2p": [
            _pair("unidirectional", 300.0, 0, 1),
            _pair("unidirectional", 250.0, 1, 2),
            _pair("unidirectional", 250.0, 2, 3),  # as bad as 1 -> 2: the first found is named
            _pair("unidirectional", 10.0, 3, 0, error="copy failed"),  # a failed pair is no figure
            _pair("unidirectional", None, 0, 3),
            _pair("latency", 2.0, 0, 1),
            _pair("latency", 3.0, 1, 0),
            _pair("latency", 3.0, 2, 0),  # as bad as 1 -> 0: the first found is named
            _pair("bandwidth", 1.0, 0, 1),  # no family of the fleet
        ]
    }
    assert node_figures(measurements) == [
        ("p2p unidirectional", "GB/s", True, Figure(250.0, "GPU 1 -> GPU 2")),
        ("p2p latency", "us", False, Figure(3.0, "GPU 1 -> GPU 0")),
    ]


def test_a_failed_pair_listed_first_does_not_hide_the_others() -> None:
    measurements = {"p2p": [_pair("bidirectional", None, 0, 1), _pair("bidirectional", 600.0, 1, 0)]}
    assert node_figures(measurements) == [("p2p bidirectional", "GB/s", True, Figure(600.0, "GPU 1 -> GPU 0"))]


def test_a_collective_family_is_its_lowest_busbw_at_the_largest_size_that_ran() -> None:
    collectives = [
        _coll("all_reduce", GIB, 380.0),
        _coll("all_reduce", GIB, 400.0),  # the lowest stays the figure, whichever comes last
        _coll("all_reduce", GIB, 5.0, error="wrong result"),  # at the largest size, but failed: no figure
        _coll("all_reduce", 1 << 20, 10.0),  # a smaller size says nothing of the family
        _coll("all_reduce", 4 * GIB, None, error="timed out"),  # failed at a larger size: not the largest that ran
        _coll("all_reduce", 8 * GIB, 1.0, error="wrong result"),  # a figure with an error is no figure
        _coll("all_gather", 1 << 20, 90.0),
    ]
    assert node_figures({"collectives": collectives}) == [
        ("all_gather busbw @ 1 MiB", "GB/s", True, Figure(90.0, "1 MiB")),
        ("all_reduce busbw @ 1 GiB", "GB/s", True, Figure(380.0, "1 GiB")),
    ]


def test_a_collective_without_a_figure_makes_no_family() -> None:
    assert node_figures({"collectives": [_coll("broadcast", GIB, None)], "p2p": []}) == []
    assert node_figures({}) == []


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (GIB, "1 GiB"),
        (3 * GIB, "3 GiB"),
        (GIB + (1 << 20), "1025 MiB"),
        (1 << 20, "1 MiB"),
        (3 << 10, "3 KiB"),
        (1 << 10, "1 KiB"),
        (1000, "1000 B"),
        (1536, "1536 B"),
    ],
)
def test_size_text_takes_the_largest_unit_that_divides_the_size(size: int, text: str) -> None:
    assert size_text(size) == text


def _family(values: list[float], higher_is_better: bool = True, unit: str = "GB/s") -> Family:
    name = "p2p unidirectional" if higher_is_better else "p2p latency"
    figures = {f"n{i:02d}": Figure(value, f"GPU {i} -> GPU 0") for i, value in enumerate(values)}
    return Family(name, unit, higher_is_better, figures)


def _levels(family: Family, settings: OutlierSettings | None = None) -> dict[str, str]:
    return {o.host: o.level for o in judge_family(family, settings or OutlierSettings())}


# The percentage rule alone (MAD = 0: more than half the nodes identical): median 100.
@pytest.mark.parametrize(
    ("value", "level"),
    [(96.5, "warn"), (96.6, None), (93.0, "replace"), (93.1, "warn"), (100.0, None), (120.0, None)],
)
def test_percent_rule_boundaries_for_bandwidth(value: float, level: str | None) -> None:
    levels = _levels(_family([100.0] * 9 + [value]))
    assert levels.get("n09") == level


@pytest.mark.parametrize(
    ("value", "level", "percent"),
    [(103.5, "warn", 3.5), (103.4, None, None), (107.0, "replace", 7.0), (90.0, None, None)],
)
def test_percent_rule_boundaries_for_latency_where_higher_is_worse(
    value: float, level: str | None, percent: float | None
) -> None:
    outliers = judge_family(_family([100.0] * 9 + [value], higher_is_better=False, unit="us"), OutlierSettings())
    assert [(o.host, o.level) for o in outliers] == ([("n09", level)] if level else [])
    if percent is not None:
        assert outliers[0].percent_worse == pytest.approx(percent)
        assert outliers[0].z is None  # MAD = 0: no z-score


def test_a_median_below_one_still_takes_percentages() -> None:
    # Latencies under 1 us are real (NVLink on H100 ~0.6 us): 10 % worse is still a replace.
    outliers = judge_family(_family([0.5] * 9 + [0.55], higher_is_better=False, unit="us"), OutlierSettings())
    assert [(o.host, o.level, round(o.percent_worse, 6)) for o in outliers] == [("n09", "replace", 10.0)]


def test_a_zero_median_is_not_judged_and_says_why() -> None:
    family = _family([0.0] * 9 + [5.0])
    assert judge_family(family, OutlierSettings()) == []
    assert family.note == "the fleet median is 0 GB/s; no percentage can be taken of it"
    assert not family.judged


def test_min_nodes_boundary() -> None:
    assert _levels(_family([100.0] * 9 + [50.0])) == {"n09": "replace"}
    few = _family([100.0] * 8 + [50.0])
    assert _levels(few) == {}
    assert few.note == "too few nodes (9 < 10) to judge outliers"


def _z_family(last: float) -> Family:
    # 11 nodes: median 100 and MAD 2 whichever side ``last`` lies on, so z = 0.6745 * (last - 100) / 2.
    return _family([100.0, 100.0, *[98.0] * 4, *[102.0] * 4, last])


def test_modified_z_is_taken_over_the_mad() -> None:
    (outlier,) = judge_family(_z_family(92.0), OutlierSettings(z_threshold=2.0, warn_percent=50, replace_percent=60))
    assert outlier.median == 100.0
    assert outlier.z == pytest.approx(0.6745 * (92.0 - 100.0) / 2.0)


def test_z_rule_boundary_flags_at_the_threshold_itself() -> None:
    # Percent rules out of the way; z of 96.0 is 0.6745 * -4 / 2 = -1.349.
    z = 0.6745 * (96.0 - 100.0) / 2.0
    at = OutlierSettings(z_threshold=-z, warn_percent=50, replace_percent=60)
    beyond = OutlierSettings(z_threshold=-z + 1e-9, warn_percent=50, replace_percent=60)
    assert _levels(_z_family(96.0), at) == {"n10": "warn"}
    assert _levels(_z_family(96.0), beyond) == {}


def test_z_rule_flags_only_the_worse_side() -> None:
    settings = OutlierSettings(z_threshold=1.0, warn_percent=50, replace_percent=60)
    assert _levels(_z_family(104.0), settings) == {}  # faster than the fleet is no outlier
    assert _levels(_z_family(96.0), settings) == {"n10": "warn"}


def test_the_outlier_carries_the_family_s_unit_and_where() -> None:
    (outlier,) = judge_family(_family([2.0] * 9 + [3.0], higher_is_better=False, unit="us"), OutlierSettings())
    assert (outlier.unit, outlier.where, outlier.value, outlier.family) == ("us", "GPU 9 -> GPU 0", 3.0, "p2p latency")


def test_sentence_names_the_direction_and_the_z_score() -> None:
    slow = Outlier("n1", "p2p unidirectional", 90.0, "GB/s", "GPU 1 -> GPU 2", 100.0, -4.2, 10.0, "replace")
    assert slow.sentence() == (
        "n1: p2p unidirectional 90 GB/s at GPU 1 -> GPU 2 is 10.0 % below the fleet median 100 GB/s "
        "(modified z -4.2; replace)"
    )
    late = Outlier("n2", "p2p latency", 2.2, "us", "GPU 0 -> GPU 1", 2.0, None, 10.0, "warn")
    assert late.sentence() == (
        "n2: p2p latency 2.2 us at GPU 0 -> GPU 1 is 10.0 % above the fleet median 2 us (MAD = 0, no z-score; warn)"
    )


def test_percent_rules_flag_at_the_percentage_itself() -> None:
    # The settings sit exactly on the computed percentage, so only ">=" flags the node.
    at_warn = (100.0 - 96.0) / 100.0 * 100.0
    assert _levels(_family([100.0] * 9 + [96.0]), OutlierSettings(warn_percent=at_warn)) == {"n09": "warn"}
    at_replace = (100.0 - 90.0) / 100.0 * 100.0
    assert _levels(_family([100.0] * 9 + [90.0]), OutlierSettings(replace_percent=at_replace)) == {"n09": "replace"}


class _Node:
    """A node as outlier detection reads it (fleet.outliers.NodeSummary): its host, suite and figures."""

    def __init__(self, host: str, measurements: dict[str, Any]) -> None:
        self._host = host
        self._figures = node_figures(measurements)

    @property
    def host(self) -> str:
        return self._host

    @property
    def suite(self) -> str:
        return "h100-8gpu"  # one suite: outliers are judged among nodes of the same suite

    @property
    def figures(self) -> list[NodeFigure]:
        return self._figures


def test_outliers_are_listed_replace_first_then_by_how_much_worse() -> None:
    values = {f"n{i:02d}": 300.0 for i in range(12)} | {"n03": 285.0, "n07": 250.0, "n09": 270.0, "n10": 288.0}
    nodes = [_Node(host, {"p2p": [_pair("unidirectional", value, 0, 1)]}) for host, value in values.items()]
    families, outliers = find_outliers(nodes, OutlierSettings())
    assert [(o.host, o.level) for o in outliers] == [
        ("n07", "replace"),
        ("n09", "replace"),
        ("n03", "warn"),
        ("n10", "warn"),
    ]
    assert [(f.name, f.unit, f.higher_is_better) for f in families] == [("p2p unidirectional", "GB/s", True)]


def test_families_keep_their_unit_and_direction() -> None:
    nodes = [_Node("a", {"p2p": [_pair("latency", 2.0, 0, 1)], "collectives": [_coll("all_reduce", GIB, 400.0)]})]
    assert [(f.name, f.unit, f.higher_is_better) for f in collect_families(nodes)] == [
        ("all_reduce busbw @ 1 GiB", "GB/s", True),
        ("p2p latency", "us", False),
    ]
