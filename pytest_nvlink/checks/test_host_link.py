"""The host link of every GPU: host<->device bandwidth with pinned memory on the copy engine, against the SKU's
floors and the node's median, and NVLink-C2C's links on Grace (GH200/GB200/GB300).

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
    a GPU with no figure fails as not measured."""
    figures = nvlink_check.measurements.host_link()
    nvlink_check.judge(host_link.host_link(nvlink_check.context, nvlink_gpu_index, figures))


def test_c2c_link(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    """NVLink-C2C to the Grace CPU (``c2c.required``): every link present and active, each at or above
    ``c2c.link_max_bw_min_gbps``; does not apply where the SKU's host link is PCIe."""
    nvlink_check.judge(host_link.c2c_link(nvlink_check.context, nvlink_gpu_index))
