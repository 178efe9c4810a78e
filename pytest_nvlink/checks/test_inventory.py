"""Inventory: the node has the GPUs, models and driver the suite describes (and the MIG mode a set requires)."""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import inventory, mig
from pytest_nvlink.plugin.kit import CheckKit

pytestmark = pytest.mark.nvlink("inventory")


@pytest.mark.nvlink("inventory", gate=True)
def test_gpu_count(nvlink_check: CheckKit) -> None:
    nvlink_check.judge(inventory.gpu_count(nvlink_check.context))


def test_driver(nvlink_check: CheckKit) -> None:
    nvlink_check.judge(inventory.driver(nvlink_check.context))


def test_gpu_model(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    nvlink_check.judge(inventory.gpu_model(nvlink_check.context, nvlink_gpu_index))


def test_gpu_mig(nvlink_check: CheckKit, nvlink_gpu_index: int, nvlink_mig_required: str) -> None:
    nvlink_check.judge(mig.gpu_mig(nvlink_check.context, nvlink_gpu_index))


@pytest.fixture
def nvlink_mig_required(nvlink_check: CheckKit) -> str:
    """The threshold set's inventory.mig; test_gpu_mig is collected only where a set gives it."""
    return str(nvlink_check.context.thresholds.value(mig.MIG_KEY))
