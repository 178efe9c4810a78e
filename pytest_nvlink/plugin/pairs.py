"""pytest glue for pair checks: one item per GPU pair, or one per source GPU on large domains.

Registered as a plugin only for a run (``--nvlink-suite``), so its fixtures cost an inert plugin
nothing. The shipped pair checks take ``nvlink_pairs`` (unordered) or ``nvlink_ordered_pairs``
(ordered), a :class:`~pytest_nvlink.judges.groups.PairSet`, and hand its verdict to ``nvlink_judge``;
``nvlink_pair``/``nvlink_ordered_pair`` (one pair per item, always) stay for users' own tests.
"""

from __future__ import annotations

from itertools import combinations, permutations
from typing import TYPE_CHECKING, Any

import pytest

from pytest_nvlink.judges.groups import Pair, PairSet
from pytest_nvlink.model import pair_id
from pytest_nvlink.plugin.kit import not_parametrized
from pytest_nvlink.verdict import Outcome

if TYPE_CHECKING:
    from pytest_nvlink.config.suites import Suite

# Up to this many GPUs ``pair_items = "auto"`` makes one item per pair (8 GPUs: 56 ordered pairs per
# check); above it, one per source GPU (72 GPUs: 72 items per check instead of 5,112).
PER_PAIR_UP_TO_GPUS = 16


def grouped_by_source(suite: Suite) -> bool:
    """Whether pair checks get one item per source GPU ([suite] pair_items, or auto by GPU count)."""
    if suite.pair_items == "auto":
        return suite.gpu_count > PER_PAIR_UP_TO_GPUS
    return suite.pair_items == "source"


def pair_sets(suite: Suite, *, ordered: bool, unknown_is: Outcome = Outcome.FAIL) -> list[PairSet]:
    """The items of one pair check, by the suite's expectation (a missing GPU must fail, not vanish).

    ``unknown_is``: what a pair's UNKNOWN verdict counts as in this run (``plugin.kit.unknown_is``).
    """
    count = suite.gpu_count
    every: list[Pair] = list(permutations(range(count), 2) if ordered else combinations(range(count), 2))
    if not grouped_by_source(suite):
        return [PairSet((pair,), ordered, grouped=False, unknown_is=unknown_is) for pair in every]
    by_source: dict[int, list[Pair]] = {}
    spans_hosts = suite.gpus_per_host is not None  # one host: no pair crosses (7,668 questions fewer at 72 GPUs)
    for pair in every:
        # A rack's pairs across trays are judged by send/recv (test_rack_sendrecv), not by these checks: as
        # per-pair items they read "does not apply"; inside a source item they would read as a mixture.
        if not (spans_hosts and suite.crosses_hosts(*pair)):
            by_source.setdefault(pair[0], []).append(pair)
    file = str(suite.file)
    return [PairSet(tuple(pairs), ordered, True, file, unknown_is) for pairs in by_source.values()]


PAIR_FIXTURES: tuple[str, ...] = ("nvlink_pair", "nvlink_ordered_pair", "nvlink_pairs", "nvlink_ordered_pairs")


def pair_params(suite: Suite, name: str, unknown_is: Outcome = Outcome.FAIL) -> tuple[list[Any], list[str]]:
    """Values and ids of pair fixture ``name``; worked out once per suite, fixture and unknowns' policy, and
    only when asked for."""
    key = (id(suite), name, unknown_is.value)
    cached = _PARAMS.get(key)
    if cached is None or cached[0] is not suite:
        cached = _PARAMS[key] = (suite, _pair_params(suite, name, unknown_is))
    return cached[1]


_PARAMS: dict[tuple[int, str, str], tuple[Suite, tuple[list[Any], list[str]]]] = {}


def _pair_params(suite: Suite, name: str, unknown_is: Outcome) -> tuple[list[Any], list[str]]:
    count = suite.gpu_count
    if name in ("nvlink_pairs", "nvlink_ordered_pairs"):
        sets = pair_sets(suite, ordered=name == "nvlink_ordered_pairs", unknown_is=unknown_is)
        return list(sets), [s.label for s in sets]
    pairs = list(combinations(range(count), 2) if name == "nvlink_pair" else permutations(range(count), 2))
    return list(pairs), [pair_id(a, b) for a, b in pairs]


@pytest.fixture
def nvlink_pairs() -> PairSet:
    """Unordered GPU pairs (a < b) one item judges: one pair, or every pair of a source GPU with a higher peer."""
    not_parametrized("nvlink_pairs")


@pytest.fixture
def nvlink_ordered_pairs() -> PairSet:
    """Ordered GPU pairs one item judges: one (src, dst), or every pair from one source GPU."""
    not_parametrized("nvlink_ordered_pairs")


@pytest.fixture
def nvlink_pair() -> tuple[int, int]:
    """An unordered GPU pair (a < b); parametrized over every pair of the suite's GPUs."""
    not_parametrized("nvlink_pair")


@pytest.fixture
def nvlink_ordered_pair() -> tuple[int, int]:
    """An ordered GPU pair (src, dst); parametrized over every ordered pair of the suite's GPUs."""
    not_parametrized("nvlink_ordered_pair")
