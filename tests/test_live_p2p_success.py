"""A successful live P2P campaign through provider -> live -> judges, without a GPU (issue 9, items 9, 12).

The simulated engine and its counters stand in for CUDA and NVML; CUDA numbers the GPUs in the
reverse of NVML's order, so a figure reported under the wrong numbering lands on the wrong pair.
"""

from __future__ import annotations

import itertools

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.judges import bandwidth
from pytest_nvlink.judges.context import Context
from pytest_nvlink.measure.cuda_join import cuda_devices_in_child
from pytest_nvlink.measure.p2p_simulated import SimulatedCopyEngine, SimulatedCounters
from pytest_nvlink.measure.provider import LiveMeasurements
from pytest_nvlink.model import Measurements, Node
from pytest_nvlink.sources.live import probe as nvml_probe
from pytest_nvlink.sources.snapshot.file import load_snapshot

KINDS = ("unidirectional", "bidirectional", "latency")


def _live_node() -> Node:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.source, node.measurements = "live", Measurements()
    return node


def _reversed_cuda(node: Node) -> list[tuple[int, str | None, str | None]]:
    """CUDA_VISIBLE_DEVICES=7,6,...,0: CUDA device c is NVML GPU 7 - c (torch's UUIDs lack "GPU-")."""
    return [(7 - gpu.index, (gpu.uuid or "").removeprefix("GPU-"), None) for gpu in node.gpus]


def _campaign(engine: SimulatedCopyEngine) -> tuple[Context, LiveMeasurements]:
    node = _live_node()
    suite = load_suite("h100-8gpu")
    ctx = Context(node, suite, load_thresholds(suite.thresholds_ref))
    provider = LiveMeasurements(
        node,
        suite,
        ctx.thresholds,
        lambda line: None,
        engine_factory=engine,
        counter_factory=SimulatedCounters(),
        cuda_devices=lambda: _reversed_cuda(node),
    )
    return ctx, provider


def test_successful_campaign_is_judged_pair_by_pair_in_nvml_numbering() -> None:
    # CUDA 5 -> CUDA 2 is NVML 2 -> NVML 5; CUDA 1 -> CUDA 0 copies over PCIe, i.e. NVML 6 -> NVML 7.
    engine = SimulatedCopyEngine(gbps=400.0, latency_us=2.0, slow_pairs=((5, 2, 100.0),), via_pcie=((1, 0),))
    ctx, provider = _campaign(engine)
    failed: dict[str, list[tuple[int, int]]] = {kind: [] for kind in (*KINDS, "proof")}
    for src, dst in itertools.permutations(range(8), 2):
        for kind in KINDS:
            measured = provider.p2p(src, dst, kind)
            assert measured is not None and measured.error is None, (src, dst, kind)
            if kind == "bidirectional":
                assert measured.bidirectional_sum is True
            if not bandwidth.p2p_figure(ctx, src, dst, kind, measured).ok:
                failed[kind].append((src, dst))
        proof = bandwidth.path_proof(ctx, src, dst, provider.p2p(src, dst, "unidirectional"))
        if not proof.ok:
            failed["proof"].append((src, dst))
            assert "crossed NVLink" in proof.message or "PCIe" in proof.message, proof.message
    assert failed["unidirectional"] == [(2, 5)]
    assert failed["bidirectional"] == [(2, 5), (5, 2)]  # one figure per pair, ending with its slow direction
    assert failed["latency"] == []
    assert failed["proof"] == [(6, 7)]
    verdict = bandwidth.p2p_figure(ctx, 2, 5, "unidirectional", provider.p2p(2, 5, "unidirectional"))
    assert "GPU 2 -> GPU 5: unidirectional bandwidth 99.9 GB/s, below 335.0 GB/s" in verdict.message  # 2 us per copy
    assert [gpu.cuda_index for gpu in ctx.node.gpus] == [7, 6, 5, 4, 3, 2, 1, 0]


def test_the_pytest_process_never_asks_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    def touched() -> list[tuple[int, str | None, str | None]]:
        raise AssertionError("the pytest process asked CUDA for its devices")

    monkeypatch.setattr(nvml_probe, "torch_cuda_devices", touched)
    node = _live_node()
    suite = load_suite("h100-8gpu")
    provider = LiveMeasurements(node, suite, load_thresholds(suite.thresholds_ref), lambda line: None)
    measured = provider.p2p(0, 1, "unidirectional")  # the child lists devices: none on this CPU host
    assert measured is not None and measured.value is None
    assert measured.error == "not visible to CUDA in this process"


def test_cuda_join_child_answers_on_a_cpu_host() -> None:
    assert cuda_devices_in_child(timeout_s=120) == []
