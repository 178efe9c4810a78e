"""P2P bandwidth, latency and proof of path for every ordered GPU pair (measured once, lazily).

Each item judges one ordered pair, or on a large domain every pair from one source GPU
(``[suite] pair_items``); the judges see one pair at a time either way.
"""

from __future__ import annotations

import pytest

from pytest_nvlink.judges import bandwidth
from pytest_nvlink.judges.context import Context
from pytest_nvlink.judges.groups import PairSet
from pytest_nvlink.model.figures import MeasurementProvider
from pytest_nvlink.plugin.kit import CheckKit
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("bandwidth")


def _worth_measuring(context: Context, src: int, dst: int) -> bool:
    """Only usable GPUs on pairs the suite expects on NVLink; the verdict explains the others."""
    return context.nvlink_pair_usable(src, dst)  # no copy engine reaches another host


def _judge_figure(context: Context, provider: MeasurementProvider, pairs: PairSet, kind: str) -> Verdict:
    def one(src: int, dst: int) -> Verdict:
        # Pairs the suite expects on PCIe are not measured: the verdict says the figure does not apply.
        measurement = provider.p2p(src, dst, kind) if _worth_measuring(context, src, dst) else None
        return bandwidth.p2p_figure(context, src, dst, kind, measurement)

    return pairs.verdict(
        one, lambda group: bandwidth.passing_figures(context, group, kind, provider.p2p_for_comparison)
    )


def test_p2p_unidirectional(nvlink_check: CheckKit, nvlink_ordered_pairs: PairSet) -> None:
    nvlink_check.judge(
        _judge_figure(nvlink_check.context, nvlink_check.measurements, nvlink_ordered_pairs, "unidirectional")
    )


def test_p2p_bidirectional(nvlink_check: CheckKit, nvlink_ordered_pairs: PairSet) -> None:
    nvlink_check.judge(
        _judge_figure(nvlink_check.context, nvlink_check.measurements, nvlink_ordered_pairs, "bidirectional")
    )


def test_p2p_latency(nvlink_check: CheckKit, nvlink_ordered_pairs: PairSet) -> None:
    nvlink_check.judge(_judge_figure(nvlink_check.context, nvlink_check.measurements, nvlink_ordered_pairs, "latency"))


def test_p2p_path_proof(nvlink_check: CheckKit, nvlink_ordered_pairs: PairSet) -> None:
    def one(src: int, dst: int) -> Verdict:
        needed = _worth_measuring(nvlink_check.context, src, dst)
        measurement = nvlink_check.measurements.p2p(src, dst, "unidirectional") if needed else None
        return bandwidth.path_proof(nvlink_check.context, src, dst, measurement)

    nvlink_check.judge(
        nvlink_ordered_pairs.verdict(
            one,
            lambda pairs: bandwidth.passing_proofs(
                nvlink_check.context, pairs, nvlink_check.measurements.p2p_for_comparison
            ),
        )
    )
