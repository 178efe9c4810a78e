"""The host link of every GPU: host<->device bandwidth with pinned memory on the copy engine, against the SKU's
floors and the node's median, and on Grace (GH200/GB200/GB300) its NVLink-C2C links.

Live, replay and evidence runs all take the figures from the measurement provider, so one judge decides them.
"""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import host_link
from pytest_nvlink.plugin.kit import CheckKit

pytestmark = pytest.mark.nvlink("host_link")


def test_host_link(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    """Host->device and device->host (each alone and both at once) of one GPU: each figure at or above its floor
    (``host_link.*_min_gbps``) and not too far below the node's median (``host_link.below_median_max_fraction``);
    a GPU with no figure fails as not measured. Where the SKU requires NVLink-C2C (``c2c.required``), every C2C
    link present, active and at least ``c2c.link_max_bw_min_gbps``."""
    context = nvlink_check.context
    figures = host_link.host_link(context, nvlink_gpu_index, nvlink_check.measurements.host_link())
    nvlink_check.judge(host_link.with_c2c(figures, host_link.c2c_link(context, nvlink_gpu_index)))
