"""The copy engine of the host-link campaign: pinned host memory <-> one GPU, timed as nvbandwidth times it.

nvbandwidth's ``host_to_device_memcpy_ce`` / ``device_to_host_memcpy_ce`` copy between a pinned host
buffer and device memory with ``cudaMemcpyAsync`` (the copy engine), queued behind a spin kernel that
holds the stream until every copy is enqueued, and time the copies between GPU events recorded after
the spin. This engine does the same through torch: ``copy_(non_blocking=True)`` between a pinned
tensor and a device tensor is one ``cudaMemcpyAsync`` on the current stream. As in the P2P engine
(:mod:`pytest_nvlink.measure.cuda_engine`), the spin's *real* length is measured between an event
before it and one after it and compared with the time spent enqueueing; a run whose copies may have
started before the spin ended is repeated with a longer spin, never reported.

Queue depth stays where the references keep it: at most :data:`MAX_QUEUED` copies per lane behind one
spin (nvbandwidth loops 16 times), so the host never blocks on a full launch queue.

The bidirectional run starts both directions behind one spin on two streams; each direction is timed
on its own (its start event to its own end event), as nvbandwidth's ``*_bidirectional_memcpy_ce``
report the measured direction while the other runs.

The pinned host buffers are allocated when the engine is built: build it after the process is bound
to the GPU's NUMA node (:mod:`pytest_nvlink.measure.host_numa`), so first touch places them there.
torch is imported only here, in the measuring child.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_nvlink.measure.cuda_engine import (
    CALIBRATION_CYCLES,
    MAX_BLOCK_TRIES,
    MIN_BLOCK_S,
    SPIN_MARGIN,
    BlockerTooShort,
)

MAX_QUEUED = 16  # copies queued behind one spin, per lane: nvbandwidth's loop count
TORCH_HOST_ROUTE = "torch copy_ pinned host memory (cudaMemcpyAsync, copy engine)"


@dataclass(frozen=True)
class LaneTimes:
    """One blocked run: GPU seconds per lane (from the shared start), enqueue time, the spin asked for and measured."""

    lane_s: tuple[float, ...]
    enqueue_s: float
    block_s: float
    spin_s: float
    tries: int = 1


class TorchHostEngine:
    """Blocked, event-timed copies between pinned host buffers and one CUDA device (``cuda_index``)."""

    name = TORCH_HOST_ROUTE

    def __init__(self, cuda_index: int, nbytes: int, *, torch_module: Any = None) -> None:
        if torch_module is None:
            import torch as torch_module  # heavy: only ever in the measuring child

        if not torch_module.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch")
        torch = torch_module
        self._torch: Any = torch
        self.device = cuda_index
        self.nbytes = nbytes
        where = f"cuda:{cuda_index}"
        # Two host buffers (one per direction) so the bidirectional run never reads what it writes.
        self._host_send = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
        self._host_recv = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
        self._dev_recv = torch.ones(nbytes, dtype=torch.uint8, device=where)
        self._dev_send = torch.ones(nbytes, dtype=torch.uint8, device=where)
        self._streams = [torch.cuda.Stream(device=cuda_index), torch.cuda.Stream(device=cuda_index)]
        self._cycles_per_s: float | None = None
        self._enqueue_s: dict[tuple[int, int], float] = {}

    def host_addresses(self) -> tuple[int, ...]:
        """Where the pinned host buffers start (for the NUMA placement check)."""
        return (int(self._host_send.data_ptr()), int(self._host_recv.data_ptr()))

    # --- the CopyEngine-like protocol of the campaign ---

    def h2d(self, iterations: int) -> LaneTimes:
        return self.run_blocked(("h2d",), iterations)

    def d2h(self, iterations: int) -> LaneTimes:
        return self.run_blocked(("d2h",), iterations)

    def bidirectional(self, iterations: int) -> LaneTimes:
        """Both at once: ``lane_s`` is (host->device, device->host)."""
        return self.run_blocked(("h2d", "d2h"), iterations)

    # --- the blocker ---

    def _calibrate(self) -> float:
        torch = self._torch
        with torch.cuda.device(self.device), torch.cuda.stream(self._streams[0]):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(CALIBRATION_CYCLES)
            end.record()
        end.synchronize()
        return CALIBRATION_CYCLES / max(float(start.elapsed_time(end)) / 1e3, 1e-6)

    def run_blocked(self, lanes: Sequence[str], iterations: int) -> LaneTimes:
        """``iterations`` copies on every lane behind one spin; retried with a longer spin if enqueueing outlasts it."""
        if not 0 < iterations <= MAX_QUEUED:
            raise ValueError(f"{iterations} copies per lane: the campaign queues 1..{MAX_QUEUED} behind one spin")
        if self._cycles_per_s is None:
            self._cycles_per_s = self._calibrate()
        key = (len(lanes), iterations)
        block_s = max(MIN_BLOCK_S, 3 * self._enqueue_s.get(key, 50e-6 * iterations * len(lanes)))
        for tries in range(1, MAX_BLOCK_TRIES + 1):
            timed = self._run_once(lanes, iterations, block_s)
            self._enqueue_s[key] = timed.enqueue_s
            if timed.enqueue_s < SPIN_MARGIN * timed.spin_s:
                return LaneTimes(timed.lane_s, timed.enqueue_s, timed.block_s, timed.spin_s, tries)
            if timed.spin_s > 0:  # the spin ran at the warm clock: size the next one by what it measured
                self._cycles_per_s *= timed.block_s / timed.spin_s
            block_s = 4 * timed.enqueue_s
        raise BlockerTooShort(
            f"enqueueing {iterations} host copies took {timed.enqueue_s * 1e3:.1f} ms, longer than the "
            f"{timed.spin_s * 1e3:.1f} ms the blocker really spun, {MAX_BLOCK_TRIES} times (busy host?)"
        )

    def _issue(self, lane: str, iterations: int) -> None:
        target, source = (self._dev_recv, self._host_send) if lane == "h2d" else (self._host_recv, self._dev_send)
        for _ in range(iterations):
            target.copy_(source, non_blocking=True)

    def _run_once(self, lanes: Sequence[str], iterations: int, block_s: float) -> LaneTimes:
        torch = self._torch
        torch.cuda.synchronize(self.device)
        assert self._cycles_per_s is not None
        streams = self._streams[: len(lanes)]
        with torch.cuda.device(self.device):
            with torch.cuda.stream(streams[0]):
                spin_start = torch.cuda.Event(enable_timing=True)
                spin_start.record()
                torch.cuda._sleep(int(self._cycles_per_s * block_s))
                start = torch.cuda.Event(enable_timing=True)
                start.record()
            for stream in streams[1:]:
                stream.wait_event(start)  # every lane starts when the spin ends
            begin = time.perf_counter()
            for lane, stream in zip(lanes, streams, strict=True):
                with torch.cuda.stream(stream):
                    self._issue(lane, iterations)
            enqueue_s = time.perf_counter() - begin
            ends = []
            for stream in streams:
                end = torch.cuda.Event(enable_timing=True)
                end.record(stream)
                ends.append(end)
        for end in ends:
            end.synchronize()
        lane_s = tuple(float(start.elapsed_time(end)) / 1e3 for end in ends)
        return LaneTimes(lane_s, enqueue_s, block_s, float(spin_start.elapsed_time(start)) / 1e3)


@dataclass(frozen=True)
class TorchHostEngineFactory:
    """Picklable: builds the engine in the measuring child, after the NUMA binding."""

    def __call__(self, cuda_index: int, nbytes: int) -> TorchHostEngine:
        return TorchHostEngine(cuda_index, nbytes)
