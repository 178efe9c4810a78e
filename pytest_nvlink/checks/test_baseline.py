"""Comparison with the node's own last known good run (collected only with --nvlink-baseline)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_nvlink.judges import baseline
from pytest_nvlink.judges.groups import PairSet
from pytest_nvlink.model import P2PMeasurement
from pytest_nvlink.model.figures import MeasurementProvider
from pytest_nvlink.record.environment import stamp_conditions
from pytest_nvlink.record.run import Run
from pytest_nvlink.verdict import Verdict

pytestmark = pytest.mark.nvlink("baseline")


def test_baseline_p2p(
    nvlink_run: Run,
    nvlink_measurements: MeasurementProvider,
    nvlink_ordered_pairs: PairSet,
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    def one(src: int, dst: int) -> Verdict:
        figures: dict[str, P2PMeasurement | None] = {}
        # Pairs the suite expects on PCIe are not measured (the verdict says so), nor are pairs with a lost GPU.
        context, suite = nvlink_run.context, nvlink_run.suite
        if context.first_unusable(src, dst) is None and suite.pair_expects_nvlink(src, dst):
            figures = {kind: nvlink_measurements.p2p(src, dst, kind) for kind in baseline.P2P_KINDS}
            stamp_conditions(nvlink_run)
        return baseline.p2p_pair(nvlink_run.context, nvlink_run.baseline, src, dst, figures)

    nvlink_judge(nvlink_ordered_pairs.verdict(one))


def test_baseline_collective(
    nvlink_run: Run,
    nvlink_measurements: MeasurementProvider,
    nvlink_collective: str,
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    results = nvlink_measurements.collectives()
    stamp_conditions(nvlink_run)
    nvlink_judge(baseline.collective(nvlink_run.context, nvlink_run.baseline, nvlink_collective, results))


def test_baseline_facts(nvlink_run: Run, nvlink_gpu_index: int, nvlink_judge: Callable[[Verdict], None]) -> None:
    nvlink_judge(baseline.gpu_facts(nvlink_run.context, nvlink_run.baseline, nvlink_gpu_index))


def test_baseline_host_link(
    nvlink_run: Run,
    nvlink_measurements: MeasurementProvider,
    nvlink_gpu_index: int,
    nvlink_judge: Callable[[Verdict], None],
) -> None:
    figures = nvlink_measurements.host_link()
    stamp_conditions(nvlink_run)
    nvlink_judge(baseline.host_link(nvlink_run.context, nvlink_run.baseline, nvlink_gpu_index, figures))
