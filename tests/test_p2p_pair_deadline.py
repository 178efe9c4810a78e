"""Each P2P pair has its own deadline: a hung pair fails alone and the campaign goes on (issue 25 item 10).

A hung CUDA copy cannot be cancelled, so the parent kills the measuring child and starts a fresh one
at the next pair. The simulated engine hangs forever where told (``threading.Event().wait()``).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, SNAPSHOTS, serve_live_node
from fake_nvml_copies import live_setup

from pytest_nvlink.config.suites import Measure, load_suite
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.measure import p2p
from pytest_nvlink.measure.p2p import P2PPlan
from pytest_nvlink.measure.p2p_simulated import SimulatedCopyEngine, SimulatedCounters
from pytest_nvlink.model import Measurements, P2PMeasurement
from pytest_nvlink.sources.snapshot.file import load_snapshot

SPAWN_S = 6.0  # a fresh spawned child on a busy 2-core box, generously


def _plan(n: int, *, concurrent: bool = False, max_restarts: int = 8) -> P2PPlan:
    # Small copies and short proofs: the deadline is about the 1 s floor.
    return P2PPlan(
        gpus=tuple(range(n)),
        nbytes=1 << 20,
        iterations=4,
        warmup=1,
        latency_iterations=10,
        concurrent=concurrent,
        proof_seconds=0.01,
        settle_interval_s=0.01,
        settle_max_s=0.05,
        pair_floor_s=1.0,
        max_restarts=max_restarts,
    )


def _pair_of(m: P2PMeasurement) -> tuple[int, int]:
    return min(m.src, m.dst), max(m.src, m.dst)


def test_the_pair_limit_grows_with_the_planned_bytes_above_its_floor() -> None:
    small = _plan(2)
    assert 1.0 < small.pair_limit_s() < 1.5
    big = P2PPlan(gpus=(0, 1), nbytes=256 << 20, iterations=20, warmup=5, latency_iterations=100)
    # 4 lanes of 25 copies of 256 MiB at 1 GB/s, on top of the 60 s floor and the proofs' reads
    assert big.pair_limit_s() == pytest.approx(60 + 4 * 25 * (256 << 20) / 1e9 + 2 * (1 + 2 * 1.05), rel=1e-3)


def test_the_suite_sets_the_floor_and_rejects_a_floor_below_one_second(tmp_path: Path) -> None:
    suite = tmp_path / "floor.toml"
    suite.write_text(SUITE, encoding="utf-8")
    measure = load_suite(str(suite)).measure
    assert P2PPlan.from_measure([0, 1], measure).pair_floor_s == 1.0
    assert P2PPlan.from_measure([0, 1], Measure()).pair_floor_s == 60.0
    suite.write_text(SUITE.replace("p2p_pair_floor_s = 1", "p2p_pair_floor_s = 0"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"floor.toml:measure.p2p_pair_floor_s: "):
        load_suite(str(suite))


@pytest.mark.parametrize(("concurrent", "step"), [(False, "enqueue"), (True, "sync")])
def test_one_hung_pair_fails_alone_and_every_other_pair_is_measured(concurrent: bool, step: str) -> None:
    engine = SimulatedCopyEngine(gbps=50.0, latency_us=0.0, hang_on=(2, 1), hang_at=step)
    lines: list[str] = []
    started = time.monotonic()
    results = p2p.run_p2p(
        _plan(4, concurrent=concurrent),
        engine,
        timeout_s=120,
        counter_factory=SimulatedCounters(),
        progress=lines.append,
    )
    assert time.monotonic() - started < 2 * SPAWN_S + 5
    assert len(results) == 30
    failed = [m for m in results if m.error is not None]
    # (1, 2) was measured up to gpu1->gpu2 and its latency; the copy back hung.
    assert {(m.src, m.dst, m.kind) for m in failed} == {
        (2, 1, "unidirectional"),
        (2, 1, "latency"),
        (1, 2, "bidirectional"),
    }
    sentence = (
        "not measured: the pair of CUDA devices 1 and 2 did not finish within its 1 s limit, stuck at "
        f"gpu2->gpu1 unidirectional copy: {step}; its worker was killed and the campaign went on with the next pair"
    )
    assert all(m.error == sentence and m.value is None for m in failed)
    measured = [m for m in results if m.error is None]
    assert all(m.value is not None for m in measured)
    assert {_pair_of(m) for m in measured} == {(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)}
    assert all(m.nvlink_bytes == m.bytes_copied for m in measured if m.kind == "unidirectional")
    restart = "did not finish within its 1 s limit, stuck at gpu2->gpu1 unidirectional copy"
    assert f"p2p pair gpu1<->gpu2: {restart}: {step}; restarting the worker" in lines
    assert not multiprocessing.active_children()


def test_every_pair_hanging_ends_in_bounded_time_with_each_pair_named() -> None:
    plan = _plan(3)
    started = time.monotonic()
    results = p2p.run_p2p(plan, SimulatedCopyEngine(hang_all=True), timeout_s=300)
    assert time.monotonic() - started < 3 * (plan.pair_limit_s() + SPAWN_S)
    assert len(results) == 15 and all(m.value is None for m in results)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        errors = {m.error for m in results if _pair_of(m) == (a, b)}
        assert errors == {
            f"not measured: the pair of CUDA devices {a} and {b} did not finish within its 1 s limit, stuck at "
            f"gpu{a}->gpu{b} unidirectional copy: enqueue; its worker was killed and the campaign went on with the "
            "next pair"
        }
    assert not multiprocessing.active_children()


def test_the_restart_budget_bounds_a_machine_where_every_pair_hangs() -> None:
    plan = _plan(4, max_restarts=1)
    started = time.monotonic()
    results = p2p.run_p2p(plan, SimulatedCopyEngine(hang_all=True), timeout_s=300)
    # Two workers, each killed one pair limit after its pair started; four pairs are never started.
    assert time.monotonic() - started < 2 * (plan.pair_limit_s() + SPAWN_S)
    assert all(m.value is None for m in results)
    hung = {_pair_of(m) for m in results if "did not finish within its 1 s limit" in (m.error or "")}
    assert hung == {(0, 1), (0, 2)}
    rest = {m.error for m in results if _pair_of(m) not in hung}
    assert rest == {
        "not measured: the P2P worker was restarted 1 times after hung pairs (CUDA devices 0 and 1 at gpu0->gpu1 "
        "unidirectional copy: enqueue, CUDA devices 0 and 2 at gpu0->gpu2 unidirectional copy: enqueue) and may be "
        "restarted no more"
    }
    assert not multiprocessing.active_children()


@dataclass
class DyingEngine(SimulatedCopyEngine):
    """The measuring process ends abruptly on the copy from 1 to 2 (a driver crash, an OOM kill)."""

    def copy(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
        if (src, dst) == (1, 2):
            os._exit(7)
        return super().copy(src, dst, nbytes, iterations)


def test_a_worker_that_dies_mid_pair_fails_that_pair_and_a_fresh_one_goes_on() -> None:
    results = p2p.run_p2p(_plan(4), DyingEngine(gbps=50.0), timeout_s=120)
    failed = {(m.src, m.dst, m.kind): m.error for m in results if m.error is not None}
    assert set(failed) == {(1, 2, "unidirectional"), (1, 2, "latency"), (2, 1, "unidirectional")} | {
        (2, 1, "latency"),
        (1, 2, "bidirectional"),
    }
    assert set(failed.values()) == {
        "not measured: the pair of CUDA devices 1 and 2 lost its worker (exit code 7) at gpu1->gpu2 unidirectional "
        "copy; the campaign went on with the next pair in a fresh worker"  # it died before the engine's enqueue
    }
    assert sum(m.value is not None for m in results) == 25
    assert not multiprocessing.active_children()


def test_without_a_hang_one_worker_measures_everything_as_before() -> None:
    lines: list[str] = []
    results = p2p.run_p2p(_plan(3), SimulatedCopyEngine(gbps=50.0, latency_us=0.0), timeout_s=60, progress=lines.append)
    assert all(m.error is None for m in results)
    assert lines == [
        f"p2p pair {i}/6 gpu{s}->gpu{d}: 50.0 GB/s"
        for i, (s, d) in enumerate([(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)], start=1)
    ]


SUITE = """
[suite]
description = "three H100s, live through a fake NVML, one pair of which hangs"
thresholds = "h100-sxm"
gpu_count = 3
gpu_models = ["H100"]
nvswitch = true
[topology]
default = "NV18"
[measure]
p2p_size_mib = 1
p2p_iterations = 2
p2p_warmup = 1
latency_iterations = 10
timeout_s = 300
p2p_pair_floor_s = 1
collectives = ["all_reduce"]
"""


def test_live_run_fails_the_hung_pair_alone_and_judges_the_others(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.measurements = Measurements()
    # CUDA numbers the GPUs in reverse: CUDA 2 -> CUDA 1, which hangs, is NVML GPU 0 -> GPU 1.
    engine = "NvmlFedEngine(gbps=400.0, latency_us=0.0, hang_on=(2, 1), node_path=node_path, uuids=uuids)"
    serve_live_node(pytester, monkeypatch, node, 3, setup=live_setup(pytester.path / "node.json", engine, [2, 1, 0]))
    monkeypatch.setenv("PYTHONPATH", f"{REPO}:{os.environ['PYTHONPATH']}")  # this checkout's code, also in a worktree
    pytester.makefile(".toml", suite=SUITE)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        f"--nvlink-suite={pytester.path / 'suite.toml'}",
        "-k",
        "p2p_unidirectional or path_proof",
        "-p",
        "no:cacheprovider",
        "-p",
        "fake_nvml_plugin",
        "-rA",
        timeout=300,
    )
    assert time.monotonic() - started < 120
    outcomes = result.parseoutcomes()
    assert (outcomes["passed"], outcomes["failed"]) == (8, 4)
    for src, dst in ((0, 1), (1, 0)):
        for check in ("unidirectional", "path_proof"):
            result.stdout.fnmatch_lines([f"FAILED nvlink/test_bandwidth.py::test_p2p_{check}[[]gpu{src}-gpu{dst}[]]*"])
    for src, dst in ((0, 2), (2, 0), (1, 2), (2, 1)):
        for check in ("unidirectional", "path_proof"):
            result.stdout.fnmatch_lines([f"PASSED nvlink/test_bandwidth.py::test_p2p_{check}[[]gpu{src}-gpu{dst}[]]*"])
    result.stdout.fnmatch_lines(
        [
            "*the pair of CUDA devices 2 and 1 did not finish within its 7 s limit, stuck at gpu2->gpu1 "
            "unidirectional copy: enqueue; its worker was killed and the campaign went on with the next pair*"
        ]
    )
