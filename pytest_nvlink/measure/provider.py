"""Where the bandwidth checks get their figures: recorded in the node, or measured now.

The checks ask a :class:`MeasurementProvider` and never learn whether the answer was measured
a second ago on this machine or read from a snapshot or a vendor's burn-in log.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
from collections.abc import Callable
from itertools import permutations
from typing import TYPE_CHECKING, Protocol

from pytest_nvlink.config.settings import Suite, Thresholds
from pytest_nvlink.model import CollectiveMeasurement, NcclAudit, Node, P2PMeasurement

if TYPE_CHECKING:
    from pytest_nvlink.measure.campaign import CampaignWatch
    from pytest_nvlink.measure.p2p import CounterReaderFactory, EngineFactory

Progress = Callable[[str], None]
CudaDevices = Callable[[], "list[tuple[int, str | None, str | None]] | str"]


class MeasurementProvider(Protocol):
    def p2p(self, src: int, dst: int, kind: str) -> P2PMeasurement | None: ...

    def p2p_for_comparison(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        """p2p()'s figure with the same numbers, its source perhaps without the note naming the pair's other
        figures: for tests of many pairs at once, which read numbers only."""

    def collectives(self) -> list[CollectiveMeasurement]: ...

    def nccl(self) -> NcclAudit | None: ...

    def complete(self) -> None:
        """Run every measurement campaign this session will run, so per-run facts are final."""


class RecordedMeasurements:
    """Figures already in the node: a replayed snapshot or parsed evidence."""

    def __init__(self, node: Node) -> None:
        self._node = node
        # One answer per pair and kind, worked out together on the first question: the bandwidth check and
        # the proof of path ask for the same figure, and a 72-GPU node holds ~15,000 of them. A pair recorded
        # several times (both ways, or in several files) is named "worst of N" only when p2p() asks for it.
        self._answers: dict[tuple[int, int, str], P2PMeasurement] | None = None
        self._several: dict[tuple[int, int, str], list[P2PMeasurement]] = {}

    def p2p(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        key, answers = _pair_key(src, dst, kind), self._recorded()
        several = self._several.pop(key, None)
        if several is not None:  # the worst, picked when the figures were read, now named with the others
            answers[key] = _named_as_worst(sorted(several, key=_recorded_high_first), answers[key])
        return answers.get(key)

    def p2p_for_comparison(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        return self._recorded().get(_pair_key(src, dst, kind))  # a pair recorded several times: its worst

    def _recorded(self) -> dict[tuple[int, int, str], P2PMeasurement]:
        if self._answers is None:
            self._answers, self._several = _worst_per_pair(self._node.measurements.p2p)
        return self._answers

    def collectives(self) -> list[CollectiveMeasurement]:
        return list(self._node.measurements.collectives)

    def nccl(self) -> NcclAudit | None:
        return self._node.measurements.nccl

    def complete(self) -> None:
        return  # recorded figures are final already


def _pair_key(src: int, dst: int, kind: str) -> tuple[int, int, str]:
    # A bidirectional figure belongs to the pair, whichever order recorded it.
    return (dst, src, kind) if kind == "bidirectional" and src > dst else (src, dst, kind)


def _worst_per_pair(
    figures: list[P2PMeasurement],
) -> tuple[dict[tuple[int, int, str], P2PMeasurement], dict[tuple[int, int, str], list[P2PMeasurement]]]:
    """Each pair and kind's worst recorded figure as recorded, and all figures of the pairs recorded several
    times (in order), which p2p() names in the worst one's source when asked."""
    keys = list(zip(map(_SRC, figures), map(_DST, figures), map(_KIND, figures), strict=True))
    for at in [at for at, (src, dst, kind) in enumerate(keys) if src > dst and kind == "bidirectional"]:
        keys[at] = _pair_key(*keys[at])
    answers: dict[tuple[int, int, str], P2PMeasurement] = {}
    several: dict[tuple[int, int, str], list[P2PMeasurement]] = {}  # most pairs have one figure: no list
    for key, m in zip(keys, figures, strict=True):
        first = answers.setdefault(key, m)
        if first is not m:
            several.setdefault(key, [first]).append(m)
    for key, found in several.items():
        answers[key] = _worst_of(found)
    return answers, several


