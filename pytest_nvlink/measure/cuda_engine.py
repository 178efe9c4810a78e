"""The CUDA copy engine of the P2P campaign, timed the way the figures it is judged against were timed.

The thresholds cite CUDA samples' p2pBandwidthLatencyTest and nvbandwidth. Both queue every copy of a
measurement behind a kernel that holds the stream until all of them are enqueued, record the start
event after that kernel, and time on the GPU with events, so launch gaps and host jitter stay out
of the window (p2pBandwidthLatencyTest: ``delay<<<1,1>>>`` on a host flag, then ``cudaEventRecord``;
nvbandwidth: a stream-blocker kernel). Here the blocker is ``torch.cuda._sleep`` (a clock64 spin of
a given cycle count), sized from a calibration and checked after each run: when enqueueing took
longer than the spin, the run is repeated with a longer spin instead of reporting a window that
may contain launch gaps. The spin's *real* length is measured (an event before it, one after it):
it is compared with the enqueue time, because a spin calibrated on an idle GPU runs several times
shorter once the clocks rise, and a figure whose copies may have started before the spin ended is
retried, not reported. A retry also recalibrates the spin from what the last one measured.

Copy route. torch's cross-device ``copy_`` adds a two-way barrier between the two devices' current
streams around every copy (aten/src/ATen/native/cuda/Copy.cu: "We perform a two-way barrier between
both devices' streams before the copy"). Latency is then the copy plus two event waits. The
``cudaMemcpyPeerAsync`` route (NVIDIA's ``cuda-python`` bindings, an optional dependency) issues the
raw peer copy the anchors issue, with no barrier: it is preferred when importable. Without it the
engine falls back to ``copy_`` with the destination's current stream pointed at an idle stream, so
the barrier never serializes the two directions of a bidirectional run; its name says which route
produced a figure (``source`` of every measurement). A cuda-python that cannot run on this driver
(cuda-python 13 needs an R580+ driver) fails its first call: the engine then falls back to the
torch route for good and says so in its name, so every figure after it names the route it took.

A bidirectional run starts both directions behind one blocker (the second stream waits on the start
event) and times the union (the first stream waits on the second's end), as p2pBandwidthLatencyTest
does with cross-stream event waits. Its figure is the **sum** of both directions.

torch (and cuda-python) are imported only when an engine is built, in the measuring child process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

TORCH_ROUTE = "torch copy_ (two-way barrier per copy)"
LATENCY_BYTES = 16  # one int4, p2pBandwidthLatencyTest's latency copy (numElems = 4 ints)
MIN_BLOCK_S = 0.002
MAX_BLOCK_TRIES = 4
SPIN_MARGIN = 0.8  # enqueueing must end within this share of the spin's real length
CALIBRATION_CYCLES = 10_000_000


class BlockerTooShort(RuntimeError):
    """Enqueueing outlasted the blocker even after retries: the window would contain launch gaps."""


@dataclass(frozen=True)
class Timed:
    """One blocked run: GPU seconds between the start and end events, host seconds spent enqueueing."""

    gpu_s: float
    enqueue_s: float
    block_s: float  # the spin asked for
    spin_s: float = 0.0  # the spin's real length, between events on the GPU
    tries: int = 1


def import_cudart() -> Any | None:
    """cuda-python's runtime bindings (``cuda.bindings.runtime``, or ``cuda.cudart`` before 12.6); None if absent."""
    try:
        from cuda.bindings import runtime  # optional, measuring child only

        return runtime
    except Exception:  # noqa: S110 - absent, or bindings that refuse this driver: try the old module
        pass
    try:
        from cuda import cudart

        return cudart
    except Exception:  # ImportError, or bindings that refuse this driver when loaded
        return None


def _check(result: Any, what: str) -> Any:
    """cuda-python returns ``(error, *values)``; raise on an error other than success."""
    error = result[0] if isinstance(result, tuple) else result
    if int(error) != 0:
        raise RuntimeError(f"{what} failed: {error}")
    return result[1:] if isinstance(result, tuple) else ()


