"""A stand-in for the part of ``torch`` the CUDA copy engine uses: a simulated GPU timeline, in real time.

For tests and the device check's ``--simulate``: :func:`make_torch` returns a module-like object
with ``torch.cuda`` streams, events, ``_sleep`` and ``copy_``, so :class:`CudaCopyEngine` runs its
real blocker, retry and chunking logic without a GPU. What it models, because the engine's
methodology depends on it:

* every stream is a queue on a GPU clock shared with the host's ``perf_counter``: work starts when
  the stream is free and the host has launched it;
* a stream holds at most ``queue_limit`` unfinished operations; launching one more **blocks the
  host** until the oldest finishes (CUDA's launch queue fills the same way);
* the spin kernel's clock is ``idle_hz`` until the GPU has been busy for ``warmup_s``, then
  ``warm_hz`` (a calibration on an idle GPU overestimates the spin on a warm one);
* copies take ``nbytes / bytes_per_s`` plus ``copy_overhead_s``.
"""

from __future__ import annotations

import itertools
import time
import types
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SimulatedGpu:
    bytes_per_s: float = 1e12
    copy_overhead_s: float = 2e-6
    idle_hz: float = 0.4e9
    warm_hz: float = 1.98e9
    warmup_s: float = 0.02
    queue_limit: int = 1024
    busy_s: float = 0.0
    deepest: int = 0  # the most unfinished operations any stream held at once
    streams: list[SimulatedStream] = field(default_factory=list)
    current: list[SimulatedStream] = field(default_factory=list)

    def clock_hz(self) -> float:
        return self.warm_hz if self.busy_s >= self.warmup_s else self.idle_hz


_POINTERS = itertools.count(1 << 20)


class SimulatedStream:
    def __init__(self, gpu: SimulatedGpu, device: int = 0) -> None:
        self.gpu, self.device = gpu, device
        self.free_at = 0.0  # perf_counter seconds when the last queued operation ends
        self.pending: deque[float] = deque()
        self.cuda_stream = next(_POINTERS)
        gpu.streams.append(self)

    def launch(self, duration_s: float) -> float:
        """Queue an operation; returns its start time. Blocks the host while the queue is full."""
        now = time.perf_counter()
        while self.pending and self.pending[0] <= now:
            self.pending.popleft()
        if len(self.pending) >= self.gpu.queue_limit:
            _sleep_until(self.pending[0])
            now = time.perf_counter()
            self.pending.popleft()
        start = max(self.free_at, now)
        self.free_at = start + duration_s
        self.gpu.busy_s += duration_s
        self.pending.append(self.free_at)
        self.gpu.deepest = max(self.gpu.deepest, len(self.pending))
        return start

    def wait_event(self, event: SimulatedEvent) -> None:
        self.free_at = max(self.free_at, event.at or 0.0)


def _sleep_until(moment: float) -> None:
    delay = moment - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


class SimulatedEvent:
    def __init__(self, gpu: SimulatedGpu, enable_timing: bool = False) -> None:
        self.gpu = gpu
        self.at: float | None = None

    def record(self, stream: SimulatedStream | None = None) -> None:
        target = stream or self.gpu.current[-1]
        self.at = target.launch(0.0)

    def synchronize(self) -> None:
        _sleep_until(self.at or 0.0)

    def elapsed_time(self, end: SimulatedEvent) -> float:
        if self.at is None or end.at is None:
            raise RuntimeError("event not recorded")
        return (end.at - self.at) * 1e3


class SimulatedTensor:
    def __init__(self, gpu: SimulatedGpu, nbytes: int) -> None:
        self.gpu, self.nbytes, self._ptr = gpu, nbytes, next(_POINTERS)

    def data_ptr(self) -> int:
        return self._ptr

    def copy_(self, source: SimulatedTensor, non_blocking: bool = False) -> SimulatedTensor:
        gpu = self.gpu
        gpu.current[-1].launch(source.nbytes / gpu.bytes_per_s + gpu.copy_overhead_s)
        return self


def make_torch(gpu: SimulatedGpu | None = None, devices: int = 2) -> Any:
    """A ``torch`` stand-in over one simulated timeline (``devices`` CUDA indices share it)."""
    sim = gpu or SimulatedGpu()
    sim.current[:] = [SimulatedStream(sim)]

    @contextmanager
    def stream(target: SimulatedStream) -> Iterator[None]:
        sim.current.append(target)
        try:
            yield
        finally:
            sim.current.pop()

    @contextmanager
    def device(index: int) -> Iterator[None]:
        yield

    def sleep(cycles: int) -> None:
        sim.current[-1].launch(cycles / sim.clock_hz())

    def synchronize(index: int | None = None) -> None:
        _sleep_until(max((s.free_at for s in sim.streams), default=0.0))

    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: devices,
        Stream=lambda device=0: SimulatedStream(sim, device),
        Event=lambda enable_timing=False: SimulatedEvent(sim, enable_timing),
        stream=stream,
        device=device,
        _sleep=sleep,
        synchronize=synchronize,
        can_device_access_peer=lambda a, b: True,
    )
    return types.SimpleNamespace(
        cuda=cuda,
        uint8="uint8",
        # pin_memory: a host buffer; copies to or from it run on the same timeline at the same rate.
        ones=lambda nbytes, dtype=None, device=None, pin_memory=False: SimulatedTensor(sim, nbytes),
        simulated_gpu=sim,
    )
