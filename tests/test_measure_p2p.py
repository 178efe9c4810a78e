"""P2P campaign logic with a simulated copy engine (no GPU needed)."""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_nvlink.config.suites import Measure
from pytest_nvlink.config.thresholds import Threshold, Thresholds
from pytest_nvlink.measure import p2p, p2p_counters
from pytest_nvlink.measure.p2p import P2PPlan
from pytest_nvlink.measure.p2p_simulated import SimulatedCopyEngine
from pytest_nvlink.measure.runner import (
    DEFAULT_COLLECTIVE_SIZE_MIB,
    MeasurementSession,
    NvmlCounterFactory,
    sizes_from_thresholds,
)


@dataclass
class Sample:
    nvlink_tx_bytes: int | None
    nvlink_rx_bytes: int | None
    pcie_tx_bytes: int | None
    pcie_rx_bytes: int | None
    note: str | None = None


class CountingReader:
    """Cumulative counters that grow by what the fake engine copied since the last read."""

    def __init__(self, nvlink_share: float = 1.0, missing_pcie: bool = False) -> None:
        self.reads: list[int] = []
        self.nvlink_share = nvlink_share
        self.missing_pcie = missing_pcie
        self.tx = dict.fromkeys(range(16), 1000)

    def __call__(self, gpu: int) -> Sample:
        self.reads.append(gpu)
        self.tx[gpu] += 10
        nv = int(self.tx[gpu] * self.nvlink_share)
        pcie = None if self.missing_pcie else self.tx[gpu] - nv
        return Sample(nv, 0, pcie, 0, "PCIe counters unsupported" if self.missing_pcie else None)


def plan(n: int = 4, concurrent: bool = False, **kw: int) -> P2PPlan:
    values = {"nbytes": 64 << 20, "iterations": 10, "warmup": 2, "latency_iterations": 100, **kw}
    return P2PPlan(gpus=tuple(range(n)), concurrent=concurrent, settle_interval_s=0.001, **values)


UNSTAMPED = (
    "counters read without timestamps: settled on two reads 0.001 s apart agreeing, "
    "which a slower counter refresh would undercount"
)


