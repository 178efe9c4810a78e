"""What NVML says around a measurement campaign: error counters before/after, PCIe generation under load.

NVML's NVLink error counters only grow from driver load, so a lifetime total of 1 replay says nothing
about this run; the increase between the start and the end of the campaign does. The current PCIe
generation drops while a GPU idles ("These may be reduced when the GPU is not in use", nvidia-smi
--help-query-gpu, pcie.link.gen.current), so it is sampled while the campaign keeps the GPUs busy.
Reading never raises: what could not be read is left unknown with its reason in the node.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from types import TracebackType
from typing import Any

from pytest_nvlink.model import Node, NvLinkInfo, link_error_counter_names
from pytest_nvlink.sources.live.counters import read_link_errors
from pytest_nvlink.sources.live.fields import nvml_reason, started_nvml

SAMPLE_INTERVAL_S = 0.05
Clock = Callable[[], float]
Counts = dict[int, dict[int, dict[str, int]]]  # gpu -> link -> counter -> value


class CampaignWatch:
    """``with CampaignWatch(node, loads_gpus=True): run the campaign`` records into ``node``:

    * ``NvLinkInfo.errors_run``: each counter's increase, summed over every campaign watched;
    * ``Node.error_window_s``: the seconds those campaigns lasted;
    * ``Gpu.pcie_gen_loaded``: the highest current PCIe generation sampled, when ``loads_gpus``
      (a gloo campaign runs on the CPU and proves nothing about the PCIe link under load).
    """

    def __init__(
        self, node: Node, *, loads_gpus: bool, nvml: types.ModuleType | None = None, clock: Clock = time.monotonic
    ) -> None:
        self.node = node
        self.loads_gpus = loads_gpus
        self.clock = clock
        self._nvml = nvml
        self._handles: dict[int, Any] = {}
        self._before: Counts = {}
        self._started = 0.0
        self._samples: dict[int, int] = {}
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._problem: str | None = None
        self.moved_traffic = True  # the caller clears it when the campaign measured nothing

    def __enter__(self) -> CampaignWatch:
        self._problem = self._open()
        if self._problem is None:
            self._before = self._read_all()
            if self.loads_gpus:
                self._sample_once()
                self._sampler = threading.Thread(target=self._sample_loop, name="nvlink-pcie-sampler", daemon=True)
                self._sampler.start()
        self._started = self.clock()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        elapsed = self.clock() - self._started
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
            self._sample_once()
        if self._problem is not None:
            self._record_unreadable(self._problem)
        else:
            self._record_errors(self._before, self._read_all())
            self._record_pcie()
        self.node.error_window_s = (self.node.error_window_s or 0.0) + max(elapsed, 0.0)
        self._close()

    # --- NVML ----------------------------------------------------------------------------------

    def _open(self) -> str | None:
        self._nvml, problem = started_nvml(self._nvml)
        if self._nvml is None or problem is not None:
            return problem
        nvml = self._nvml
        for gpu in self.node.gpus:
            if gpu.problem is None:
                try:
                    self._handles[gpu.index] = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                except nvml.NVMLError as exc:
                    self.node.unknown_reasons[f"gpu{gpu.index}.errors_run"] = nvml_reason(exc)
        return None

    def _close(self) -> None:
        nvml = self._nvml
        if nvml is not None and self._problem is None:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                return  # nothing left to release

    def _read_all(self) -> Counts:
        assert self._nvml is not None
        counts: Counts = {}
        for index, handle in self._handles.items():
            links = [link.link for link in _links(self.node, index)]
            values, reasons = read_link_errors(self._nvml, handle, links)
            counts[index] = values
            for key, reason in reasons.items():
                link, name = key.split(".", 1)
                self.node.unknown_reasons[f"gpu{index}.{link}.errors_run.{name}"] = reason
        return counts

    # --- error counters ------------------------------------------------------------------------

    def _record_errors(self, before: Counts, after: Counts) -> None:
        for gpu in self.node.gpus:
            for link in _links(self.node, gpu.index):
                start = before.get(gpu.index, {}).get(link.link, {})
                end = after.get(gpu.index, {}).get(link.link, {})
                _add_increase(self.node, f"gpu{gpu.index}.nvlink{link.link}", link, start, end)

    def _record_unreadable(self, problem: str) -> None:
        for gpu in self.node.gpus:
            for link in _links(self.node, gpu.index):
                _add_increase(self.node, f"gpu{gpu.index}.nvlink{link.link}", link, {}, {}, problem=problem)

    # --- PCIe generation under load ------------------------------------------------------------

    def _sample_loop(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self._sample_once()

    def _sample_once(self) -> None:
        nvml = self._nvml
        assert nvml is not None
        for index, handle in self._handles.items():
            try:
                generation = int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))
            except nvml.NVMLError:
                continue  # one missed sample is no finding; no sample at all is reported below
            self._samples[index] = max(generation, self._samples.get(index, 0))

    def _record_pcie(self) -> None:
        for gpu in self.node.gpus:
            if not self.loads_gpus:
                self.node.unknown_reasons.setdefault(
                    f"gpu{gpu.index}.pcie_gen_loaded", "the collectives ran on gloo (CPU), which does not load the GPUs"
                )
                continue
            sampled = self._samples.get(gpu.index)
            if not self.moved_traffic:
                self.node.unknown_reasons.setdefault(
                    f"gpu{gpu.index}.pcie_gen_loaded", "the measurement campaign measured nothing, so no load ran"
                )
            elif sampled is None:
                self.node.unknown_reasons.setdefault(
                    f"gpu{gpu.index}.pcie_gen_loaded", "NVML gave no current PCIe generation during the campaign"
                )
            else:
                gpu.pcie_gen_loaded = max(sampled, gpu.pcie_gen_loaded or 0)
                self.node.unknown_reasons.pop(f"gpu{gpu.index}.pcie_gen_loaded", None)


def _links(node: Node, index: int) -> list[NvLinkInfo]:
    gpu = node.gpu(index)
    # Links the probe found active: inactive links carry no traffic and often no counters.
    return [link for link in (gpu.nvlinks or []) if link.active] if gpu else []


def _add_increase(
    node: Node, key: str, link: NvLinkInfo, start: dict[str, int], end: dict[str, int], *, problem: str | None = None
) -> None:
    """Add this campaign's increase to ``link.errors_run``; a counter unreadable in any campaign is dropped."""
    first = link.errors_run is None
    total = dict(link.errors_run or {})
    for name in _counter_names(link, start, end):
        reason_key = f"{key}.errors_run.{name}"
        if not first and name not in total:
            continue  # already unknown from an earlier campaign
        if name in start and name in end and end[name] >= start[name]:
            total[name] = total.get(name, 0) + end[name] - start[name]
            continue
        total.pop(name, None)
        if name in start and name in end:
            node.unknown_reasons[reason_key] = f"counter went backwards ({start[name]} -> {end[name]}: driver reload?)"
        elif problem is not None:
            node.unknown_reasons[reason_key] = problem
        else:
            node.unknown_reasons.setdefault(reason_key, "not readable before and after the campaign")
    link.errors_run = total


def _counter_names(link: NvLinkInfo, start: dict[str, int], end: dict[str, int]) -> tuple[str, ...]:
    """The counters this link has: the set it answered, else its generation's (NVLink 5 or DL)."""
    answered = {**start, **end}
    return link_error_counter_names([(link.version, link.errors, link.errors_run), (None, answered, None)])
