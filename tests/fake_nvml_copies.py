"""A simulated copy engine whose copies move a fake NVML's traffic counters, for live runs without a GPU.

The P2P campaign builds its engine and its counter reader in a spawned child. :class:`NvmlFedEngine`
is a picklable engine factory that, in that child, serves a fake ``pynvml`` from a saved node (so the
campaign's real ``NvmlCounterFactory`` reads it) and accounts every copy on the fake's counters, by
NVML UUID. With ``counter_refresh_s`` the fake refreshes those counters on its own clock, as a driver does.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fake_pynvml import make_fake_pynvml

from pytest_nvlink.measure.p2p_simulated import SimulatedCopyEngine
from pytest_nvlink.sources.snapshot.file import load_snapshot

_SERVED: list[Any] = []  # the fake module of this (child) process


@dataclass
class NvmlFedEngine(SimulatedCopyEngine):
    node_path: str = ""
    uuids: tuple[str, ...] = ()  # CUDA index -> the NVML UUID of that GPU
    counter_refresh_s: float | None = None

    def __call__(self) -> NvmlFedEngine:
        if not _SERVED:
            module = make_fake_pynvml(load_snapshot(Path(self.node_path)), counter_refresh_s=self.counter_refresh_s)
            sys.modules["pynvml"] = module  # what NvmlCounterFactory imports, next, in this child
            _SERVED.append(module)
        super().__call__()
        return self

    def copy(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
        seconds = super().copy(src, dst, nbytes, iterations)
        via = "pcie" if (src, dst) in self.via_pcie else "nvlink"
        _SERVED[0].add_copy(self.uuids[src], self.uuids[dst], nbytes * iterations, via=via)
        return seconds


def live_setup(node_path: Path, engine: str, cuda_order: list[int]) -> str:
    """``fake_nvml_plugin`` setup code: the live provider measures with ``engine`` (Python source of an
    ``NvmlFedEngine``; ``node_path`` and ``uuids`` are in scope) and CUDA device c is NVML GPU ``cuda_order[c]``."""
    return f"""
from pytest_nvlink.measure import provider as _provider
from fake_nvml_copies import NvmlFedEngine
node_path = {str(node_path)!r}
_uuid = {{gpu.index: gpu.uuid for gpu in load_snapshot(Path(node_path)).gpus}}
uuids = tuple(_uuid[nvml] for nvml in {cuda_order!r})
_devices = [(cuda, _uuid[nvml].removeprefix("GPU-"), None) for cuda, nvml in enumerate({cuda_order!r})]
_init = _provider.LiveMeasurements.__init__
def _simulated(self, *args, **kwargs):
    kwargs.setdefault("engine_factory", {engine})
    kwargs.setdefault("cuda_devices", lambda: _devices)
    _init(self, *args, **kwargs)
_provider.LiveMeasurements.__init__ = _simulated
"""
