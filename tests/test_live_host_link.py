"""The live host-link campaign through provider -> live -> spawned workers, without a GPU (issue 27, section 1).

The fake NVML serves the node (and the PCIe generation the campaign watch samples); the simulated
host engine stands in for CUDA; CUDA numbers the GPUs in the reverse of NVML's order, so a figure
filed under the wrong numbering lands on the wrong GPU. The NUMA binder reads a sysfs of the test's
own (nodes 0 and 1, both listing the CPUs this process may use), never the machine's.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import SNAPSHOTS
from fake_pynvml import make_fake_pynvml

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.measure.host_link import HostLinkPlan, HostLinkTarget, run_host_link
from pytest_nvlink.measure.host_numa import NumaBinder
from pytest_nvlink.measure.host_simulated import SimulatedHostEngineFactory, TimelineHostEngineFactory
from pytest_nvlink.measure.provider import LiveMeasurements
from pytest_nvlink.model import Measurements, Node
from pytest_nvlink.model.host_link import HOST_LINK_DIRECTIONS
from pytest_nvlink.sources.snapshot.file import load_snapshot

MIB = 1 << 20


def _live_node(gpus: int = 8) -> Node:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.source, node.measurements = "live", Measurements()
    node.gpus = node.gpus[:gpus]
    for gpu in node.gpus:
        gpu.pcie_gen_loaded = None
        gpu.cuda_index = None
        gpu.numa_node = 0 if gpu.index < 4 else 1
    return node


def _sysfs(tmp_path: Path) -> NumaBinder:
    allowed = ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))
    for node in (0, 1):
        (tmp_path / f"node{node}").mkdir()
        (tmp_path / f"node{node}" / "cpulist").write_text(allowed + "\n")
    return NumaBinder(sysfs_nodes=str(tmp_path), proc_self=str(tmp_path / "no-proc"))


def _provider(node: Node, engine: Any, binder: NumaBinder, progress: Any = None) -> LiveMeasurements:
    suite = load_suite("h100-8gpu")
    reversed_cuda: list[tuple[int, str | None, str | None]] = [
        (7 - gpu.index, (gpu.uuid or "").removeprefix("GPU-"), None) for gpu in node.gpus
    ]
    return LiveMeasurements(
        node,
        suite,
        load_thresholds(suite.thresholds_ref),
        progress or (lambda line: None),
        cuda_devices=lambda: reversed_cuda,
        host_engine_factory=engine,
        numa_binder=binder,
        planned=frozenset({"host_link"}),
    )


def _by_gpu(figures: list[Any]) -> dict[int, dict[str, Any]]:
    table: dict[int, dict[str, Any]] = {}
    for figure in figures:
        table.setdefault(figure.gpu, {})[figure.direction] = figure
    return table


def test_every_gpu_is_measured_in_nvml_numbering_and_a_slow_one_gives_its_low_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _live_node(4)
    served = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    served.gpus = served.gpus[:4]
    for gpu in served.gpus:
        gpu.pcie_gen_current = 1  # idle: parked at Gen1 until the copies load the link
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml(served))
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(line)
        for gpu in served.gpus:
            gpu.pcie_gen_current = 5  # what NVML says while (and after) a GPU's link carries the copies

    hooked: list[tuple[str, float, float]] = []
    provider = _provider(node, SimulatedHostEngineFactory(gbps=55.0, slow=((5, 14.2),)), _sysfs(tmp_path), progress)
    provider._campaign_hook = lambda name, start, end: hooked.append((name, start, end))
    started = time.time()
    provider.complete()  # "host_link" is planned: the campaign runs without a check asking first
    figures = provider.host_link()
    table = _by_gpu(figures)
    assert sorted(table) == [0, 1, 2, 3] and all(sorted(t) == sorted(HOST_LINK_DIRECTIONS) for t in table.values())
    assert all(f.error is None for f in figures), [f.error for f in figures]
    # CUDA device 5 is NVML GPU 2: its host->device figure is the slow one, under its own index.
    assert round(table[2]["h2d"].value, 1) == 14.2
    assert {round(table[g]["h2d"].value, 1) for g in (0, 1, 3)} == {55.0}
    assert round(table[0]["bidir_d2h"].value, 1) == round(55.0 * 0.9, 1)
    first = table[0]["h2d"]
    assert (first.method, first.source, first.bytes_copied) == ("ce", "simulated host copies", 256 * MIB * 8 * 3)
    assert first.conditions is not None and first.conditions["size_mib"] == "256"
    assert first.conditions["timed_runs"] == "3" and first.conditions["copies_per_run"] == "8"
    assert len(first.conditions["samples_gbps"].split(",")) == 3
    assert len(lines) == 4 and lines[0].startswith("host link 1/4 gpu0: h2d 55.0 GB/s")
    # The PCIe generation under load comes from this campaign's samples, not the idle reading.
    assert [gpu.pcie_gen_loaded for gpu in node.gpus] == [5, 5, 5, 5]
    assert [name for name, *_ in hooked] == ["host_link"] and hooked[0][1] >= started - 1
    provider.host_link()
    assert len(node.measurements.host_link) == 16  # measured once per session


def test_the_numa_node_used_is_recorded_and_an_unknown_node_is_none_with_its_reason(tmp_path: Path) -> None:
    node = _live_node(2)
    node.gpus[1].numa_node = None
    provider = _provider(node, SimulatedHostEngineFactory(), _sysfs(tmp_path))
    table = _by_gpu(provider.host_link())
    bound, unbound = table[0]["h2d"], table[1]["d2h"]
    assert bound.host_numa_node == 0
    assert bound.conditions is not None and bound.conditions["numa_binding"].startswith("CPU affinity set to node 0's")
    assert "placement not checked" in bound.conditions["numa_binding"]  # the simulated engine has no host address
    assert unbound.host_numa_node is None and unbound.value is not None
    assert unbound.conditions is not None
    assert unbound.conditions["numa_binding"] == "not bound: the probe knows no NUMA node for this GPU"


def test_a_hung_gpu_times_out_alone_naming_its_step_and_the_others_are_measured(tmp_path: Path) -> None:
    targets = tuple(HostLinkTarget(gpu, gpu, 0) for gpu in range(3))
    plan = HostLinkPlan(targets, nbytes=MIB, iterations=4, repeats=2, gpu_timeout_s=6.0)
    engine = SimulatedHostEngineFactory(hang=(1, "d2h"), fail=(2, "bidir"))
    started = time.monotonic()
    table = _by_gpu(run_host_link(plan, engine, binder=_sysfs(tmp_path)))
    assert time.monotonic() - started < 40
    assert all(table[0][d].value is not None for d in HOST_LINK_DIRECTIONS)
    assert table[1]["h2d"].value is not None  # measured before the hang: kept
    for direction in ("d2h", "bidir_h2d", "bidir_d2h"):
        assert table[1][direction].value is None
        assert table[1][direction].error == "timed out after 6 s during step 'd2h'"
    assert table[2]["h2d"].value is not None and table[2]["d2h"].value is not None
    assert table[2]["bidir_h2d"].error == (
        "bidir copies failed: RuntimeError: simulated copy failure on CUDA device 2 (bidir)"
    )


def test_a_worker_that_cannot_open_cuda_fails_every_figure_of_its_gpu_with_the_step(tmp_path: Path) -> None:
    plan = HostLinkPlan((HostLinkTarget(0, 0, None),), nbytes=MIB, iterations=2, repeats=1, gpu_timeout_s=60.0)
    figures = run_host_link(plan, binder=_sysfs(tmp_path))  # the torch engine: this CPU box has no CUDA
    assert [f.direction for f in figures] == list(HOST_LINK_DIRECTIONS)
    for figure in figures:
        assert figure.value is None
        assert figure.error is not None and figure.error.startswith("host-link worker failed: ")
        assert figure.error.endswith("(step 'open the CUDA device and pin the host buffers')")


def test_a_gpu_cuda_does_not_see_gets_error_figures_without_a_worker(tmp_path: Path) -> None:
    node = _live_node(2)
    provider = _provider(node, SimulatedHostEngineFactory(), _sysfs(tmp_path))
    provider._cuda_devices = lambda: [(0, (node.gpus[0].uuid or "").removeprefix("GPU-"), None)]
    table = _by_gpu(provider.host_link())
    assert table[0]["h2d"].value is not None
    assert table[1]["h2d"].value is None
    assert {table[1][d].error for d in HOST_LINK_DIRECTIONS} == {"not visible to CUDA in this process"}


def test_the_torch_engine_times_each_lane_behind_a_measured_spin_on_the_simulated_timeline(tmp_path: Path) -> None:
    plan = HostLinkPlan((HostLinkTarget(0, 0, 0),), nbytes=64 * MIB, iterations=8, repeats=2, gpu_timeout_s=60.0)
    table = _by_gpu(run_host_link(plan, TimelineHostEngineFactory(bytes_per_s=50e9), binder=_sysfs(tmp_path)))
    for direction in HOST_LINK_DIRECTIONS:
        figure = table[0][direction]
        assert figure.error is None and figure.value == pytest.approx(50.0, rel=0.02), direction
        assert figure.conditions is not None and float(figure.conditions["spin_ms"]) > 0
        assert float(figure.conditions["enqueue_ms"]) < float(figure.conditions["spin_ms"])
    assert table[0]["h2d"].source == "torch copy_ pinned host memory (cudaMemcpyAsync, copy engine)"


def test_the_plan_refuses_a_queue_deeper_than_the_references_use() -> None:
    with pytest.raises(ValueError, match="queue depth"):
        HostLinkPlan((), iterations=17)


def test_a_selected_host_link_check_plans_the_campaign_and_other_areas_do_not() -> None:
    from pytest_nvlink.plugin.live import planned_campaigns

    class Item:
        def __init__(self, area: str) -> None:
            self.area, self.fixturenames = area, ("nvlink_check",)

        def get_closest_marker(self, name: str) -> Any:
            return pytest.mark.nvlink(self.area).mark

    assert planned_campaigns([Item("host_link"), Item("platform")]) == frozenset({"host_link"})  # type: ignore[list-item]
    assert planned_campaigns([Item("bandwidth")]) == frozenset({"p2p"})  # type: ignore[list-item]


def test_the_torch_engine_keeps_the_queue_shallow_and_retries_a_spin_that_ran_short() -> None:
    from pytest_nvlink.measure.cuda_simulated import SimulatedGpu, make_torch
    from pytest_nvlink.measure.host_copy import TorchHostEngine

    # A calibration 100x too slow (as on an idle GPU whose clock then rises): the first spin ends long before the
    # copies are queued. Set outright, so the host's load cannot decide whether the simulated clock was warm.
    sim = SimulatedGpu(bytes_per_s=50e9)
    engine = TorchHostEngine(0, 16 * MIB, torch_module=make_torch(sim))
    engine._cycles_per_s = engine._calibrate() / 100
    timed = engine.h2d(16)
    assert timed.tries >= 2  # the short spin was measured and the run repeated, not reported
    assert timed.enqueue_s < 0.8 * timed.spin_s
    assert timed.lane_s[0] == pytest.approx(16 * 16 * MIB / 50e9, rel=0.05)
    engine.bidirectional(16)
    assert sim.deepest <= 16 + 3  # the copies of one lane plus its events: never a queue that blocks the host
    with pytest.raises(ValueError, match=r"queues 1\.\.16"):
        engine.d2h(17)


def test_live_figures_state_pinned_memory_so_a_floor_judges_them() -> None:
    from pytest_nvlink.measure.host_link import HostLinkPlan
    from pytest_nvlink.model.host_link import HostLinkMeasurement, is_pinned

    conditions = HostLinkPlan(targets=()).conditions()
    assert is_pinned(HostLinkMeasurement(0, "h2d", 55.0, method="ce", conditions=conditions))


def test_the_whole_campaign_is_bounded_and_gpus_it_never_reached_say_so(tmp_path: Path) -> None:
    targets = tuple(HostLinkTarget(gpu, gpu, 0) for gpu in range(3))
    plan = HostLinkPlan(targets, nbytes=MIB, iterations=4, repeats=2, gpu_timeout_s=60.0, campaign_timeout_s=5.0)
    engine = SimulatedHostEngineFactory(hang=(0, "h2d"))
    started = time.monotonic()
    table = _by_gpu(run_host_link(plan, engine, binder=_sysfs(tmp_path)))
    assert time.monotonic() - started < 30  # not 3 x 60 s
    assert table[0]["h2d"].error is not None and table[0]["h2d"].error.startswith("timed out after")
    for gpu in (1, 2):
        assert all(table[gpu][d].value is None for d in HOST_LINK_DIRECTIONS)
        assert table[gpu]["h2d"].error == (
            f"not measured: the host-link campaign's 5 s limit was spent before GPU {gpu}"
        )
