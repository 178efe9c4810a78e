"""Inventory: the node has the GPUs, models and driver the suite describes."""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import inventory
from pytest_nvlink.plugin.kit import CheckKit

pytestmark = pytest.mark.nvlink("inventory")


@pytest.mark.nvlink("inventory", gate=True)
def test_gpu_count(nvlink_check: CheckKit) -> None:
    nvlink_check.judge(inventory.gpu_count(nvlink_check.context))


def test_driver(nvlink_check: CheckKit) -> None:
    nvlink_check.judge(inventory.driver(nvlink_check.context))


def test_gpu_model(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    nvlink_check.judge(inventory.gpu_model(nvlink_check.context, nvlink_gpu_index))
