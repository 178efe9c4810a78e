"""Platform: NVSwitch fabric registration (Fabric Manager) and the PCIe link of every GPU."""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import platform
from pytest_nvlink.plugin.kit import CheckKit

pytestmark = pytest.mark.nvlink("platform")


def test_fabric(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    nvlink_check.judge(platform.fabric(nvlink_check.context, nvlink_gpu_index))


def test_pcie_link(nvlink_check: CheckKit, nvlink_gpu_index: int) -> None:
    # The generation is judged as sampled under the session's measurement load, so let that load run first.
    nvlink_check.measurements.complete()
    nvlink_check.judge(platform.pcie_link(nvlink_check.context, nvlink_gpu_index))
