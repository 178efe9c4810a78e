"""A rack as one NVLink domain (suites with gpus_per_host): trays present, one clique, send/recv between trays."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_nvlink.judges import rack
from pytest_nvlink.judges.context import Context
from pytest_nvlink.plugin import not_parametrized
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("rack")


def test_rack_trays(nvlink_context: Context, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(rack.rack_trays(nvlink_context))


def test_rack_tray(nvlink_context: Context, nvlink_tray: int, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(rack.tray(nvlink_context, nvlink_tray))


def test_rack_clique(nvlink_context: Context, nvlink_tray: int, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(rack.rack_clique(nvlink_context, nvlink_tray))


def test_rack_sendrecv(nvlink_context: Context, nvlink_tray: int, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(rack.rack_sendrecv(nvlink_context, nvlink_tray))


@pytest.fixture
def nvlink_tray() -> int:
    """A tray slot of the rack (GPUs ``t * gpus_per_host`` onward); parametrized over the suite's trays."""
    not_parametrized("nvlink_tray")
