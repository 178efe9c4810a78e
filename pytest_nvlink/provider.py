"""Where the bandwidth checks get their figures: recorded in the node, or measured now.

The checks ask a :class:`MeasurementProvider` and never learn whether the answer was measured
a second ago on this machine or read from a snapshot or a vendor's burn-in log.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import permutations
from typing import Protocol

from pytest_nvlink.config import Suite, Thresholds
from pytest_nvlink.model import CollectiveMeasurement, NcclAudit, Node, P2PMeasurement

Progress = Callable[[str], None]


class MeasurementProvider(Protocol):
    def p2p(self, src: int, dst: int, kind: str) -> P2PMeasurement | None: ...

    def collectives(self) -> list[CollectiveMeasurement]: ...

    def nccl(self) -> NcclAudit | None: ...


class RecordedMeasurements:
    """Figures already in the node: a replayed snapshot or parsed evidence."""

    def __init__(self, node: Node) -> None:
        self._node = node

    def p2p(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        # A bidirectional figure belongs to the pair, whichever order recorded it.
        pairs = {(src, dst), (dst, src)} if kind == "bidirectional" else {(src, dst)}
        found = [m for m in self._node.measurements.p2p if m.kind == kind and (m.src, m.dst) in pairs]
        # Several files may measure the same pair; the best figure is what the pair can do.
        if not found:
            return None
        if kind == "latency":
            return min(found, key=lambda m: m.value if m.value is not None else float("inf"))
        return max(found, key=lambda m: m.value if m.value is not None else float("-inf"))

    def collectives(self) -> list[CollectiveMeasurement]:
        return list(self._node.measurements.collectives)

    def nccl(self) -> NcclAudit | None:
        return self._node.measurements.nccl


class LiveMeasurements:
    """Measures on this machine on first request, once per session, and records into the node.

    The measurement code speaks CUDA device indices; the checks speak NVML indices. The two are
    joined through ``Gpu.cuda_index`` (UUID/PCI match made by the probe).
    """

    def __init__(
        self, node: Node, suite: Suite, thresholds: Thresholds, progress: Progress, backend: str | None = None
    ) -> None:
        self._node = node
        self._suite = suite
        self._thresholds = thresholds
        self._progress = progress
        self._backend = backend
        self._p2p_done = False
        self._collectives_done = False
        self._recorded = RecordedMeasurements(node)

    def _cuda_of(self) -> dict[int, int]:
        # torch is imported only here, so topology-only runs never pay for it.
        if self._node.gpus and all(gpu.cuda_index is None for gpu in self._node.gpus):
            from pytest_nvlink.nvml_probe import join_cuda_indices, torch_cuda_devices

            join_cuda_indices(self._node, torch_cuda_devices())
        return {gpu.index: gpu.cuda_index for gpu in self._node.gpus if gpu.cuda_index is not None}

    def p2p(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        self._ensure_p2p()
        return self._recorded.p2p(src, dst, kind)

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
        from pytest_nvlink.live import measure_p2p

        self._node.measurements.p2p.extend(measure_p2p(self._node, self._suite, self._cuda_of(), self._progress))

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
        from pytest_nvlink.live import measure_collectives

        results, audit = measure_collectives(
            self._node, self._suite, self._thresholds, self._cuda_of(), self._progress, backend=self._backend
        )
        self._node.measurements.collectives.extend(results)
        if audit is not None:
            self._node.measurements.nccl = audit
