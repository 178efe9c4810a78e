"""Measurement methodology without a GPU: proof copy, settling counters, the blocker's retry rule.

The CUDA side of the blocker method only runs on hardware (benchmarks/device_check.py); what can
be decided on a CPU (how long the proof copy is, when counters count as settled, when a blocked run
is repeated) is tested here, against the simulated engine and the fake NVML's imperfect counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from conftest import SNAPSHOTS
from fake_pynvml import make_fake_pynvml
from test_judges import context

from pytest_nvlink.judges import bandwidth
from pytest_nvlink.measure import p2p, p2p_counters
from pytest_nvlink.measure.collectives import rank_time_s
from pytest_nvlink.measure.cuda_engine import BlockerTooShort, CudaCopyEngine, Timed
from pytest_nvlink.measure.p2p import P2PPlan
from pytest_nvlink.measure.p2p_simulated import SimulatedCopyEngine, SimulatedCounters
from pytest_nvlink.model import P2PMeasurement
from pytest_nvlink.sources.live.counters import read_traffic
from pytest_nvlink.sources.snapshot.file import load_snapshot

MIB = 1 << 20


def plan(**kw: float) -> P2PPlan:
    values: dict[str, float] = {"settle_interval_s": 0.001, "settle_max_s": 0.05, **kw}
    return P2PPlan(gpus=(0, 1), nbytes=64 * MIB, iterations=10, warmup=1, latency_iterations=100, **values)  # type: ignore[arg-type]


def test_proof_copy_lasts_proof_seconds_and_counts_only_its_own_bytes() -> None:
    engine = SimulatedCopyEngine(gbps=400.0, latency_us=0.0)
    results = p2p.run_campaign(plan(proof_seconds=1.0), engine(), SimulatedCounters()())
    uni = next(m for m in results if (m.src, m.dst, m.kind) == (0, 1, "unidirectional"))
    assert uni.value == pytest.approx(400.0)
    assert uni.bytes_copied is not None
    assert uni.bytes_copied / 400e9 >= 1.0  # >= 1 s of traffic behind the proof
    assert uni.bytes_copied / 400e9 < 1.01
    assert uni.nvlink_bytes == uni.bytes_copied and uni.pcie_bytes == 0


def test_pcie_fallback_shows_on_the_pcie_counters() -> None:
    engine = SimulatedCopyEngine(via_pcie=((0, 1),))
    results = p2p.run_campaign(plan(proof_seconds=0.01), engine(), SimulatedCounters()())
    uni = next(m for m in results if (m.src, m.dst, m.kind) == (0, 1, "unidirectional"))
    assert uni.nvlink_bytes == 0 and uni.pcie_bytes == uni.bytes_copied


class FakeNvmlReader:
    """A CounterReader over the fake pynvml, the copy accounted as NVML would see it."""

    def __init__(self, **options: Any) -> None:
        node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
        self.fake = make_fake_pynvml(node, **options)
        self.fake.nvmlInit()
        self.uuids = [gpu.uuid or "" for gpu in node.gpus]

    def __call__(self, gpu: int) -> p2p_counters.TrafficSample:
        return read_traffic(self.fake, self.fake.nvmlDeviceGetHandleByIndex(gpu))


class CountedEngine(SimulatedCopyEngine):
    def __init__(self, reader: FakeNvmlReader) -> None:
        super().__init__(gbps=100.0, latency_us=0.0)
        self.reader = reader

    def copy(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
        self.reader.fake.add_copy(self.reader.uuids[src], self.reader.uuids[dst], nbytes * iterations)
        return super().copy(src, dst, nbytes, iterations)


def _proof(reader: FakeNvmlReader, **kw: float) -> P2PMeasurement:
    results = p2p.run_campaign(plan(proof_seconds=0.01, **kw), CountedEngine(reader), reader)
    return next(m for m in results if (m.src, m.dst, m.kind) == (0, 1, "unidirectional"))


def test_lagging_counters_are_reread_until_they_settle() -> None:
    uni = _proof(FakeNvmlReader(counter_lag_reads=1))
    # Read once after the copy, a lagging counter still shows the old value: the delta would be 0.
    assert uni.bytes_copied and uni.nvlink_bytes == uni.bytes_copied
    assert uni.counters_note is None


def test_background_traffic_within_tolerance_is_accepted() -> None:
    uni = _proof(FakeNvmlReader(background_bytes_per_read=64 * 1024))
    assert uni.bytes_copied and uni.nvlink_bytes is not None
    assert uni.bytes_copied <= uni.nvlink_bytes <= uni.bytes_copied * 1.01


def test_counters_that_never_settle_leave_the_proof_unknown() -> None:
    uni = _proof(FakeNvmlReader(background_bytes_per_read=1 << 30))
    assert uni.nvlink_bytes is None
    assert uni.counters_note == (
        "NVLink counters still moving 0.05 s after the proof copy (other traffic on the links?)"
    )
    assert uni.value == pytest.approx(100.0)  # the bandwidth figure is kept


def test_all_links_scope_refused_falls_back_to_the_per_link_sum() -> None:
    reader = FakeNvmlReader(aggregate_scope_fails=True)
    uni = _proof(reader)
    assert uni.bytes_copied and uni.nvlink_bytes is not None
    # The fake spreads a GPU's traffic over its 18 links in whole KiB: the sum is within 18 KiB.
    assert abs(uni.nvlink_bytes - uni.bytes_copied) <= 2 * 18 * 1024
    calls = reader.fake.fake_state.calls_to("nvmlDeviceGetFieldValues")
    assert any(len(args[1]) == 18 for args in calls)  # links 0..17 in one call


class ScriptedBlocks(CudaCopyEngine):
    """The blocker rule alone: ``_run_once`` answers from a script instead of a GPU."""

    def __init__(self, enqueue_times: Sequence[float], spin_share: float = 1.0) -> None:  # no torch, no CUDA
        self.script = list(enqueue_times)
        self.blocks: list[float] = []
        self._enqueue_s = {}
        self._cudart, self._cudart_proven = None, False
        self._cycles_per_s = {0: 1e9}
        self.spin_share = spin_share  # the spin's real length over the one asked (idle calibration: < 1)

    def _run_once(self, lanes: Sequence[tuple[int, int]], nbytes: int, iterations: int, block_s: float) -> Timed:
        self.blocks.append(block_s)
        spin_s = block_s * self.spin_share
        self.spin_share = 1.0  # the retry is sized from the measured spin: it runs as asked
        return Timed(gpu_s=0.001, enqueue_s=self.script.pop(0), block_s=block_s, spin_s=spin_s)


def test_blocked_run_is_repeated_with_a_longer_blocker_when_enqueueing_outlasts_it() -> None:
    engine = ScriptedBlocks([0.010, 0.011, 0.001])
    timed = engine.run_blocked([(0, 1)], 16, 100)
    assert timed.enqueue_s == 0.011
    assert engine.blocks[0] == pytest.approx(0.006)  # 3 x the 20 us/copy first guess
    assert engine.blocks[1] == pytest.approx(0.040)  # 4 x the enqueue time seen
    engine.run_blocked([(0, 1)], 16, 100)
    assert engine.blocks[2] == pytest.approx(0.033)  # the next run starts from what it saw
    with pytest.raises(BlockerTooShort, match="longer than the"):
        ScriptedBlocks([1.0, 4.0, 16.0, 64.0]).run_blocked([(0, 1)], 16, 100)


def test_a_spin_shorter_than_asked_is_measured_and_the_figure_retried() -> None:
    # Calibrated on an idle GPU, the 6 ms spin really lasts 1.2 ms: 3 ms of enqueueing outlasts it,
    # so the copies may have started before it ended. The figure is retried, not reported.
    engine = ScriptedBlocks([0.003, 0.003], spin_share=0.2)
    timed = engine.run_blocked([(0, 1)], 16, 100)
    assert engine.blocks == [pytest.approx(0.006), pytest.approx(0.012)]
    assert timed.tries == 2 and timed.spin_s == pytest.approx(0.012)
    assert engine._cycles_per_s[0] == pytest.approx(5e9)  # recalibrated from the spin it measured


def test_bidirectional_is_the_union_of_both_directions_and_a_sum() -> None:
    engine = SimulatedCopyEngine(gbps=100.0, latency_us=0.0, slow_pairs=((1, 0, 50.0),))
    results = p2p.run_campaign(plan(), engine)
    bidi = next(m for m in results if m.kind == "bidirectional")
    # 2 x 640 MiB over the slower direction's 640 MiB / 50 GB/s.
    assert bidi.value == pytest.approx(100.0)
    assert bidi.bidirectional_sum is True


def test_collective_time_is_averaged_over_ranks_like_nccl_tests() -> None:
    assert rank_time_s([{"mean_s": 1.0}, {"mean_s": 3.0}]) == 2.0  # not the slowest rank's 3.0
    assert rank_time_s([]) == 0.0


def test_per_direction_bidirectional_figure_is_judged_as_the_sum() -> None:
    ctx = context()  # h100-sxm: bidirectional_min_gbps = 666 (a sum of both directions)
    per_direction = P2PMeasurement(0, 1, "bidirectional", 370.0, "GB/s", bidirectional_sum=False)
    verdict = bandwidth.p2p_figure(ctx, 0, 1, "bidirectional", per_direction)
    assert verdict.ok and "bidirectional 740.0 GB/s" in verdict.message
    summed = P2PMeasurement(0, 1, "bidirectional", 370.0, "GB/s", bidirectional_sum=True)
    assert not bandwidth.p2p_figure(ctx, 0, 1, "bidirectional", summed).ok
