"""Platform: NVSwitch fabric registration (Fabric Manager) and the PCIe link of every GPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_nvlink.judges import platform
from pytest_nvlink.judges.context import Context
from pytest_nvlink.provider import MeasurementProvider
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("platform")


def test_fabric(nvlink_context: Context, nvlink_gpu_index: int, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(platform.fabric(nvlink_context, nvlink_gpu_index))


def test_pcie_link(
    nvlink_context: Context,
    nvlink_measurements: MeasurementProvider,
    nvlink_gpu_index: int,
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    # The generation is judged as sampled under the session's measurement load, so let that load run first.
    nvlink_measurements.complete()
    nvlink_judge(platform.pcie_link(nvlink_context, nvlink_gpu_index))
