"""The one rule for a node's worst figure of a kind, which the terminal and the HTML report both name."""

from __future__ import annotations

from pytest_nvlink.model import P2PMeasurement
from pytest_nvlink.model.figures import worst_measured


def _m(src: int, dst: int, kind: str, value: float | None) -> P2PMeasurement:
    unit = "us" if kind == "latency" else "GB/s"
    return P2PMeasurement(src, dst, kind, value, unit, error=None if value is not None else "crashed")


def test_bandwidth_worst_is_the_lowest_measured_and_latency_the_highest() -> None:
    figures = [_m(0, 1, "unidirectional", 370.0), _m(1, 0, "unidirectional", 37.0), _m(0, 2, "unidirectional", None)]
    figures += [_m(0, 1, "latency", 2.0), _m(1, 0, "latency", 9.5)]
    assert worst_measured(figures, "unidirectional") == figures[1]  # a failed figure has no value to rank
    assert worst_measured(figures, "latency") == figures[4]
    assert worst_measured(figures, "bidirectional") is None


def test_of_equal_figures_the_first_recorded_is_named() -> None:
    first, second = _m(3, 4, "unidirectional", 100.0), _m(1, 2, "unidirectional", 100.0)
    assert worst_measured([first, second], "unidirectional") is first
