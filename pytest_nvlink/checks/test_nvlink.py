"""NVLink per GPU: active links, generation, per-link speed and error counters."""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import nvlink
from pytest_nvlink.plugin.kit import CheckKit

pytestmark = pytest.mark.nvlink("nvlink")


def test_nvlink_active_links(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    nvlink_check.judge(nvlink.nvlink_active_links(nvlink_check.context, nvlink_gpu_index))


def test_nvlink_version(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    nvlink_check.judge(nvlink.nvlink_version(nvlink_check.context, nvlink_gpu_index))


def test_nvlink_speed(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    nvlink_check.judge(nvlink.nvlink_speed(nvlink_check.context, nvlink_gpu_index))


def test_nvlink_errors(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    # Judged after every campaign of the session, whatever the item order: the increase during the run counts.
    nvlink_check.measurements.complete()
    nvlink_check.judge(nvlink.nvlink_errors(nvlink_check.context, nvlink_gpu_index))
