"""Collective bus bandwidth per operation and the NCCL transport audit (measured once, lazily)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_nvlink.judges import collectives
from pytest_nvlink.judges.context import Context
from pytest_nvlink.provider import MeasurementProvider
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("collectives")


def test_collective_busbw(
    nvlink_context: Context,
    nvlink_measurements: MeasurementProvider,
    nvlink_collective: str,
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    results = nvlink_measurements.collectives()
    nvlink_judge(collectives.collective(nvlink_context, nvlink_collective, results))


def test_nccl_transport(
    nvlink_context: Context, nvlink_measurements: MeasurementProvider, nvlink_judge: Callable[[Verdict], None]
) -> None:
    nvlink_judge(collectives.nccl_transport(nvlink_context, nvlink_measurements.nccl()))
