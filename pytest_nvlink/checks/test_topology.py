"""Topology: the path class of every GPU pair and the P2P status of every ordered pair."""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import topology
from pytest_nvlink.judges.groups import PairSet
from pytest_nvlink.plugin.kit import CheckKit

pytestmark = pytest.mark.nvlink("topology")


def test_path(nvlink_check: CheckKit, nvlink_pairs: PairSet) -> None:
    nvlink_check.judge(
        nvlink_pairs.verdict(
            lambda a, b: topology.pair_path(nvlink_check.context, a, b),
            lambda pairs: topology.passing_paths(nvlink_check.context, pairs),
        )
    )


def test_p2p_status(nvlink_check: CheckKit, nvlink_ordered_pairs: PairSet) -> None:
    nvlink_check.judge(
        nvlink_ordered_pairs.verdict(
            lambda src, dst: topology.p2p_status(nvlink_check.context, src, dst),
            lambda pairs: topology.passing_statuses(nvlink_check.context, pairs),
        )
    )
