"""The host-link campaign: each GPU's pinned host<->device bandwidth, one watched child per GPU.

Per GPU, in a spawned child of its own (never the pytest process): bind to the GPU's NUMA node,
build the copy engine (which pins the host buffers, so first touch lands them on that node), then
host->device, device->host, and both at once, each as ``warmup`` untimed blocked runs and ``repeats``
timed ones of ``iterations`` copies; the figure is the median of the timed runs (nvbandwidth reports
one figure from several samples too). GPUs run one after the other, as nvbandwidth's host testcases
run one GPU at a time, so no two GPUs share the host's memory bandwidth.

Every step is bounded: a GPU whose child outlives ``gpu_timeout_s`` is killed, its missing figures
name the step it hung in, and the campaign goes on with the next GPU. A step that raises fails its
own direction only. GPU numbers: ``gpu`` is the NVML index, ``cuda_index`` what torch calls it.
"""

from __future__ import annotations

import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

from pytest_nvlink.measure import _proc
from pytest_nvlink.measure.host_copy import MAX_QUEUED, LaneTimes, TorchHostEngineFactory
from pytest_nvlink.measure.host_numa import NumaBinder, placement
from pytest_nvlink.model.host_link import HOST_LINK_DIRECTIONS, PINNED, HostLinkMeasurement

GB = 1e9
MIB = 1 << 20
Progress = Callable[[str], None]
# The runs of a GPU, in order: the step name and the figures it gives.
RUNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("h2d", ("h2d",)),
    ("d2h", ("d2h",)),
    ("bidir", ("bidir_h2d", "bidir_d2h")),
)


class HostEngine(Protocol):
    name: str

    def h2d(self, iterations: int) -> LaneTimes: ...
    def d2h(self, iterations: int) -> LaneTimes: ...
    def bidirectional(self, iterations: int) -> LaneTimes: ...


HostEngineFactory = Callable[[int, int], HostEngine]  # (cuda_index, nbytes) -> engine; picklable, called in the child


@dataclass(frozen=True)
class HostLinkTarget:
    gpu: int  # NVML index
    cuda_index: int
    numa_node: int | None  # the CPU NUMA node the GPU hangs off (Gpu.numa_node)


@dataclass(frozen=True)
class HostLinkPlan:
    targets: tuple[HostLinkTarget, ...]
    nbytes: int = 256 * MIB  # a large copy, as nvbandwidth's default buffer, so per-copy overheads vanish
    iterations: int = 8  # copies per timed run, queued behind one spin (<= MAX_QUEUED)
    warmup: int = 1  # untimed runs first (clocks up, buffers mapped)
    repeats: int = 3  # timed runs; the figure is their median
    gpu_timeout_s: float = 120.0  # one GPU's child, spawn and torch import included
    # The whole campaign's bound (the suite's measure.timeout_s); None: only each GPU's own bound.
    campaign_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.iterations <= MAX_QUEUED:
            raise ValueError(f"iterations must be 1..{MAX_QUEUED} (queue depth), got {self.iterations}")
        if self.repeats < 1 or self.warmup < 0 or self.nbytes <= 0 or self.gpu_timeout_s <= 0:
            raise ValueError("host-link plan needs repeats >= 1, warmup >= 0, nbytes > 0, gpu_timeout_s > 0")

    def conditions(self) -> dict[str, str]:
        return {
            "size_mib": f"{self.nbytes / MIB:g}",
            "copies_per_run": str(self.iterations),
            "warmup_runs": str(self.warmup),
            "timed_runs": str(self.repeats),
            "statistic": "median of the timed runs",
            "memory": PINNED,  # model.host_link.is_pinned: only pinned figures meet a floor
        }


# --- one GPU, in its child -------------------------------------------------------------------


def _figures(plan: HostLinkPlan, engine: HostEngine, step: str) -> list[LaneTimes]:
    run = {"h2d": engine.h2d, "d2h": engine.d2h, "bidir": engine.bidirectional}[step]
    for _ in range(plan.warmup):
        run(plan.iterations)
    return [run(plan.iterations) for _ in range(plan.repeats)]


def _measured(plan: HostLinkPlan, runs: list[LaneTimes], lane: int) -> tuple[float | None, dict[str, str]]:
    nbytes = plan.nbytes * plan.iterations
    samples = [nbytes / times.lane_s[lane] / GB for times in runs if times.lane_s[lane] > 0]
    last = runs[-1]
    extra = {
        "samples_gbps": ",".join(f"{s:.2f}" for s in samples),
        "spin_ms": f"{last.spin_s * 1e3:.2f}",
        "enqueue_ms": f"{last.enqueue_s * 1e3:.2f}",
        "blocker_tries": str(max(times.tries for times in runs)),
    }
    return (statistics.median(samples) if len(samples) == len(runs) else None), extra


