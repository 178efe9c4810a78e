"""The fleet's outlier settings at their documented boundaries: a node exactly at a setting is flagged, one
ulp better is not. The boundary is where the documented score (percent below the median, modified z-score)
crosses the setting; where no float scores exactly the setting, the last one at or beyond it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable

import pytest
from test_threshold_boundaries import _ulps_around

from pytest_nvlink.fleet.outliers import MODIFIED_Z_FACTOR, Family, OutlierSettings, judge_family
from pytest_nvlink.fleet.outliers import Figure as FleetFigure

# Each default with its documented source (fleet/outliers.py): the boundary is checked at this value, so a
# default moved without its source (3.5 -> 4.5, 7 -> 8) fails here.
FLEET_DEFAULTS: dict[str, float] = {
    "z_threshold": 3.5,  # NIST/SEMATECH e-Handbook 1.3.5.17 (Iglewicz & Hoaglin)
    "warn_percent": 3.5,  # Azure/ai-infrastructure-on-azure cluster_outlier_detection
    "replace_percent": 7.0,  # same
    "min_nodes": 10,  # same
}
MEDIAN = 100.0


def _level(values: list[float], outlier: float) -> str | None:
    """The level judge_family gives the node at ``outlier`` among nodes at ``values`` (None: not an outlier)."""
    family = Family("p2p unidirectional", "GB/s", True)
    family.figures = {f"node{i:02d}": FleetFigure(v, "GPU 0 -> GPU 1") for i, v in enumerate(values)}
    family.figures["suspect"] = FleetFigure(outlier, "GPU 0 -> GPU 1")
    found = [o for o in judge_family(family, OutlierSettings()) if o.host == "suspect"]
    return found[0].level if found else None


def _flip(score: Callable[[float], float], limit: float, guess: float) -> tuple[float, float]:
    """The figure whose documented score is the last at or beyond ``limit`` (falling figures score higher),
    and the next float up, the first within it."""
    at = next(v for v in _ulps_around(guess, 4096) if score(v) >= limit > score(math.nextafter(v, math.inf)))
    return at, math.nextafter(at, math.inf)


def test_every_fleet_setting_has_a_boundary_case() -> None:
    assert {f.name for f in dataclasses.fields(OutlierSettings)} == set(FLEET_DEFAULTS)


@pytest.mark.parametrize(
    ("setting", "levels"), [("replace_percent", ("replace", "warn")), ("warn_percent", ("warn", None))]
)
def test_a_node_at_the_fleet_percentage_is_flagged_and_one_ulp_better_is_not(
    setting: str, levels: tuple[str, str | None]
) -> None:
    """Nine identical nodes (MAD = 0, so only the percentage rule applies) and one worse by the setting."""
    limit = FLEET_DEFAULTS[setting]

    def percent_worse(value: float) -> float:  # "% below the fleet median", as fleet/outliers.py documents it
        return (MEDIAN - value) / MEDIAN * 100.0

    at, better = _flip(percent_worse, limit, MEDIAN * (1 - limit / 100))
    assert abs(percent_worse(at) - limit) < 1e-12
    assert (_level([MEDIAN] * 9, at), _level([MEDIAN] * 9, better)) == levels


def test_a_node_at_the_modified_z_score_is_flagged_and_one_ulp_better_is_not() -> None:
    """A spread fleet where the node is far below in z but less than the warn percentage below the median."""
    spread = [MEDIAN] * 5 + [MEDIAN + 0.125] * 2 + [MEDIAN - 0.125] * 2
    limit = FLEET_DEFAULTS["z_threshold"]

    def minus_z(value: float) -> float:  # -0.6745 (x - median) / MAD, as fleet/outliers.py documents it
        values = [*spread, value]
        median = statistics.median(values)
        mad = statistics.median(abs(v - median) for v in values)
        return -MODIFIED_Z_FACTOR * (value - median) / mad

    mad = statistics.median(abs(v - MEDIAN) for v in [*spread, 0.0])
    at, better = _flip(minus_z, limit, MEDIAN - limit * mad / MODIFIED_Z_FACTOR)
    assert (MEDIAN - at) / MEDIAN * 100 < FLEET_DEFAULTS["warn_percent"]  # the z-score alone flags it
    assert (_level(spread, at), _level(spread, better)) == ("warn", None)


def test_the_fleet_judges_outliers_from_its_minimum_node_count() -> None:
    enough = int(FLEET_DEFAULTS["min_nodes"])
    assert _level([MEDIAN] * (enough - 1), MEDIAN * 0.8) == "replace"
    assert _level([MEDIAN] * (enough - 2), MEDIAN * 0.8) is None
