"""The proof of path is bounded from above: counters carrying far more than the copy mean a scale error."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.judges import bandwidth
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import P2PMeasurement
from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome

GB = 10**9


def _context() -> Context:
    suite = load_suite("h100-8gpu")
    return Context(load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json"), suite, load_thresholds(suite.thresholds_ref))


def _copy(nvlink: int) -> P2PMeasurement:
    return P2PMeasurement(
        0, 1, "unidirectional", 370.0, "GB/s", bytes_copied=10 * GB, nvlink_bytes=nvlink, pcie_bytes=0
    )


@pytest.mark.parametrize(
    ("nvlink", "outcome"),
    [(10 * GB, Outcome.PASS), (15 * GB, Outcome.PASS), (15 * GB + 1, Outcome.FAIL), (20 * GB, Outcome.FAIL)],
)
def test_fraction_above_the_ceiling_fails_as_counter_scale(nvlink: int, outcome: Outcome) -> None:
    verdict = bandwidth.path_proof(_context(), 0, 1, _copy(nvlink))
    assert verdict.outcome is outcome
    if outcome is Outcome.FAIL:
        assert "counter scale" in verdict.message
        assert "nvswitch-common.toml:p2p.nvlink_counter_fraction_max" in verdict.message
        assert "20.00 GB for 10.00 GB copied (200%)" in verdict.message or nvlink != 20 * GB


def test_a_threshold_set_without_the_ceiling_fails_instead_of_passing_unbounded() -> None:
    ctx = _context()
    values = dict(ctx.thresholds.values)
    del values["p2p.nvlink_counter_fraction_max"]
    ctx = dataclasses.replace(ctx, thresholds=dataclasses.replace(ctx.thresholds, values=values))
    verdict = bandwidth.path_proof(ctx, 0, 1, _copy(10 * GB))
    assert verdict.outcome is Outcome.FAIL
    assert "neither sets nor waives p2p.nvlink_counter_fraction_max" in verdict.message


def test_replayed_counter_scale_error_fails_through_the_plugin(pytester: pytest.Pytester) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    for m in node.measurements.p2p:
        if (m.src, m.dst, m.kind) == (0, 1, "unidirectional"):
            assert m.bytes_copied is not None
            m.nvlink_bytes = 1024 * m.bytes_copied  # KiB read as bytes twice over
    save_snapshot(node, pytester.path / "scaled.json")
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-replay={pytester.path / 'scaled.json'}", "-k", "path_proof"
    )
    result.assert_outcomes(passed=55, failed=1)
    result.stdout.fnmatch_lines(
        ["*_ test_p2p_path_proof[[]gpu0-gpu1[]] _*", "GPU 0 -> GPU 1: counter scale — *(102400%)*"]
    )


def test_a_ceiling_below_one_is_a_config_error(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text("[p2p]\nnvlink_counter_fraction_max = 0.8\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"site.toml:p2p.nvlink_counter_fraction_max: 0.8 must be at least 1"):
        load_thresholds("h100-sxm", site)
