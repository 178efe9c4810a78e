"""Live measurements for the plugin: run the measurement session and speak NVML indices.

The measurement code numbers GPUs as CUDA does; the node model, the suite and every test id use
NVML/nvidia-smi numbering. This module is the one place that translates between the two.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from itertools import permutations

from pytest_nvlink.config.suites import Suite
from pytest_nvlink.config.thresholds import Thresholds
from pytest_nvlink.measure.host_link import HostEngineFactory, HostLinkPlan, HostLinkTarget, run_host_link
from pytest_nvlink.measure.host_numa import NumaBinder
from pytest_nvlink.measure.p2p import EngineFactory
from pytest_nvlink.measure.p2p_counters import CounterReaderFactory
from pytest_nvlink.measure.runner import MeasurementSession, NvmlCounterFactory, sizes_from_thresholds
from pytest_nvlink.model import CollectiveMeasurement, NcclAudit, Node, P2PMeasurement
from pytest_nvlink.model.host_link import HOST_LINK_DIRECTIONS, HostLinkMeasurement
from pytest_nvlink.model.identity import gpu_problems

Progress = Callable[[str], None]
P2P_KINDS: tuple[str, ...] = ("unidirectional", "bidirectional", "latency")
UNITS = {"unidirectional": "GB/s", "bidirectional": "GB/s", "latency": "us"}


def _usable(node: Node, suite: Suite) -> list[int]:
    # A GPU the judges will not judge (lost, named by a probe error, counted twice) is not measured either.
    problems = gpu_problems(node)
    return [gpu.index for gpu in node.gpus if gpu.index not in problems and gpu.index < suite.gpu_count]


def measure_p2p(
    node: Node,
    suite: Suite,
    cuda_of: dict[int, int],
    progress: Progress,
    *,
    engine_factory: EngineFactory | None = None,
    counter_factory: CounterReaderFactory | None = None,
) -> list[P2PMeasurement]:
    """Every figure for every ordered pair of usable GPUs, in NVML indices; failures carry ``error``.

    ``engine_factory`` and ``counter_factory`` (picklable, called in the measuring child) default to
    the CUDA copy engine and NVML counters opened by the probe's bus ids.
    """
    usable = _usable(node, suite)
    mapped = [index for index in usable if index in cuda_of]
    counters = counter_factory or NvmlCounterFactory(
        tuple((cuda_of[i], _name(node, i)) for i in mapped if _name(node, i))
    )
    session = MeasurementSession(
        suite.measure,
        gpus=[cuda_of[i] for i in mapped],
        progress=progress,
        engine_factory=engine_factory,
        counter_factory=counters,
    )
    results = []
    for src, dst in permutations(usable, 2):
        for kind in P2P_KINDS:
            if src not in cuda_of or dst not in cuda_of:
                missing = src if src not in cuda_of else dst
                reason = node.unknown_reason(
                    f"gpu{missing}.cuda_index",
                    f"torch sees no CUDA device for GPU {missing} (CUDA_VISIBLE_DEVICES, or no CUDA build of torch)",
                )
                results.append(P2PMeasurement(src, dst, kind, None, UNITS[kind], error=reason))
                continue
            measured = session.p2p(cuda_of[src], cuda_of[dst], kind)
            results.append(dataclasses.replace(measured, src=src, dst=dst))
    return results


def measure_host_link(
    node: Node,
    suite: Suite,
    cuda_of: dict[int, int],
    progress: Progress,
    *,
    engine_factory: HostEngineFactory | None = None,
    binder: NumaBinder | None = None,
    gpu_timeout_s: float | None = None,
) -> list[HostLinkMeasurement]:
    """Every host-link figure of every usable GPU, in NVML indices; a GPU CUDA does not see gets error figures."""
    usable = _usable(node, suite)
    results: list[HostLinkMeasurement] = []
    targets = []
    for index in usable:
        gpu = node.gpu(index)
        if index in cuda_of and gpu is not None:
            targets.append(HostLinkTarget(index, cuda_of[index], gpu.numa_node))
            continue
        reason = node.unknown_reason(
            f"gpu{index}.cuda_index",
            f"torch sees no CUDA device for GPU {index} (CUDA_VISIBLE_DEVICES, or no CUDA build of torch)",
        )
        results += [HostLinkMeasurement(index, d, None, method="ce", error=reason) for d in HOST_LINK_DIRECTIONS]
    if targets:
        # One GPU's bound: at most HostLinkPlan's default per GPU; all GPUs together: the suite's campaign timeout.
        timeout = gpu_timeout_s or min(float(suite.measure.timeout_s), HostLinkPlan.gpu_timeout_s)
        plan = HostLinkPlan(tuple(targets), gpu_timeout_s=timeout, campaign_timeout_s=float(suite.measure.timeout_s))
        results += run_host_link(plan, engine_factory, binder=binder, progress=progress)
    return sorted(results, key=lambda m: (m.gpu, HOST_LINK_DIRECTIONS.index(m.direction)))


def _name(node: Node, index: int) -> str:
    gpu = node.gpu(index)
    return (gpu.pci_bus_id or gpu.uuid or "") if gpu else ""


def measure_collectives(
    node: Node,
    suite: Suite,
    thresholds: Thresholds,
    cuda_of: dict[int, int],
    progress: Progress,
    *,
    backend: str | None,
) -> tuple[list[CollectiveMeasurement], NcclAudit | None]:
    """One process group per session, every collective of the suite at its threshold size."""
    usable = _usable(node, suite)
    gloo = backend == "gloo"
    # A lost GPU or one CUDA_VISIBLE_DEVICES hides is left out here; the judge sees it in rank_gpus.
    ranked = [i for i in usable if i in cuda_of]
    session = MeasurementSession(
        suite.measure,
        backend=backend,
        gpus=None if gloo else [cuda_of[i] for i in ranked],
        world_size=len(usable) if gloo else None,
        collective_sizes=sizes_from_thresholds(thresholds, suite.measure.collectives),
        progress=progress,
    )
    run = session.collective_run()
    # Rank r runs on the r-th device handed over; gloo ranks run on the CPU, so only their count is known.
    on = None if gloo else ranked
    return [_with_rank_gpus(m, on) for m in run.measurements], run.nccl


def _with_rank_gpus(m: CollectiveMeasurement, on: list[int] | None) -> CollectiveMeasurement:
    if on is None or m.world_size != len(on):
        return m
    return dataclasses.replace(m, rank_gpus=list(on))
