"""The link between each GPU and its host: figures measured over it, and NVLink-C2C's state on Grace.

On x86 hosts the host link is PCIe; on Grace (GH200/GB200/GB300) it is NVLink-C2C. Either way a GPU
whose host link is slow starves every job that feeds it, and no GPU-to-GPU check notices (a rented
H100 VM measured 14.2 GB/s host->device on one GPU while the others gave ~57: NVIDIA/nvbandwidth#6).

Which figures a floor judges: the floors are about pinned host memory on the copy engine. Every source
states the memory in ``conditions["memory"]`` ("pinned" or "pageable"); a figure whose memory is not
"pinned" (cuda-samples ``bandwidthTest --memory=pageable``, DCGM's unpinned subtest) is kept for the
record and must never be judged against a pinned floor (:func:`meets_pinned_floor`). ``method`` says how the
copy was made ("ce" or "sm"); an "sm" figure measures a kernel's loads and stores, not the copy engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The directions a host-link figure can have. "bidir_h2d"/"bidir_d2h": each direction's share while
# both directions run at once (nvbandwidth's *_bidirectional_memcpy_* testcases).
HOST_LINK_DIRECTIONS: tuple[str, ...] = ("h2d", "d2h", "bidir_h2d", "bidir_d2h")

PINNED = "pinned"
PAGEABLE = "pageable"


@dataclass
class HostLinkMeasurement:
    """One GPU's host-link bandwidth in one direction, pinned host memory <-> the GPU's memory."""

    gpu: int  # NVML index, as P2PMeasurement's src/dst
    direction: str  # one of HOST_LINK_DIRECTIONS
    value: float | None  # GB/s (1e9 bytes/s); None when it could not be measured
    unit: str = "GB/s"
    method: str | None = None  # "ce" (copy engine, cudaMemcpyAsync) | "sm" (a kernel's loads/stores)
    bytes_copied: int | None = None
    # The NUMA node the pinned host buffer was bound to; None when the source does not say.
    host_numa_node: int | None = None
    error: str | None = None
    source: str | None = None  # "torch" | "nvbandwidth: file.txt" | "bandwidthTest: file.txt" | ...
    conditions: dict[str, str] | None = None  # as P2PMeasurement.conditions


@dataclass
class C2CLink:
    """One NVLink-C2C link between a Grace CPU and the GPU (NVML_FI_DEV_C2C_LINK_GET_STATUS/_MAX_BW)."""

    link: int
    active: bool | None = None
    max_bandwidth_gbps: float | None = None  # NVML reports MB/s; stored as GB/s (1e9 bytes/s)


@dataclass
class C2CInfo:
    """NVLink-C2C as NVML reports it (NVML_FI_DEV_C2C_LINK_COUNT); absent on PCIe-hosted GPUs."""

    link_count: int | None = None
    links: list[C2CLink] = field(default_factory=list)


def meets_pinned_floor(measurement: HostLinkMeasurement) -> bool:
    """Whether a figure is held to the pinned floors: every figure but one stated as pageable.

    A figure whose memory is not stated is held to them too: pageable copies only ever read slower, so
    judging one against a pinned floor can wrongly fail a link but never wrongly pass it.
    """
    return (measurement.conditions or {}).get("memory") != PAGEABLE


def is_pinned(measurement: HostLinkMeasurement) -> bool:
    """Whether a figure was measured with pinned host memory: only such figures meet a host-link floor.

    A figure whose conditions do not say "pinned" is not one (fail closed: an unknown buffer is no
    evidence that the pinned path is fast).
    """
    return (measurement.conditions or {}).get("memory") == PINNED


def worst_host_link(figures: list[HostLinkMeasurement], gpu: int, direction: str) -> HostLinkMeasurement | None:
    """The GPU's worst figure in ``direction`` held to the pinned floors (a failed one first, then the lowest).

    Several files may each give one (nvbandwidth CE and SM, bandwidthTest): the link is only as good as its
    worst, as a GPU pair is. The one rule the judge, the baseline, the metrics and the chart read a figure by.
    """
    found = [m for m in figures if m.gpu == gpu and m.direction == direction and meets_pinned_floor(m)]
    return min(found, key=_badness, default=None)


def worst_host_links(figures: list[HostLinkMeasurement]) -> dict[tuple[int, str], HostLinkMeasurement]:
    """:func:`worst_host_link` of every (GPU, direction) recorded, in recorded order; pairs with no figure held
    to the pinned floors are left out."""
    keys = dict.fromkeys((m.gpu, m.direction) for m in figures)
    found = {key: worst_host_link(figures, *key) for key in keys}
    return {key: m for key, m in found.items() if m is not None}


def _badness(m: HostLinkMeasurement) -> tuple[int, float]:
    return (0, 0.0) if m.value is None or m.error is not None else (1, m.value)