def _worst_of(found: list[P2PMeasurement]) -> P2PMeasurement:
    """The figure worst_figure() picks, as recorded: those recorded low-index first lead, the first of equals wins."""
    if len(found) != 2:
        return min(sorted(found, key=_recorded_high_first), key=_badness_order)
    first, second = found  # a pair recorded both ways, ~2,500 of them at 72 GPUs: the same choice without sorts
    if first.src > first.dst and not second.src > second.dst:
        first, second = second, first
    return second if _badness_order(second) < _badness_order(first) else first


def _recorded_high_first(m: P2PMeasurement) -> bool:
    return m.src > m.dst


def worst_figure(found: list[P2PMeasurement]) -> P2PMeasurement | None:
    """The worst of several figures for one pair (a failed measurement first), naming the others.

    Files that disagree about a pair are not averaged or read in the pair's favour: the pair is only
    as good as its worst figure, and the verdict names the file that figure came from.
    """
    if len(found) <= 1:
        return found[0] if found else None
    return _named_as_worst(found, min(found, key=_badness_order))


def _named_as_worst(found: list[P2PMeasurement], worst: P2PMeasurement) -> P2PMeasurement:
    """A copy of ``worst`` whose source names the other figures of ``found``, in their order."""
    others = "; ".join(f"{_shown(m)} from {m.source or 'unknown source'}" for m in found if m is not worst)
    return _with_source(worst, f"{worst.source or 'unknown source'} (worst of {len(found)} figures; also {others})")


def _with_source(m: P2PMeasurement, source: str) -> P2PMeasurement:
    """A copy of ``m`` naming another source; the node's own record is left as it was read."""
    # dataclasses.replace reads every field by name (~3 us, for each of thousands of pairs recorded both
    # ways); the record's values are read in one call and passed by position.
    copied = P2PMeasurement(*_FIELD_VALUES(m)) if type(m) is P2PMeasurement else copy.copy(m)  # a subclass's own
    copied.source = source
    return copied


_FIELD_VALUES = operator.attrgetter(*(f.name for f in dataclasses.fields(P2PMeasurement)))
_SRC, _DST, _KIND = operator.attrgetter("src"), operator.attrgetter("dst"), operator.attrgetter("kind")


def _badness_order(m: P2PMeasurement) -> tuple[int, float]:
    if m.value is None:
        return (0, 0.0)
    return (1, -m.value if m.kind == "latency" else m.value)


def _shown(m: P2PMeasurement) -> str:
    return f"{m.value:g} {m.unit}" if m.value is not None else f"no figure ({m.error or 'failed'})"


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
    ) -> None:
        """``engine_factory``/``counter_factory`` replace the CUDA copy engine and NVML counters
        (picklable, built in the child); ``cuda_devices`` replaces the child that lists CUDA devices."""
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
        self._recorded = RecordedMeasurements(node)
        # The campaigns ("p2p", "collectives") the session's selected checks will ask for.
        self._planned = planned

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
        self._ensure_collectives()

    def _ensure_p2p(self) -> None:
        if self._p2p_done:
            return
        self._p2p_done = True
        from pytest_nvlink.measure.live import measure_p2p

        cuda_of = self._cuda_of()
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

    def complete(self) -> None:
        """Run the planned campaigns not run yet: error deltas and PCIe-under-load then cover all of them."""
        # The P2P checks measure only pairs the suite expects on NVLink (none on a PCIe-only suite).
        if "p2p" in self._planned and self._suite.expects_any_nvlink():
            self._ensure_p2p()
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

    def _ensure_collectives(self) -> None:
        if self._collectives_done:
            return
        self._collectives_done = True
        from pytest_nvlink.measure.live import measure_collectives

        cuda_of = self._cuda_of()
        # gloo runs on the CPU: it moves no GPU traffic, so it says nothing about the PCIe link under load.
        with self._watch(loads_gpus=self._backend != "gloo") as watch:
            results, audit = measure_collectives(
                self._node, self._suite, self._thresholds, cuda_of, self._progress, backend=self._backend
            )
            watch.moved_traffic = any(m.busbw_gbps is not None for m in results)
        self._node.measurements.collectives.extend(results)
        if audit is not None:
            self._node.measurements.nccl = audit
