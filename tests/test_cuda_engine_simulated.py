"""The CUDA copy engine's own logic on a simulated CUDA timeline (measure/cuda_simulated.py): no GPU needed.

The timeline models what the methodology depends on: a full launch queue blocks the host, and the
spin kernel's clock is low on an idle GPU.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from pytest_nvlink.measure import p2p
from pytest_nvlink.measure.cuda_engine import TORCH_ROUTE, CudaCopyEngine
from pytest_nvlink.measure.cuda_simulated import make_torch
from pytest_nvlink.measure.p2p_simulated import SimulatedSample

MIB = 1 << 20


class DriverTooOld:
    """cuda-python 13 on an R535 driver: every runtime call answers cudaErrorInsufficientDriver (35)."""

    def __init__(self) -> None:
        self.calls = 0

    def _fail(self, *args: Any) -> tuple[int, ...]:
        self.calls += 1
        return (35,)

    cudaSetDevice = cudaDeviceEnablePeerAccess = cudaMemcpyPeerAsync = _fail


def test_a_cudart_route_that_fails_its_first_call_falls_back_to_torch_and_says_so() -> None:
    cudart = DriverTooOld()
    engine = CudaCopyEngine(torch_module=make_torch(), cudart=cudart)
    assert engine.name == "cudaMemcpyPeerAsync"
    plan = p2p.P2PPlan(gpus=(0, 1), nbytes=MIB, iterations=4, warmup=1, latency_iterations=4, proof_seconds=0.0)
    results = p2p.run_campaign(plan, engine)
    assert cudart.calls >= 1
    assert all(m.error is None for m in results), [m.error for m in results]
    route = f"{TORCH_ROUTE}; cudaMemcpyPeerAsync failed on its first call: cudaSetDevice(0) failed: 35"
    assert {m.source for m in results} == {route}


def test_a_cudart_error_after_it_worked_is_an_error_not_a_fallback() -> None:
    class BreaksLater(DriverTooOld):
        def cudaSetDevice(self, *args: Any) -> tuple[int, ...]:
            return (0,)

        def cudaDeviceEnablePeerAccess(self, *args: Any) -> tuple[int, ...]:
            return (0,)

        def cudaMemcpyPeerAsync(self, *args: Any) -> tuple[int, ...]:
            self.calls += 1
            return (0,) if self.calls <= 4 else (700,)  # cudaErrorIllegalAddress

    engine = CudaCopyEngine(torch_module=make_torch(), cudart=BreaksLater())
    engine.copy(0, 1, MIB, 4)
    with pytest.raises(RuntimeError, match="cudaMemcpyPeerAsync failed: 700"):
        engine.copy(0, 1, MIB, 4)
    assert engine.name == "cudaMemcpyPeerAsync"


def test_the_path_proof_never_queues_more_than_a_chunk_of_copies() -> None:
    torch = make_torch()
    engine = CudaCopyEngine(route="torch", torch_module=torch)

    def read(gpu: int) -> SimulatedSample:
        return SimulatedSample(0, 0, 0, 0, stamps=(("test counters", -(-time.time_ns() // 1000)),))  # always fresh

    # 256 MiB copies at 1 TB/s: a 0.3 s proof is ~1,100 copies. Queued behind one blocker they
    # filled the launch queue, blocked the host and escalated the blocker for many seconds.
    plan = p2p.P2PPlan(gpus=(0, 1), nbytes=256 * MIB, iterations=4, warmup=1, latency_iterations=4, proof_seconds=0.3)
    started = time.monotonic()
    uni = p2p._Pair(plan, engine, read).unidirectional(0, 1)
    assert uni.error is None and uni.counters_note is None
    assert uni.bytes_copied is not None and uni.bytes_copied >= 1000 * 256 * MIB
    assert torch.simulated_gpu.deepest <= p2p.PROOF_CHUNK + 2
    assert time.monotonic() - started < 5


def test_proof_chunks_add_up_and_stay_small() -> None:
    assert p2p.proof_chunks(1.0, 0.001, 20) == [16] * 62 + [8]
    assert p2p.proof_chunks(1.0, 0.0, 20) == [16, 4]
    assert sum(p2p.proof_chunks(10.0, 1e-9, 20)) == p2p.MAX_PROOF_ITERATIONS


def test_idle_calibration_reads_the_clock_low_and_the_real_spin_is_measured() -> None:
    engine = CudaCopyEngine(route="torch", torch_module=make_torch())
    idle = engine.cycles_per_second(0)
    timed = engine.run_blocked([(0, 0)], 256 * MIB, 16)
    assert timed.spin_s < 0.5 * timed.block_s  # the spin ran at the warm clock: far shorter than asked
    assert timed.enqueue_s < 0.8 * timed.spin_s  # accepted only against the spin it really had
    assert engine.calibrate(0) > 3 * idle


def test_the_peer_copy_extra_resolves_to_a_cuda_python_that_runs_on_r535() -> None:
    from pathlib import Path

    import tomllib  # type: ignore[import-not-found,unused-ignore]
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    (line,) = pyproject["project"]["optional-dependencies"]["peer-copy"]
    requirement = Requirement(line)
    assert requirement.name == "cuda-python"
    # 13.x needs an R580+ driver; the newest 12.x (12.9.10 when this was written) runs on R535.
    assert not requirement.specifier.contains("13.0.0") and not requirement.specifier.contains("13.4.4")
    assert requirement.specifier.contains("12.9.10")
