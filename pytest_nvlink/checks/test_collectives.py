"""Collective bus bandwidth per operation and the NCCL transport audit (measured once, lazily)."""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import collectives
from pytest_nvlink.plugin.kit import CheckKit

pytestmark = pytest.mark.nvlink("collectives")


def test_collective_busbw(nvlink_check: CheckKit, nvlink_collective: str) -> None:
    results = nvlink_check.measurements.collectives()
    nvlink_check.judge(collectives.collective(nvlink_check.context, nvlink_collective, results))


def test_nccl_transport(nvlink_check: CheckKit) -> None:
    nvlink_check.judge(collectives.nccl_transport(nvlink_check.context, nvlink_check.measurements.nccl()))
