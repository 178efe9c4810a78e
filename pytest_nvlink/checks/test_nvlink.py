"""NVLink per GPU: active links, generation, per-link speed and error counters."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_nvlink.judges import nvlink
from pytest_nvlink.judges.context import Context
from pytest_nvlink.provider import MeasurementProvider
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("nvlink")


def test_nvlink_active_links(
    nvlink_context: Context, nvlink_gpu_index: int, nvlink_judge: Callable[[Verdict], None]
) -> None:
    nvlink_judge(nvlink.nvlink_active_links(nvlink_context, nvlink_gpu_index))


def test_nvlink_version(
    nvlink_context: Context, nvlink_gpu_index: int, nvlink_judge: Callable[[Verdict], None]
) -> None:
    nvlink_judge(nvlink.nvlink_version(nvlink_context, nvlink_gpu_index))


def test_nvlink_speed(nvlink_context: Context, nvlink_gpu_index: int, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(nvlink.nvlink_speed(nvlink_context, nvlink_gpu_index))


def test_nvlink_errors(
    nvlink_context: Context,
    nvlink_measurements: MeasurementProvider,
    nvlink_gpu_index: int,
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    # Judged after every campaign of the session, whatever the item order: the increase during the run counts.
    nvlink_measurements.complete()
    nvlink_judge(nvlink.nvlink_errors(nvlink_context, nvlink_gpu_index))
