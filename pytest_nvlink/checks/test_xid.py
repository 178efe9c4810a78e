"""Xid events per GPU: every Xid the driver reported while the run listened (or a kernel log of its window)."""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import xid
from pytest_nvlink.plugin.kit import CheckKit

pytestmark = pytest.mark.nvlink("xid")


def test_xid(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    # Judged after every campaign of the session, whatever the item order: an Xid they provoke counts.
    nvlink_check.measurements.complete()
    nvlink_check.judge(xid.xid(nvlink_check.context, nvlink_gpu_index))
