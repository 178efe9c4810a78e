"""P2P bandwidth, latency and proof of path for every ordered GPU pair (measured once, lazily)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_nvlink import judges_bandwidth
from pytest_nvlink.judges import Context
from pytest_nvlink.provider import MeasurementProvider
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("bandwidth")


def _worth_measuring(context: Context, src: int, dst: int) -> bool:
    """Only usable GPUs on pairs the suite expects on NVLink; the verdict explains the others."""
    usable = context.first_unusable(src, dst) is None and context.suite.pair_expects_nvlink(src, dst)
    return usable and not context.suite.crosses_hosts(src, dst)  # no copy engine reaches another host


def _judge_figure(context: Context, provider: MeasurementProvider, pair: tuple[int, int], kind: str) -> Verdict:
    src, dst = pair
    # Pairs the suite expects on PCIe are not measured: the verdict says the figure does not apply.
    measurement = provider.p2p(src, dst, kind) if _worth_measuring(context, src, dst) else None
    return judges_bandwidth.p2p_figure(context, src, dst, kind, measurement)


def test_p2p_unidirectional(
    nvlink_context: Context,
    nvlink_measurements: MeasurementProvider,
    nvlink_ordered_pair: tuple[int, int],
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    nvlink_judge(_judge_figure(nvlink_context, nvlink_measurements, nvlink_ordered_pair, "unidirectional"))


def test_p2p_bidirectional(
    nvlink_context: Context,
    nvlink_measurements: MeasurementProvider,
    nvlink_ordered_pair: tuple[int, int],
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    nvlink_judge(_judge_figure(nvlink_context, nvlink_measurements, nvlink_ordered_pair, "bidirectional"))


def test_p2p_latency(
    nvlink_context: Context,
    nvlink_measurements: MeasurementProvider,
    nvlink_ordered_pair: tuple[int, int],
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    nvlink_judge(_judge_figure(nvlink_context, nvlink_measurements, nvlink_ordered_pair, "latency"))


def test_p2p_path_proof(
    nvlink_context: Context,
    nvlink_measurements: MeasurementProvider,
    nvlink_ordered_pair: tuple[int, int],
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    src, dst = nvlink_ordered_pair
    needed = _worth_measuring(nvlink_context, src, dst)
    measurement = nvlink_measurements.p2p(src, dst, "unidirectional") if needed else None
    nvlink_judge(judges_bandwidth.path_proof(nvlink_context, src, dst, measurement))
