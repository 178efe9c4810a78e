"""Figures measured now, on this machine, on a check's first request (the live source's provider).

It answers as :class:`~pytest_nvlink.model.figures.MeasurementProvider` does for recorded figures, so
the checks never learn whether a figure was measured a second ago or read from a file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import permutations
from typing import TYPE_CHECKING

from pytest_nvlink.config.suites import Suite
from pytest_nvlink.config.thresholds import Thresholds
from pytest_nvlink.model import CollectiveMeasurement, NcclAudit, Node, P2PMeasurement
from pytest_nvlink.model.figures import RecordedMeasurements
from pytest_nvlink.model.host_link import HostLinkMeasurement

if TYPE_CHECKING:
    from pytest_nvlink.measure.campaign import CampaignWatch
    from pytest_nvlink.measure.host_link import HostEngineFactory
    from pytest_nvlink.measure.host_numa import NumaBinder
    from pytest_nvlink.measure.p2p import EngineFactory
    from pytest_nvlink.measure.p2p_counters import CounterReaderFactory

Progress = Callable[[str], None]
# Told each campaign's name and its start and end (host clock, time.time()), for the Xid event window.
CampaignHook = Callable[[str, float, float], None]
CudaDevices = Callable[[], "list[tuple[int, str | None, str | None]] | str"]


class LiveMeasurements:
    """Measures on this machine on first request, once per session, and records into the node.

    The measurement code speaks CUDA device indices; the checks speak NVML indices. The two are
    joined through ``Gpu.cuda_index`` (UUID/PCI match made by the probe).
    """

    def __init__(
        self,
        node: Node,
        suite: Suite,
        thresholds: Thresholds,
        progress: Progress,
        backend: str | None = None,
        *,
        planned: frozenset[str] = frozenset(),
        engine_factory: EngineFactory | None = None,
        counter_factory: CounterReaderFactory | None = None,
        cuda_devices: CudaDevices | None = None,
        campaign_hook: CampaignHook | None = None,
        host_engine_factory: HostEngineFactory | None = None,
        numa_binder: NumaBinder | None = None,
    ) -> None:
        """``engine_factory``/``counter_factory`` replace the CUDA copy engine and NVML counters
        (picklable, built in the child); ``cuda_devices`` replaces the child that lists CUDA devices;
        ``host_engine_factory``/``numa_binder`` replace the host-link copies and the NUMA binding."""
        self._host_engine_factory = host_engine_factory
        self._numa_binder = numa_binder
        self._engine_factory = engine_factory
        self._counter_factory = counter_factory
        self._cuda_devices = cuda_devices
        self._cuda_listed = False
        self._node = node
        self._suite = suite
        self._thresholds = thresholds
        self._progress = progress
        self._backend = backend
        self._p2p_done = False
        self._collectives_done = False
        self._host_link_done = False
        self._recorded = RecordedMeasurements(node)
        # The campaigns ("p2p", "collectives", "host_link") the session's selected checks will ask for.
        self._planned = planned
        self._campaign_hook = campaign_hook

    def _cuda_of(self) -> dict[int, int]:
        # CUDA is asked in a child process: the pytest process stays NVML-only (no CUDA context).
        if not self._cuda_listed and self._node.gpus and all(gpu.cuda_index is None for gpu in self._node.gpus):
            self._cuda_listed = True  # once per session, even when CUDA lists nothing
            from pytest_nvlink.measure.cuda_join import cuda_devices_in_child
            from pytest_nvlink.sources.live.probe import join_cuda_indices

            devices = (self._cuda_devices or cuda_devices_in_child)()
            if isinstance(devices, str):
                for gpu in self._node.gpus:
                    self._node.unknown_reasons[f"gpu{gpu.index}.cuda_index"] = devices
            else:
                join_cuda_indices(self._node, devices)
        return {gpu.index: gpu.cuda_index for gpu in self._node.gpus if gpu.cuda_index is not None}

    def p2p(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        self._ensure_p2p()
        return self._recorded.p2p(src, dst, kind)

    def p2p_for_comparison(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        self._ensure_p2p()
        return self._recorded.p2p_for_comparison(src, dst, kind)

    def measure_all(self) -> None:
        """Now, every figure the shipped checks could ask for (what a full serial run would measure).

        Under pytest-xdist the controller measures before any worker starts: the workers only judge.
        """
        count = self._suite.gpu_count
        if any(self._suite.pair_expects_nvlink(a, b) for a, b in permutations(range(count), 2)):
            self._ensure_p2p()
        self._ensure_host_link()
        self._ensure_collectives()

    def _ensure_p2p(self) -> None:
        if self._p2p_done:
            return
        self._p2p_done = True
        from pytest_nvlink.measure.live import measure_p2p

        cuda_of = self._cuda_of()
        started = time.time()
        with self._watch(loads_gpus=True) as watch:
            results = measure_p2p(
                self._node,
                self._suite,
                cuda_of,
                self._progress,
                engine_factory=self._engine_factory,
                counter_factory=self._counter_factory,
            )
            watch.moved_traffic = any(m.value is not None for m in results)
        self._node.measurements.p2p.extend(results)
        self._campaign_ran("p2p", started)

    def complete(self) -> None:
        """Run the planned campaigns not run yet: error deltas and PCIe-under-load then cover all of them."""
        # The P2P checks measure only pairs the suite expects on NVLink (none on a PCIe-only suite).
        if "p2p" in self._planned and self._suite.expects_any_nvlink():
            self._ensure_p2p()
        if "host_link" in self._planned:
            self._ensure_host_link()
        if "collectives" in self._planned:
            self._ensure_collectives()

    def _watch(self, *, loads_gpus: bool) -> CampaignWatch:
        from pytest_nvlink.measure.campaign import CampaignWatch

        return CampaignWatch(self._node, loads_gpus=loads_gpus)

    def collectives(self) -> list[CollectiveMeasurement]:
        self._ensure_collectives()
        return self._recorded.collectives()

    def nccl(self) -> NcclAudit | None:
        self._ensure_collectives()
        return self._recorded.nccl()

    def host_link(self) -> list[HostLinkMeasurement]:
        self._ensure_host_link()
        return self._recorded.host_link()

    def _ensure_host_link(self) -> None:
        if self._host_link_done:
            return
        self._host_link_done = True
        from pytest_nvlink.measure.live import measure_host_link

        cuda_of = self._cuda_of()
        started = time.time()
        # The copies load every GPU's PCIe link in turn: the watch samples the generation it trained to.
        with self._watch(loads_gpus=True) as watch:
            results = measure_host_link(
                self._node,
                self._suite,
                cuda_of,
                self._progress,
                engine_factory=self._host_engine_factory,
                binder=self._numa_binder,
            )
            watch.moved_traffic = any(m.value is not None for m in results)
        self._node.measurements.host_link.extend(results)
        self._campaign_ran("host_link", started)

    def _ensure_collectives(self) -> None:
        if self._collectives_done:
            return
        self._collectives_done = True
        from pytest_nvlink.measure.live import measure_collectives

        cuda_of = self._cuda_of()
        started = time.time()
        # gloo runs on the CPU: it moves no GPU traffic, so it says nothing about the PCIe link under load.
        with self._watch(loads_gpus=self._backend != "gloo") as watch:
            results, audit = measure_collectives(
                self._node, self._suite, self._thresholds, cuda_of, self._progress, backend=self._backend
            )
            watch.moved_traffic = any(m.busbw_gbps is not None for m in results)
        self._node.measurements.collectives.extend(results)
        if audit is not None:
            self._node.measurements.nccl = audit
        self._campaign_ran("collectives", started)

    def _campaign_ran(self, name: str, started: float) -> None:
        if self._campaign_hook is not None:
            self._campaign_hook(name, started, time.time())
