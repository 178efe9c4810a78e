"""Topology: the path class of every GPU pair and the P2P status of every ordered pair."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_nvlink.judges import topology
from pytest_nvlink.judges.context import Context
from pytest_nvlink.judges.groups import PairSet
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("topology")


def test_path(nvlink_context: Context, nvlink_pairs: PairSet, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(
        nvlink_pairs.verdict(
            lambda a, b: topology.pair_path(nvlink_context, a, b),
            lambda pairs: topology.passing_paths(nvlink_context, pairs),
        )
    )


def test_p2p_status(
    nvlink_context: Context, nvlink_ordered_pairs: PairSet, nvlink_judge: Callable[[Verdict], None]
) -> None:
    nvlink_judge(
        nvlink_ordered_pairs.verdict(
            lambda src, dst: topology.p2p_status(nvlink_context, src, dst),
            lambda pairs: topology.passing_statuses(nvlink_context, pairs),
        )
    )
