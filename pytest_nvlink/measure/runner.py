"""A lazy measurement session: nothing runs until a test asks, then each campaign runs once.

``MeasurementSession.p2p`` runs the whole P2P campaign on first use (one watched child process);
``MeasurementSession.collective`` runs every collective of ``Suite.measure.collectives`` on first
use (one watched process group). Results are cached; every question gets an answer, with ``error``
set when the figure could not be measured. GPU numbers are CUDA indices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_nvlink.config.suites import Measure
from pytest_nvlink.config.thresholds import Thresholds
from pytest_nvlink.measure.busbw import MIB
from pytest_nvlink.measure.collectives import CollectiveRun, CollectiveSpec, run_collectives
from pytest_nvlink.measure.p2p import EngineFactory, P2PPlan, TorchCopyEngine, run_p2p
from pytest_nvlink.measure.p2p_counters import CounterReader, CounterReaderFactory, NoTraffic, TrafficSample
from pytest_nvlink.model import CollectiveMeasurement, Measurements, P2PMeasurement

DEFAULT_COLLECTIVE_SIZE_MIB = 256
Progress = Callable[[str], None]
CudaProbe = Callable[[], "tuple[int, ...] | str"]


def sizes_from_thresholds(
    thresholds: Thresholds, ops: Sequence[str], default_mib: int = DEFAULT_COLLECTIVE_SIZE_MIB
) -> dict[str, int]:
    """S in bytes per op, from ``collectives.<op>.size_mib`` (nccl-tests' ``size`` column)."""
    return {op: int(thresholds.value(f"collectives.{op}.size_mib", default_mib)) * MIB for op in ops}


def cuda_devices() -> tuple[int, ...] | str:
    """The CUDA indices torch sees, or why there are none (imports torch)."""
    try:
        import torch  # only when a measurement is requested
    except ImportError as exc:
        return f"torch is not importable: {exc}"
    if not torch.cuda.is_available():
        return "CUDA is not available to torch"
    return tuple(range(torch.cuda.device_count()))


@dataclass(frozen=True)
class NvmlCounterFactory:
    """Builds, inside the measuring child, a counter reader over ``nvml_counters.read_traffic``.

    ``gpus`` maps CUDA index -> PCI bus id or UUID (from the probe); without it the mapping comes
    from torch's device UUIDs (the child has torch loaded already).
    """

    gpus: tuple[tuple[int, str], ...] = ()

    def __call__(self) -> CounterReader:
        from pytest_nvlink.sources.live import counters as nvml_counters
        from pytest_nvlink.sources.live import fields as nvml_fields  # light, but only needed in the child

        try:
            nvml = nvml_fields.import_pynvml()
            nvml.nvmlInit()
            names = dict(self._names())
            handles = {cuda: nvml_counters.handle_for(nvml, name) for cuda, name in names.items()}
        except Exception as exc:
            return NoTraffic.reader(f"NVML traffic counters unavailable: {type(exc).__name__}: {exc}")

        def read(gpu: int) -> TrafficSample:
            if gpu not in handles:
                return NoTraffic(f"no NVML handle for CUDA device {gpu}")
            traffic = nvml_counters.read_traffic(nvml, handles[gpu])
            # A stale counter is named by the GPU NVML knows it as, not only by its CUDA index.
            stamps = tuple((f"{label} of GPU {names[gpu]}", stamp) for label, stamp in traffic.stamps)
            return dataclasses.replace(traffic, stamps=stamps)

        return read

    def _names(self) -> tuple[tuple[int, str], ...]:
        if self.gpus:
            return self.gpus
        import torch  # the child already has it loaded

        count = torch.cuda.device_count()
        return tuple((index, str(torch.cuda.get_device_properties(index).uuid)) for index in range(count))


def _unit(kind: str) -> str:
    return "us" if kind == "latency" else "GB/s"


class MeasurementSession:
    """Lazily measured figures for one pytest session.

    ``backend`` None picks ``"nccl"`` when CUDA is available (one rank per GPU; a single GPU gives a
    valid world of one) and otherwise reports every collective as not measured. ``"gloo"`` runs
    the same harness on CPU with ``world_size`` ranks (default 2): it checks the harness, not NVLink.
    """

    def __init__(
        self,
        measure: Measure,
        *,
        backend: str | None = None,
        gpus: Sequence[int] | None = None,
        world_size: int | None = None,
        collective_sizes: Mapping[str, int] | None = None,
        progress: Progress | None = None,
        engine_factory: EngineFactory | None = None,
        counter_factory: CounterReaderFactory | None = None,
        op_timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cuda_probe: CudaProbe = cuda_devices,
    ) -> None:
        if backend not in (None, "nccl", "gloo"):
            raise ValueError(f"backend must be 'nccl' or 'gloo', got {backend!r}")
        self.measure = measure
        self.requested_backend = backend
        self._gpus = tuple(gpus) if gpus is not None else None
        self._world_size = world_size
        self._sizes = dict(collective_sizes or {})
        self._progress = progress
        self._engine_factory = engine_factory
        self._counter_factory = counter_factory
        self._op_timeout_s = op_timeout_s
        self._env = tuple(sorted((env or {}).items()))
        self._cuda_probe = cuda_probe
        self._cuda: tuple[int, ...] | str | None = None
        self._p2p: list[P2PMeasurement] | None = None
        self._p2p_reason: str | None = None
        self._collectives: CollectiveRun | None = None

    # --- discovery ---

    def _devices(self) -> tuple[int, ...] | str:
        if self._gpus is not None:
            return self._gpus
        if self._cuda is None:
            self._cuda = self._cuda_probe()
        return self._cuda

    @property
    def backend(self) -> str | None:
        """The collective backend this session uses; None when there is none (no CUDA)."""
        if self.requested_backend == "gloo":
            return "gloo"
        return "nccl" if not isinstance(self._devices(), str) and self._devices() else None

    # --- P2P ---

    def p2p_measurements(self) -> list[P2PMeasurement]:
        if self._p2p is None:
            self._p2p = self._run_p2p()
        return self._p2p

    def _run_p2p(self) -> list[P2PMeasurement]:
        devices = self._devices()
        if isinstance(devices, str):
            self._p2p_reason = f"not measured: {devices}"
            return []
        if len(devices) < 2:
            self._p2p_reason = f"not measured: P2P needs at least 2 GPUs, found {len(devices)}"
            return []
        counters = self._counter_factory
        if counters is None and self._engine_factory is None:
            counters = NvmlCounterFactory()
        return run_p2p(
            P2PPlan.from_measure(devices, self.measure),
            self._engine_factory or TorchCopyEngine,
            timeout_s=float(self.measure.timeout_s),
            counter_factory=counters,
            progress=self._progress,
        )

    def p2p(self, src: int, dst: int, kind: str) -> P2PMeasurement:
        """One figure for the ordered pair; bidirectional figures match either order."""
        results = self.p2p_measurements()
        wanted = {(src, dst)} | ({(dst, src)} if kind == "bidirectional" else set())
        for measurement in results:
            if measurement.kind == kind and (measurement.src, measurement.dst) in wanted:
                return measurement
        reason = self._p2p_reason or f"not measured: gpu{src}->gpu{dst} {kind} is not in the campaign"
        return P2PMeasurement(src, dst, kind, None, _unit(kind), error=reason)

    # --- collectives ---

    def collective_run(self) -> CollectiveRun:
        if self._collectives is None:
            self._collectives = self._run_collectives()
        return self._collectives

    def _collective_spec(self) -> CollectiveSpec | str:
        backend = self.backend
        if backend is None:
            devices = self._devices()
            why = devices if isinstance(devices, str) else "no GPU found"
            return f"not measured: {why}; NCCL needs CUDA (backend='gloo' only exercises the harness on CPU)"
        if backend == "gloo":
            world, devices = self._world_size or (len(self._gpus) if self._gpus else 2), ()
        else:
            found = self._devices()
            assert not isinstance(found, str)
            devices = found[: self._world_size] if self._world_size else found
            world = len(devices)
        sizes = {op: self._sizes.get(op, DEFAULT_COLLECTIVE_SIZE_MIB * MIB) for op in self.measure.collectives}
        return CollectiveSpec(
            backend=backend,
            world_size=world,
            sizes=tuple(sizes.items()),
            iterations=self.measure.collective_iterations,
            warmup=self.measure.collective_warmup,
            timeout_s=float(self.measure.timeout_s),
            op_timeout_s=self._op_timeout_s,
            devices=tuple(devices),
            env=self._env,
        )

    def _run_collectives(self) -> CollectiveRun:
        spec = self._collective_spec()
        if isinstance(spec, str):
            entries = [
                CollectiveMeasurement(op, self._sizes.get(op, 0), 0, None, None, None, error=spec)
                for op in self.measure.collectives
            ]
            return CollectiveRun(entries)
        return run_collectives(spec, self._progress)

    def collective(self, op: str) -> CollectiveMeasurement:
        run = self.collective_run()
        found = next((m for m in run.measurements if m.op == op), None)
        if found is not None:
            return found
        reason = f"not measured: {op} is not in the suite's measure.collectives"
        return CollectiveMeasurement(op, self._sizes.get(op, 0), 0, None, None, None, error=reason)

    def measurements(self) -> Measurements:
        """Both campaigns (running whichever has not run yet)."""
        run = self.collective_run()
        return Measurements(p2p=list(self.p2p_measurements()), collectives=list(run.measurements), nccl=run.nccl)