class CudaCopyEngine:
    """Blocked, event-timed peer copies between CUDA devices (indices as torch numbers them).

    ``route``: ``"auto"`` (cudaMemcpyPeerAsync when cuda-python imports, else torch ``copy_``),
    ``"cudart"`` (fail without cuda-python) or ``"torch"``.
    """

    bidirectional_sum = True

    def __init__(self, route: str = "auto", *, torch_module: Any = None, cudart: Any = None) -> None:
        if torch_module is None:
            import torch as torch_module  # heavy: only ever in the measuring child

        if not torch_module.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch")
        self._torch: Any = torch_module
        if cudart is None and route in ("auto", "cudart"):
            cudart = import_cudart()
        self._cudart = cudart if route in ("auto", "cudart") else None
        if route == "cudart" and self._cudart is None:
            raise RuntimeError("cuda-python is not installed (pip install cuda-python)")
        self._cudart_proven = False  # a cudart call has succeeded: later errors are real errors
        self.name = "cudaMemcpyPeerAsync" if self._cudart is not None else TORCH_ROUTE
        self._buffers: dict[tuple[int, str, int], Any] = {}
        self._streams: dict[tuple[int, str], Any] = {}
        self._cycles_per_s: dict[int, float] = {}
        self._enqueue_s: dict[tuple[int, int], float] = {}
        self._peers: set[tuple[int, int]] = set()
        self._lock = threading.Lock()
        # Told "enqueue" and "sync" as a copy reaches them (the campaign names where a hung pair stopped).
        self.step: Callable[[str], None] | None = None

    def _step(self, step: str) -> None:
        if self.step is not None:
            self.step(step)

    # --- resources ---

    def _buffer(self, device: int, role: str, nbytes: int) -> Any:
        with self._lock:
            key = (device, role, nbytes)
            if key not in self._buffers:
                torch = self._torch
                self._buffers[key] = torch.ones(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
            return self._buffers[key]

    def _stream(self, device: int, role: str = "copy") -> Any:
        with self._lock:
            if (device, role) not in self._streams:
                self._streams[(device, role)] = self._torch.cuda.Stream(device=device)
            return self._streams[(device, role)]

    def _enable_peer(self, src: int, dst: int) -> None:
        """Peer access both ways (cudaMemcpyPeerAsync stages through the host without it)."""
        if self._cudart is None or src == dst or (src, dst) in self._peers:
            return
        for device, peer in ((src, dst), (dst, src)):
            if self._torch.cuda.can_device_access_peer(device, peer):
                _check(self._cudart.cudaSetDevice(device), f"cudaSetDevice({device})")
                error = self._cudart.cudaDeviceEnablePeerAccess(peer, 0)[0]
                if int(error) not in (0, 704):  # 704: cudaErrorPeerAccessAlreadyEnabled
                    raise RuntimeError(f"cudaDeviceEnablePeerAccess({device} -> {peer}) failed: {error}")
        self._peers.add((src, dst))

    def _fall_back(self, exc: Exception) -> None:
        """cudart failed before any call of it succeeded: use torch's copy_ from now on, and say so."""
        self._cudart = None
        self.name = f"{TORCH_ROUTE}; cudaMemcpyPeerAsync failed on its first call: {exc}"

    # --- the blocker ---

    def cycles_per_second(self, device: int) -> float:
        """GPU clock rate seen by the spin kernel, measured once per device with events."""
        if device not in self._cycles_per_s:
            self.calibrate(device)
        return self._cycles_per_s[device]

    def calibrate(self, device: int) -> float:
        """Measure the spin's clock rate now (on an idle GPU it reads low; warm, higher)."""
        torch = self._torch
        with torch.cuda.device(device), torch.cuda.stream(self._stream(device, "calibrate")):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(CALIBRATION_CYCLES)
            end.record()
        self._step("calibration sync")
        end.synchronize()
        seconds = float(start.elapsed_time(end)) / 1e3
        self._cycles_per_s[device] = CALIBRATION_CYCLES / max(seconds, 1e-6)
        return self._cycles_per_s[device]

    # --- copies ---

    def _issue(self, src: int, dst: int, nbytes: int, iterations: int, stream: Any) -> None:
        torch = self._torch
        source, target = self._buffer(src, "send", nbytes), self._buffer(dst, "recv", nbytes)
        if self._cudart is not None:
            handle = stream.cuda_stream
            dst_ptr, src_ptr = target.data_ptr(), source.data_ptr()
            for _ in range(iterations):
                _check(
                    self._cudart.cudaMemcpyPeerAsync(dst_ptr, dst, src_ptr, src, nbytes, handle), "cudaMemcpyPeerAsync"
                )
            return
        # copy_'s barrier records on the destination's current stream: an idle one, never the other
        # direction's stream, so a bidirectional run is not serialized by it.
        with torch.cuda.stream(self._stream(dst, "barrier-sink")), torch.cuda.device(src), torch.cuda.stream(stream):
            for _ in range(iterations):
                target.copy_(source, non_blocking=True)

    def run_blocked(self, lanes: Sequence[tuple[int, int]], nbytes: int, iterations: int) -> Timed:
        """Copy ``iterations`` x ``nbytes`` on every (src, dst) lane, all behind one blocker; time the union."""
        try:
            timed = self._run_blocked(lanes, nbytes, iterations)
        except BlockerTooShort:
            raise
        except Exception as exc:
            if self._cudart is None or self._cudart_proven:
                raise
            self._fall_back(exc)
            return self._run_blocked(lanes, nbytes, iterations)
        self._cudart_proven = self._cudart is not None
        return timed

    def _run_blocked(self, lanes: Sequence[tuple[int, int]], nbytes: int, iterations: int) -> Timed:
        key = (len(lanes), iterations)
        guess = self._enqueue_s.get(key, 20e-6 * iterations * len(lanes))
        block_s = max(MIN_BLOCK_S, 3 * guess)
        for tries in range(1, MAX_BLOCK_TRIES + 1):
            timed = self._run_once(lanes, nbytes, iterations, block_s)
            self._enqueue_s[key] = timed.enqueue_s
            if timed.enqueue_s < SPIN_MARGIN * timed.spin_s:
                return Timed(timed.gpu_s, timed.enqueue_s, timed.block_s, timed.spin_s, tries)
            if timed.spin_s > 0:  # the spin ran at the warm clock: size the next one by it
                self._cycles_per_s[lanes[0][0]] *= timed.block_s / timed.spin_s
            block_s = 4 * timed.enqueue_s
        raise BlockerTooShort(
            f"enqueueing {iterations} copies took {timed.enqueue_s * 1e3:.1f} ms, longer than the "
            f"{timed.spin_s * 1e3:.1f} ms the blocker really spun ({timed.block_s * 1e3:.1f} ms asked), "
            f"{MAX_BLOCK_TRIES} times (busy host, or a queue deep enough to block the host?)"
        )

    def _run_once(self, lanes: Sequence[tuple[int, int]], nbytes: int, iterations: int, block_s: float) -> Timed:
        torch = self._torch
        for src, dst in lanes:
            self._enable_peer(src, dst)
            torch.cuda.synchronize(src)
            torch.cuda.synchronize(dst)
        lead = lanes[0][0]
        streams = [self._stream(src) for src, _ in lanes]
        cycles = int(self.cycles_per_second(lead) * block_s)
        with torch.cuda.device(lead), torch.cuda.stream(streams[0]):
            spin_start = torch.cuda.Event(enable_timing=True)
            spin_start.record()
            torch.cuda._sleep(cycles)
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        for stream in streams[1:]:
            stream.wait_event(start)  # every lane starts when the blocker ends
        self._step("enqueue")
        begin = time.perf_counter()
        for (src, dst), stream in zip(lanes, streams, strict=True):
            self._issue(src, dst, nbytes, iterations, stream)
        enqueue_s = time.perf_counter() - begin
        for (src, _), stream in zip(lanes[1:], streams[1:], strict=True):
            with torch.cuda.device(src):
                done = torch.cuda.Event()
                done.record(stream)
            streams[0].wait_event(done)  # the end event closes the union of all lanes
        with torch.cuda.device(lead):
            end = torch.cuda.Event(enable_timing=True)
            end.record(streams[0])
        self._step("sync")
        end.synchronize()
        spin_s = float(spin_start.elapsed_time(start)) / 1e3
        return Timed(float(start.elapsed_time(end)) / 1e3, enqueue_s, block_s, spin_s)

    def copy_unblocked(self, src: int, dst: int, nbytes: int, iterations: int) -> None:
        """``iterations`` copies with no blocker and no timing, then a sync (the path proof's chunks)."""
        torch = self._torch
        stream = self._stream(src)
        self._step("enqueue")
        try:
            self._enable_peer(src, dst)
            self._issue(src, dst, nbytes, iterations, stream)
        except Exception as exc:
            if self._cudart is None or self._cudart_proven:
                raise
            self._fall_back(exc)
            self._issue(src, dst, nbytes, iterations, stream)
        self._step("sync")
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)

    def run_naive(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
        """The old method, for the device check's comparison: events around a loop, nothing blocking."""
        torch = self._torch
        stream = self._stream(src)
        torch.cuda.synchronize(src)
        with torch.cuda.device(src):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
        self._issue(src, dst, nbytes, iterations, stream)
        with torch.cuda.device(src):
            end.record(stream)
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3

    # --- the CopyEngine protocol ---

    def copy(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
        if iterations == 0:
            return 0.0
        return self.run_blocked([(src, dst)], nbytes, iterations).gpu_s

    def copy_bidirectional(self, a: int, b: int, nbytes: int, iterations: int) -> float:
        if iterations == 0:
            return 0.0
        return self.run_blocked([(a, b), (b, a)], nbytes, iterations).gpu_s

    def can_access_peer(self, src: int, dst: int) -> bool | None:
        return bool(self._torch.cuda.can_device_access_peer(src, dst))