def measure_gpu(
    target: HostLinkTarget,
    plan: HostLinkPlan,
    engine_factory: HostEngineFactory,
    binder: NumaBinder,
    send: Callable[..., None],
) -> None:
    """Every figure of one GPU, sent as ``("result", dict)``; ``("step", name)`` before each step."""
    send("step", "bind to NUMA node")
    binding = binder.bind(target.numa_node)
    send("step", "open the CUDA device and pin the host buffers")
    engine = engine_factory(target.cuda_index, plan.nbytes)
    addresses = getattr(engine, "host_addresses", None)
    node, note = placement(binding, binder.pages_on(addresses()) if addresses is not None else None)
    base = {
        "gpu": target.gpu,
        "method": "ce",
        "host_numa_node": node,
        "source": engine.name,
        "bytes_copied": plan.nbytes * plan.iterations * plan.repeats,
    }
    for step, directions in RUNS:
        send("step", step)
        conditions = {**plan.conditions(), "numa_binding": note}
        try:
            runs = _figures(plan, engine, step)
        except Exception as exc:
            failed = {**base, "value": None, "error": f"{step} copies failed: {type(exc).__name__}: {exc}"}
            for direction in directions:
                send("result", {**failed, "direction": direction, "conditions": conditions})
            continue
        for lane, direction in enumerate(directions):
            value, extra = _measured(plan, runs, lane)
            why = None if value is not None else f"{step}: a timed run measured no time"
            figure = {**base, "direction": direction, "value": value, "error": why}
            send("result", {**figure, "conditions": {**conditions, **extra}})


def host_link_child(
    conn: Connection, target: HostLinkTarget, plan: HostLinkPlan, engine_factory: HostEngineFactory, binder: NumaBinder
) -> None:
    def send(*message: Any) -> None:
        conn.send(message)

    try:
        measure_gpu(target, plan, engine_factory, binder, send)
    except BaseException as exc:
        send("fatal", f"{type(exc).__name__}: {exc}", traceback.format_exc())
        raise
    send("done")
    conn.close()


# --- the parent: one child per GPU, each with its own deadline ---------------------------------


def run_host_link(
    plan: HostLinkPlan,
    engine_factory: HostEngineFactory | None = None,
    *,
    binder: NumaBinder | None = None,
    progress: Progress | None = None,
) -> list[HostLinkMeasurement]:
    """Every GPU of the plan, one after the other; every direction of every GPU gets a figure or an error."""
    factory = engine_factory or TorchHostEngineFactory()
    results: list[HostLinkMeasurement] = []
    ends = None if plan.campaign_timeout_s is None else time.monotonic() + plan.campaign_timeout_s
    for position, target in enumerate(plan.targets, 1):
        left = plan.gpu_timeout_s if ends is None else min(plan.gpu_timeout_s, ends - time.monotonic())
        if left <= 0:
            spent = f"not measured: the host-link campaign's {plan.campaign_timeout_s:g} s limit was spent before GPU"
            results += [
                HostLinkMeasurement(target.gpu, d, None, method="ce", error=f"{spent} {target.gpu}")
                for d in HOST_LINK_DIRECTIONS
            ]
            continue
        figures = _run_one(plan, target, factory, binder or NumaBinder(), left)
        results += figures
        if progress is not None:
            progress(f"host link {position}/{len(plan.targets)} gpu{target.gpu}: {_summary(figures)}")
    return results


def _run_one(
    plan: HostLinkPlan, target: HostLinkTarget, factory: HostEngineFactory, binder: NumaBinder, limit_s: float
) -> list[HostLinkMeasurement]:
    process, conn = _proc.start_child(
        host_link_child, (target, plan, factory, binder), name=f"pytest-nvlink-host-link-gpu{target.gpu}"
    )
    found: dict[str, HostLinkMeasurement] = {}
    state = {"step": "start the worker"}
    try:
        problem = _pump(conn, process, time.monotonic() + limit_s, found, state)
        if problem is None:
            process.join(10.0)  # let CUDA tear down before anything is killed
    finally:
        _proc.stop_all([process])
        conn.close()
    if problem == "timeout":
        problem = f"timed out after {limit_s:g} s during step '{state['step']}'"
    elif problem == "died":
        problem = f"host-link worker died with {_proc.describe_exit(process.exitcode)} during step '{state['step']}'"
    elif problem is not None:
        problem = f"{problem} (step '{state['step']}')"
    missing = problem or "not measured: the worker ended without this figure"
    return [
        found.get(direction) or HostLinkMeasurement(target.gpu, direction, None, method="ce", error=missing)
        for direction in HOST_LINK_DIRECTIONS
    ]


def _pump(
    conn: Connection, process: Any, deadline: float, found: dict[str, HostLinkMeasurement], state: dict[str, str]
) -> str | None:
    while True:
        message = _proc.next_message(conn, process, deadline)
        if isinstance(message, str):
            return message  # "timeout" or "died"
        if message[0] == "done":
            return None
        if message[0] == "fatal":
            return f"host-link worker failed: {message[1]}"
        if message[0] == "step":
            state["step"] = message[1]
        elif message[0] == "result":
            figure = HostLinkMeasurement(**message[1])
            found[figure.direction] = figure


def _summary(figures: list[HostLinkMeasurement]) -> str:
    parts = [f"{f.direction} {f.value:.1f} GB/s" if f.value is not None else f"{f.direction} error" for f in figures]
    errors = sorted({f.error for f in figures if f.error})
    return ", ".join(parts) + (f" ({errors[0]})" if errors else "")


def as_dicts(figures: list[HostLinkMeasurement]) -> list[dict[str, Any]]:
    """Plain dicts without empty fields (the device check's report)."""
    return [{k: v for k, v in asdict(f).items() if v is not None} for f in figures]
