"""Inventory: the node has the GPUs, models and driver the suite describes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_nvlink.judges import inventory
from pytest_nvlink.judges.context import Context
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("inventory")


@pytest.mark.nvlink("inventory", gate=True)
def test_gpu_count(nvlink_context: Context, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(inventory.gpu_count(nvlink_context))


def test_driver(nvlink_context: Context, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(inventory.driver(nvlink_context))


def test_gpu_model(nvlink_context: Context, nvlink_gpu_index: int, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(inventory.gpu_model(nvlink_context, nvlink_gpu_index))
