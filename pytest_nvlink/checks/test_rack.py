"""A rack as one NVLink domain (suites with gpus_per_host): trays present, one clique, send/recv between trays."""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import rack
from pytest_nvlink.plugin.kit import CheckKit, not_parametrized

pytestmark = pytest.mark.nvlink("rack")


def test_rack_trays(nvlink_check: CheckKit) -> None:
    nvlink_check.judge(rack.rack_trays(nvlink_check.context))


def test_rack_tray(nvlink_check: CheckKit, nvlink_tray: int) -> None:
    nvlink_check.judge(rack.tray(nvlink_check.context, nvlink_tray))


def test_rack_clique(nvlink_check: CheckKit, nvlink_tray: int) -> None:
    nvlink_check.judge(rack.rack_clique(nvlink_check.context, nvlink_tray))


def test_rack_sendrecv(nvlink_check: CheckKit, nvlink_tray: int) -> None:
    nvlink_check.judge(rack.rack_sendrecv(nvlink_check.context, nvlink_tray))


@pytest.fixture
def nvlink_tray() -> int:
    """A tray slot of the rack (GPUs ``t * gpus_per_host`` onward); parametrized over the suite's trays."""
    not_parametrized("nvlink_tray")