# --- rounds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16])
def test_round_robin_covers_every_pair_once_in_disjoint_rounds(n: int) -> None:
    rounds = p2p.round_robin_rounds(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [pair for rnd in rounds for pair in rnd]
    assert sorted(seen) == list(itertools.combinations(range(n), 2))
    for rnd in rounds:
        gpus = [g for pair in rnd for g in pair]
        assert len(gpus) == len(set(gpus))
        assert len(rnd) == n // 2


def test_round_robin_small() -> None:
    assert p2p.round_robin_rounds(0) == []
    assert p2p.round_robin_rounds(1) == []
    assert p2p.round_robin_rounds(2) == [[(0, 1)]]


def test_schedule_maps_rounds_onto_the_gpu_list() -> None:
    concurrent = P2PPlan(gpus=(2, 5, 7, 9), nbytes=1, iterations=1, warmup=0, latency_iterations=1, concurrent=True)
    used = {g for rnd in p2p.schedule(concurrent) for pair in rnd for g in pair}
    assert used == {2, 5, 7, 9}
    serial = P2PPlan(gpus=(0, 1, 2), nbytes=1, iterations=1, warmup=0, latency_iterations=1)
    assert p2p.schedule(serial) == [[(0, 1)], [(0, 2)], [(1, 2)]]


def test_plan_from_measure() -> None:
    measure = Measure(p2p_size_mib=256, p2p_iterations=20, p2p_warmup=3, latency_iterations=200, pair_mode="concurrent")
    built = P2PPlan.from_measure([0, 1], measure)
    assert built.nbytes == 256 << 20
    assert (built.iterations, built.warmup, built.latency_iterations) == (20, 3, 200)
    assert built.concurrent
    assert built.ordered_pair_count() == 2


# --- GB/s math and counters --------------------------------------------------------------------


def test_unidirectional_bidirectional_latency_math() -> None:
    engine = SimulatedCopyEngine(gbps=100.0, latency_us=0.0)
    results = p2p.run_campaign(plan(2), engine)
    by_key = {(m.src, m.dst, m.kind): m for m in results}
    assert set(by_key) == set(p2p.expected_keys(plan(2)))
    uni = by_key[(0, 1, "unidirectional")]
    assert uni.value == pytest.approx(100.0)
    assert uni.unit == "GB/s"
    assert uni.bytes_copied is None  # no counter reader: no proof copy either
    assert uni.can_access_peer is True
    assert uni.source == "simulated"
    bidi = by_key[(0, 1, "bidirectional")]
    assert bidi.value == pytest.approx(200.0)  # both directions count
    assert bidi.bytes_copied == 2 * 10 * (64 << 20)
    assert bidi.bidirectional_sum is True
    lat = by_key[(1, 0, "latency")]
    assert lat.unit == "us"
    assert lat.value == pytest.approx(16 / 100e9 * 1e6)  # one int4, as p2pBandwidthLatencyTest


def test_latency_figure_is_mean_microseconds_per_copy() -> None:
    engine = SimulatedCopyEngine(gbps=1e9, latency_us=3.5)
    results = p2p.run_campaign(plan(2), engine)
    lat = next(m for m in results if m.kind == "latency")
    assert lat.value == pytest.approx(3.5, rel=1e-3)


def test_counter_deltas_are_summed_tx_of_both_gpus() -> None:
    reader = CountingReader(nvlink_share=1.0)
    results = p2p.run_campaign(plan(2), SimulatedCopyEngine(), reader)
    uni = next(m for m in results if m.kind == "unidirectional")
    # each GPU's TX grows by 10 per read, and each side of the proof copy is read twice (until two
    # reads agree): settled before 1020, settled after 1040 -> 20 per GPU, two GPUs
    assert uni.nvlink_bytes == 40
    assert uni.pcie_bytes == 0
    # This reader gives no timestamps: only the agreement rule could settle it, and the note says so.
    assert uni.counters_note == UNSTAMPED
    assert reader.reads[:8] == [0, 1, 0, 1, 0, 1, 0, 1]  # only around the unidirectional proof copy
    assert len(reader.reads) == 16  # two directions x (before, after) x two reads x two GPUs


def test_counter_deltas_note_when_unsupported() -> None:
    reader = CountingReader(missing_pcie=True)
    uni = next(m for m in p2p.run_campaign(plan(2), SimulatedCopyEngine(), reader) if m.kind == "unidirectional")
    assert uni.nvlink_bytes == 40
    assert uni.pcie_bytes is None
    assert uni.counters_note == f"PCIe counters unsupported; {UNSTAMPED}"


def test_counter_delta_rules() -> None:
    s = Sample
    assert p2p_counters.counter_deltas([s(5, 0, 7, 0)], [s(15, 0, 9, 0)]) == (10, 2, None)
    nvlink, pcie, note = p2p_counters.counter_deltas([s(5, 0, 7, 0)], [s(1, 0, 9, 0)])
    assert nvlink is None and pcie == 2 and "went backwards" in (note or "")
    assert p2p_counters.counter_deltas("no reader", "no reader") == (None, None, "no reader")
    nvlink, pcie, note = p2p_counters.counter_deltas([s(None, None, None, None)], [s(None, None, None, None)])
    assert (nvlink, pcie) == (None, None)
    assert note == "nvlink tx bytes not reported; pcie tx bytes not reported"


def test_no_reader_and_failing_reader_keep_the_bandwidth() -> None:
    uni = p2p.run_campaign(plan(2), SimulatedCopyEngine())[0]
    assert uni.value is not None and uni.counters_note == "no traffic counter reader configured"

    def broken(gpu: int) -> Sample:
        raise OSError("NVML gone")

    uni = p2p.run_campaign(plan(2), SimulatedCopyEngine(), broken)[0]
    assert uni.value is not None
    assert uni.counters_note == "counter read failed: OSError: NVML gone"


def test_copy_error_becomes_an_error_entry_and_the_campaign_goes_on() -> None:
    engine = SimulatedCopyEngine(fail_on=(1, 0))
    results = p2p.run_campaign(plan(3), engine)
    bad = [m for m in results if m.error]
    assert {(m.src, m.dst, m.kind) for m in bad} == {
        (1, 0, "unidirectional"),
        (1, 0, "latency"),
        (0, 1, "bidirectional"),
    }
    assert all("simulated failure copying gpu1->gpu0" in (m.error or "") for m in bad)
    assert all(m.value is None for m in bad)
    assert sum(m.value is not None for m in results) == 15 - 3


@pytest.mark.parametrize("concurrent", [False, True])
def test_progress_lines(concurrent: bool) -> None:
    lines: list[str] = []
    p2p.run_campaign(plan(4, concurrent), SimulatedCopyEngine(gbps=371.2, latency_us=0.0), progress=lines.append)
    assert len(lines) == 12
    assert {line.split(":")[0].split()[2] for line in lines} == {f"{i}/12" for i in range(1, 13)}
    assert all(line.endswith(": 371.2 GB/s") for line in lines)
    if not concurrent:
        assert lines[0] == "p2p pair 1/12 gpu0->gpu1: 371.2 GB/s"


def test_concurrent_mode_runs_a_round_at_the_same_time() -> None:
    class Overlap(SimulatedCopyEngine):
        def __init__(self) -> None:
            super().__init__()
            import threading

            self.active = 0
            self.peak = 0
            self.lock = threading.Lock()

        def copy(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
            with self.lock:
                self.active += 1
                self.peak = max(self.peak, self.active)
            time.sleep(0.01)
            with self.lock:
                self.active -= 1
            return super().copy(src, dst, nbytes, iterations)

    engine = Overlap()
    p2p.run_campaign(plan(4, concurrent=True), engine)
    assert engine.peak == 2
    serial = Overlap()
    p2p.run_campaign(plan(4), serial)
    assert serial.peak == 1


# --- the child process and its watchdog ---------------------------------------------------------


def test_child_campaign_returns_everything() -> None:
    lines: list[str] = []
    results = p2p.run_p2p(plan(3), SimulatedCopyEngine(gbps=50.0, latency_us=0.0), timeout_s=60, progress=lines.append)
    assert len(results) == 15
    assert all(m.error is None for m in results)
    assert len(lines) == 6
    assert next(m for m in results if m.kind == "unidirectional").value == pytest.approx(50.0, rel=1e-3)
    assert not multiprocessing.active_children()


def test_child_hang_is_killed_and_reported() -> None:
    engine = SimulatedCopyEngine(hang_on=(1, 2))
    started = time.monotonic()
    results = p2p.run_p2p(plan(3), engine, timeout_s=3)
    assert time.monotonic() - started < 15
    done = [m for m in results if m.error is None]
    timed_out = [m for m in results if m.error]
    assert {(m.src, m.dst) for m in done} >= {(0, 1), (1, 0), (0, 2), (2, 0)}
    assert (1, 2, "unidirectional") in {(m.src, m.dst, m.kind) for m in timed_out}
    assert all(m.error == "timed out after 3 s" for m in timed_out)
    assert not multiprocessing.active_children()


def test_child_that_cannot_build_its_engine() -> None:
    results = p2p.run_p2p(plan(2), functools.partial(_no_cuda), timeout_s=60)
    assert len(results) == 5
    assert all(m.error == "p2p worker failed: RuntimeError: CUDA is not available to torch" for m in results)


def _no_cuda() -> SimulatedCopyEngine:
    raise RuntimeError("CUDA is not available to torch")


def test_counter_reader_factory_runs_in_the_child() -> None:
    results = p2p.run_p2p(plan(2), SimulatedCopyEngine(), timeout_s=60, counter_factory=CountingReader)
    uni = next(m for m in results if m.kind == "unidirectional")
    assert uni.nvlink_bytes == 40


def test_torch_engine_refuses_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    # Made to hold on a CUDA machine too, instead of skipping there.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        p2p.TorchCopyEngine()


# --- the session --------------------------------------------------------------------------------


def _session(gpus: list[int]) -> MeasurementSession:
    measure = Measure(p2p_size_mib=1, p2p_iterations=2, p2p_warmup=1, latency_iterations=10, timeout_s=60)
    return MeasurementSession(measure, gpus=gpus, engine_factory=SimulatedCopyEngine(gbps=80.0, latency_us=0.0))


def test_session_runs_the_campaign_once_and_answers_every_question() -> None:
    session = _session([0, 1, 2])
    uni = session.p2p(0, 1, "unidirectional")
    assert uni.value == pytest.approx(80.0)
    assert uni.counters_note == "no traffic counter reader configured"
    bidi = session.p2p(2, 1, "bidirectional")
    assert (bidi.src, bidi.dst) == (1, 2)
    assert bidi.value == pytest.approx(160.0)
    assert session.p2p_measurements() is session.p2p_measurements()
    missing = session.p2p(0, 5, "latency")
    assert missing.error == "not measured: gpu0->gpu5 latency is not in the campaign"
    assert missing.unit == "us"


def test_session_with_one_gpu() -> None:
    m = _session([0]).p2p(0, 1, "unidirectional")
    assert m.value is None
    assert m.error == "not measured: P2P needs at least 2 GPUs, found 1"


def test_nvml_counter_factory_without_a_driver_notes_why(install_fake_nvml: Callable[..., Any]) -> None:
    install_fake_nvml(None, driver_not_loaded=True)
    reader = NvmlCounterFactory(gpus=((0, "0000:01:00.0"),))()
    sample = reader(0)
    assert sample.note is not None
    assert sample.note.startswith("NVML traffic counters unavailable: NVMLError_DriverNotLoaded")
    assert (sample.nvlink_tx_bytes, sample.pcie_tx_bytes) == (None, None)


def test_sizes_from_thresholds() -> None:
    where = Path("site.toml")
    thresholds = Thresholds(
        "x", [where], {"collectives.all_reduce.size_mib": Threshold("collectives.all_reduce.size_mib", 64, where)}
    )
    sizes = sizes_from_thresholds(thresholds, ["all_reduce", "broadcast"])
    assert sizes == {"all_reduce": 64 << 20, "broadcast": DEFAULT_COLLECTIVE_SIZE_MIB << 20}
