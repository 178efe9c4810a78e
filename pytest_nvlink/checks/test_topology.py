"""Topology: the path class of every GPU pair and the P2P status of every ordered pair."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_nvlink import judges
from pytest_nvlink.judges import Context
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("topology")


def test_path(nvlink_context: Context, nvlink_pair: tuple[int, int], nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(judges.pair_path(nvlink_context, *nvlink_pair))


def test_p2p_status(
    nvlink_context: Context, nvlink_ordered_pair: tuple[int, int], nvlink_judge: Callable[[Verdict], None]
) -> None:
    nvlink_judge(judges.p2p_status(nvlink_context, *nvlink_ordered_pair))
