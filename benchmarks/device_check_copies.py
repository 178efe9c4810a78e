"""The device check's copy machinery on ONE GPU: same-device copies through the campaign's own engine.

What it shows, per route (cudaMemcpyPeerAsync when cuda-python imports, torch ``copy_``): how long
enqueueing N copies takes against the blocker's intended and real spin (events around the spin),
whether the engine gives up with ``BlockerTooShort``; the spin calibration on an idle GPU against a
warm one; blocked vs naive timing at 16 B and 256 MiB. With ``simulate`` the engine runs on
``pytest_nvlink.measure.cuda_simulated``'s CUDA timeline (a stand-in ``torch``), which has no cuda-python.
"""

from __future__ import annotations

import time
from typing import Any

from device_check_sections import CouldNotRun, Result, _cuda

MIB = 1 << 20
QUEUE_DEPTHS = (16, 256)  # through run_blocked: tries, BlockerTooShort or not
DEEP_QUEUE = 1400  # a second of 256 MiB copies on H100, the old proof copy's depth: one try, no retries
DEEP_SPIN_S = 0.02


def _engine(route: str, simulate: bool) -> Any:
    from pytest_nvlink.measure.cuda_engine import CudaCopyEngine

    if not simulate:
        _cuda()
        return CudaCopyEngine(route=route)
    if route == "cudart":
        raise RuntimeError("cuda-python has no CPU stand-in")
    from pytest_nvlink.measure.cuda_simulated import make_torch

    return CudaCopyEngine(route=route, torch_module=make_torch())


def _queue_depth(engine: Any, nbytes: int) -> list[dict[str, Any]]:
    from pytest_nvlink.measure.cuda_engine import BlockerTooShort

    rows = []
    for depth in QUEUE_DEPTHS:
        started = time.perf_counter()
        try:
            timed = engine.run_blocked([(0, 0)], nbytes, depth)
        except BlockerTooShort as exc:
            rows.append({"copies": depth, "blocker_too_short": str(exc), "wall_s": time.perf_counter() - started})
            continue
        rows.append(
            {
                "copies": depth,
                "enqueue_ms": timed.enqueue_s * 1e3,
                "spin_intended_ms": timed.block_s * 1e3,
                "spin_real_ms": timed.spin_s * 1e3,
                "tries": timed.tries,
                "copies_ms": timed.gpu_s * 1e3,
                "wall_s": time.perf_counter() - started,
            }
        )
    timed = engine._run_once([(0, 0)], nbytes, DEEP_QUEUE, DEEP_SPIN_S)  # one try: the retries cost tens of seconds
    rows.append(
        {
            "copies": DEEP_QUEUE,
            "one_try_only": True,
            "enqueue_ms": timed.enqueue_s * 1e3,
            "spin_intended_ms": timed.block_s * 1e3,
            "spin_real_ms": timed.spin_s * 1e3,
            "host_blocked_past_the_spin": timed.enqueue_s >= timed.spin_s,
        }
    )
    return rows


def _calibration(engine: Any) -> dict[str, float]:
    idle = engine.cycles_per_second(0)
    engine.copy(0, 0, 256 * MIB, 20)  # load the GPU: clocks rise
    warm = engine.calibrate(0)
    return {"idle_cycles_per_s": idle, "warm_cycles_per_s": warm, "warm_over_idle": warm / idle}


def _floors(engine: Any) -> dict[str, float]:
    from pytest_nvlink.measure.cuda_engine import LATENCY_BYTES

    blocked = engine.copy(0, 0, LATENCY_BYTES, 100)
    naive = engine.run_naive(0, 0, LATENCY_BYTES, 100)
    bw_blocked = engine.copy(0, 0, 256 * MIB, 20)
    bw_naive = engine.run_naive(0, 0, 256 * MIB, 20)
    return {
        "latency_us_blocked": blocked / 100 * 1e6,
        "latency_us_naive": naive / 100 * 1e6,
        "d2d_gbps_blocked": 2 * 20 * 256 * MIB / bw_blocked / 1e9,  # read + write, as nvbandwidth counts D2D
        "d2d_gbps_naive": 2 * 20 * 256 * MIB / bw_naive / 1e9,
    }


def _proof(engine: Any) -> dict[str, Any]:
    """The proof copy as the campaign issues it: chunks, each synchronized, never one deep queue."""
    from pytest_nvlink.measure.p2p import proof_chunks

    seconds_per_copy = engine.copy(0, 0, 256 * MIB, 4) / 4
    chunks = proof_chunks(1.0, seconds_per_copy, 20)
    started = time.perf_counter()
    for chunk in chunks:
        engine.copy_unblocked(0, 0, 256 * MIB, chunk)
    return {
        "copies": sum(chunks),
        "chunks": len(chunks),
        "largest_chunk": max(chunks),
        "seconds_per_copy": seconds_per_copy,
        "wall_s": time.perf_counter() - started,
    }


def p2p_machinery(simulate: bool) -> Result:
    """Queue depth on both routes, real spin vs enqueue, calibration idle vs warm, floors, proof chunking."""
    routes: Result = {}
    for route in ("cudart", "torch"):
        try:
            engine = _engine(route, simulate)
        except RuntimeError as exc:
            routes[route] = f"could not run: {exc}"
            continue
        routes[route] = {
            "engine": engine.name,
            "calibration": _calibration(engine),
            "queue_depth_256mib": _queue_depth(engine, 256 * MIB),
            "queue_depth_16b": _queue_depth(engine, 16),
            "floors": _floors(engine),
            "proof": _proof(engine),
        }
    if all(isinstance(value, str) for value in routes.values()):
        raise CouldNotRun("; ".join(f"{route}: {text}" for route, text in routes.items()))
    return routes
