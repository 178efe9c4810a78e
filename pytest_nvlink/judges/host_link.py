"""The host link of each GPU: its host<->device figures against the SKU's floors and the node's median, and
NVLink-C2C's links on Grace.

A GPU whose host link is slow starves every job that feeds it, and no GPU-to-GPU check notices: a rented H100
VM measured 14.2 GB/s host->device on one GPU while the others gave ~57 (NVIDIA/nvbandwidth#6). So each GPU's
figures are judged against the floor of the SKU and against the median of the node's GPUs, and a GPU without
a figure is not measured, never passed. The judge sees the figures and the node's facts, never the source.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from pytest_nvlink.config.thresholds import Threshold
from pytest_nvlink.judges.context import Context, gpu_properties, per_gpu
from pytest_nvlink.model import Gpu
from pytest_nvlink.model.host_link import (
    HOST_LINK_DIRECTIONS,
    C2CInfo,
    HostLinkMeasurement,
    meets_pinned_floor,
    worst_host_link,
)
from pytest_nvlink.verdict import Verdict, failed, measured_properties, not_applicable, passed, unknown

# The floor of each direction; both shares of a bidirectional run are held to the one key.
DIRECTION_KEYS: dict[str, str] = {
    "h2d": "host_link.h2d_min_gbps",
    "d2h": "host_link.d2h_min_gbps",
    "bidir_h2d": "host_link.bidir_min_gbps",
    "bidir_d2h": "host_link.bidir_min_gbps",
}
SPREAD_KEY = "host_link.below_median_max_fraction"
DIRECTION_WORDS: dict[str, str] = {
    "h2d": "host->device",
    "d2h": "device->host",
    "bidir_h2d": "host->device (both directions at once)",
    "bidir_d2h": "device->host (both directions at once)",
}
C2C_REQUIRED_KEY = "c2c.required"
C2C_LINK_KEY = "c2c.link_max_bw_min_gbps"
# Modes of nvmlDeviceGetVirtualizationMode in which the GPU's DMA passes a hypervisor's IOMMU.
_VM_MODES = frozenset({"passthrough", "vgpu", "host_vgpu", "host_vsga"})
_NOT_MEASURED = (
    "no host-link figure recorded for it (a snapshot saved before host-link figures were recorded, evidence "
    "without nvbandwidth host_to_device/device_to_host testcases or bandwidthTest, or a run that measured no host "
    "link); figures of pageable host memory are not held to these pinned floors"
)


@dataclass(frozen=True)
class _Shortfall:
    """One direction's figure that fails: below the floor, or too far below the node's median."""

    direction: str
    value: float
    threshold: Threshold
    expected: str  # as the JUnit ``expected`` property reads
    text: str


def figure_of(figures: list[HostLinkMeasurement], index: int, direction: str) -> HostLinkMeasurement | None:
    """The GPU's figure judged in ``direction``: its worst held to the pinned floors (model rule)."""
    return worst_host_link(figures, index, direction)


def node_median(figures: list[HostLinkMeasurement], direction: str) -> float | None:
    """The median of every GPU's worst measured figure in ``direction``, None when none is."""
    worst: dict[int, float] = {}
    for m in figures:
        if m.direction == direction and m.value is not None and m.error is None and meets_pinned_floor(m):
            worst[m.gpu] = min(m.value, worst.get(m.gpu, m.value))
    return statistics.median(worst.values()) if worst else None


def host_link(ctx: Context, index: int, figures: list[HostLinkMeasurement]) -> Verdict:
    """One GPU's host-link figures in every direction the threshold set judges."""
    gpu = ctx.node.gpu(index)
    if gpu is None or ctx.problem_of(gpu):
        return ctx.missing_gpu(index)
    keys = [*dict.fromkeys(DIRECTION_KEYS.values()), SPREAD_KEY]
    unset = [key for key in keys if ctx.thresholds.get(key) is None]
    if any(ctx.thresholds.waiver(key) is None for key in unset) or len(unset) == len(keys):
        return ctx.missing_threshold(*unset)
    judged = [d for d in HOST_LINK_DIRECTIONS if ctx.thresholds.get(DIRECTION_KEYS[d]) is not None]
    if not judged:  # every floor waived: only the spread key is left, and it has no figure to hold
        return ctx.missing_threshold(*unset)
    mine = {d: figure_of(figures, index, d) for d in judged}
    props = _properties(ctx, gpu, mine)
    broken = [(d, m) for d, m in mine.items() if m is not None and (m.error is not None or m.value is None)]
    if broken:
        direction, m = broken[0]
        return failed(
            f"GPU {index}: host link not measured: the {DIRECTION_WORDS[direction]} copy failed: "
            f"{m.error or 'no figure recorded'} ({_threshold(ctx, direction).where()})",
            props,
        )
    shortfalls = [s for d, m in mine.items() if m is not None for s in _shortfall(ctx, gpu, d, m, figures)]
    if shortfalls:
        first = shortfalls[0]
        props = _properties(ctx, gpu, mine, (first.direction, first.threshold, first.expected))
        return failed(_failure_text(gpu, shortfalls, mine), props, badness=first.value)
    missing = [d for d, m in mine.items() if m is None]
    if missing:
        shown = ", ".join(DIRECTION_WORDS[d] for d in missing)
        reason = ctx.node.unknown_reason(f"gpu{index}.host_link", _NOT_MEASURED)
        return unknown(
            f"the host link of GPU {index}",
            f"{shown} not measured: {reason}",
            props,
            failure=f"GPU {index}: host link not measured ({shown}): {reason} ({_threshold(ctx, missing[0]).where()})",
        )
    shown = ", ".join(f"{DIRECTION_WORDS[d]} {m.value:.1f} GB/s" for d, m in mine.items() if m and m.value)
    return passed(f"GPU {index}: host link {shown}, each at or above its floor and near the node's median", props)


def _threshold(ctx: Context, direction: str) -> Threshold:
    found = ctx.thresholds.get(DIRECTION_KEYS[direction])
    assert found is not None  # only directions whose key is set are judged
    return found


def _shortfall(
    ctx: Context, gpu: Gpu, direction: str, m: HostLinkMeasurement, figures: list[HostLinkMeasurement]
) -> list[_Shortfall]:
    assert m.value is not None
    floor = _threshold(ctx, direction)
    words = DIRECTION_WORDS[direction]
    if m.value < floor.value:
        text = f"{words} bandwidth {m.value:.1f} GB/s, below {floor.value} GB/s ({floor.where()})"
        return [_Shortfall(direction, m.value, floor, f">= {floor.value}", text)]
    spread = ctx.thresholds.get(SPREAD_KEY)
    median = node_median(figures, direction)
    if spread is None or median is None or m.value >= median * (1 - spread.value):
        return []
    below = (median - m.value) / median * 100
    text = (
        f"{words} bandwidth {m.value:.1f} GB/s, {below:.0f} % below the node's median {median:.1f} GB/s, more than "
        f"{spread.value * 100:g} % ({spread.where()}) although above its floor {floor.value} GB/s ({floor.where()})"
    )
    expected = f">= {median * (1 - spread.value):.6g} (node median {median:.6g} less {spread.value:g})"
    return [_Shortfall(direction, m.value, spread, expected, text)]


def _failure_text(gpu: Gpu, shortfalls: list[_Shortfall], mine: dict[str, HostLinkMeasurement | None]) -> str:
    first = shortfalls[0]
    also = "; ".join(s.text for s in shortfalls[1:])
    more = f" (also: {also})" if also else ""
    return f"GPU {gpu.index}: {first.text}{more}; likely cause: {likely_cause(gpu, mine.get(first.direction))}"


def likely_cause(gpu: Gpu, m: HostLinkMeasurement | None) -> str:
    """What the node's own facts point at for a slow host link; every cause they support, or what to check."""
    causes = [*_link_causes(gpu)]
    far = m is not None and None not in (m.host_numa_node, gpu.numa_node) and m.host_numa_node != gpu.numa_node
    if far and m is not None:
        causes.append(
            f"the pinned host buffer sat on NUMA node {m.host_numa_node} while GPU {gpu.index} hangs off NUMA "
            f"node {gpu.numa_node} (host_numa_node vs the GPU's numa_node), so every copy crossed the CPU "
            "interconnect — bind the buffer to the GPU's own node (numactl --membind)"
        )
    mode = (gpu.virtualization_mode or "").strip().lower()
    if mode in _VM_MODES:
        causes.append(
            f"a VM (virtualization mode {mode}): DMA passes the hypervisor's IOMMU — check that ATS and the "
            "IOMMU passthrough/large-page settings of the host are enabled for the GPU"
        )
    if causes:
        return "; or ".join(causes)
    return (
        "nothing in the probe's facts explains it (PCIe link at its maximum, host buffer on the GPU's NUMA node, no "
        "VM) — check `lspci -vv` LnkSta under load, the BIOS PCIe settings and the PCIe switch above the GPU"
    )


def _link_causes(gpu: Gpu) -> list[str]:
    """The PCIe link trained below what GPU and slot can do, or NVLink-C2C links down, from the probe's facts."""
    found: list[str] = []
    width, width_max = gpu.pcie_width_current, gpu.pcie_width_max
    if width is not None and width_max is not None and width < width_max:
        found.append(
            f"the PCIe link trained at x{width} of x{width_max} (pcie_width_current vs pcie_width_max): a riser, "
            "slot or retimer fault — reseat the GPU and check `lspci -vv` LnkSta"
        )
    gen, which = (gpu.pcie_gen_loaded, "pcie_gen_loaded") if gpu.pcie_gen_loaded is not None else (None, "")
    if gen is None and gpu.pcie_gen_current is not None:
        gen, which = gpu.pcie_gen_current, "pcie_gen_current, read at idle"
    if gen is not None and gpu.pcie_gen_max is not None and gen < gpu.pcie_gen_max:
        found.append(
            f"the PCIe link runs at Gen{gen} of Gen{gpu.pcie_gen_max} ({which} vs pcie_gen_max): a BIOS slot "
            "speed setting or a marginal link that trained down"
        )
    down = _c2c_down(gpu.c2c)
    if down:
        found.append(f"NVLink-C2C link(s) {down} inactive (nvidia-smi c2c -s)")
    return found


def _c2c_down(c2c: C2CInfo | None) -> str:
    return "" if c2c is None else ", ".join(str(link.link) for link in c2c.links if link.active is False)


def _properties(
    ctx: Context,
    gpu: Gpu,
    mine: dict[str, HostLinkMeasurement | None],
    focus: tuple[str, Threshold, str] | None = None,
) -> list[tuple[str, str]]:
    """The failing direction (``focus``: direction, threshold, expected) or else the one nearest its floor as
    measured/expected, and every direction's figure and floor."""
    ratios = {d: m.value / _threshold(ctx, d).value for d, m in mine.items() if m is not None and m.value is not None}
    shown = min(ratios, key=lambda d: ratios[d]) if ratios else next(iter(mine))
    threshold = _threshold(ctx, shown)
    expected = f">= {threshold.value}"
    if focus is not None:
        shown, threshold, expected = focus
    figure = mine[shown]
    props = measured_properties(
        figure.value if figure is not None else None, expected, "GB/s", threshold
    ) + gpu_properties(gpu)
    props.append(("direction", shown))
    for direction, m in mine.items():
        value = "not_measured" if m is None or m.value is None else f"{m.value:.6g}"
        props.append((f"host_link_{direction}_gbps", value))
        props.append((f"host_link_{direction}_floor_gbps", f"{_threshold(ctx, direction).value:g}"))
    spread = ctx.thresholds.get(SPREAD_KEY)
    if spread is not None:
        props.append(("host_link_below_median_max_fraction", f"{spread.value:g}"))
    return props


@per_gpu
def c2c_link(ctx: Context, gpu: Gpu) -> Verdict:
    """NVLink-C2C between the GPU and its Grace CPU, judged as NVLinks are: every link present and active, each
    at or above its floor of bandwidth (NVML_FI_DEV_C2C_LINK_COUNT, _GET_STATUS, _GET_MAX_BW)."""
    index = gpu.index
    required = ctx.thresholds.get(C2C_REQUIRED_KEY)
    if required is None:
        return ctx.missing_threshold(C2C_REQUIRED_KEY)
    if required.value is not True:
        return not_applicable(f"the SKU's host link is PCIe, not NVLink-C2C ({required.where()} = false)")
    floor = ctx.thresholds.get(C2C_LINK_KEY)
    info = gpu.c2c
    links = [] if info is None else info.links
    count = None if info is None else (info.link_count if info.link_count is not None else len(links) or None)
    active = [link for link in links if link.active]
    speeds = [link.max_bandwidth_gbps for link in active if link.max_bandwidth_gbps is not None]
    measured = f"{len(active)} of {count if count is not None else '?'} active" + (
        f", slowest {min(speeds):.1f} GB/s" if speeds else ""
    )
    expected = "every link active" + (f", each >= {floor.value} GB/s" if floor is not None else "")
    props = measured_properties(measured, expected, "NVLink-C2C links", floor or required) + gpu_properties(gpu)
    if info is None:
        reason = ctx.node.unknown_reason(f"gpu{index}.c2c", "the source does not report NVML's NVLink-C2C fields")
        return unknown(f"the NVLink-C2C links of GPU {index}", reason, props)
    cause = (
        "an NVLink-C2C link down or trained at a lower rate — check `nvidia-smi c2c -s` and the kernel log for Xid 121"
    )
    if not count:
        return failed(
            f"GPU {index}: reports no NVLink-C2C link, expected its links to the Grace CPU ({required.where()}); "
            "likely cause: the driver does not see the C2C links (firmware or driver fault) or this is no Grace node",
            props,
        )
    down = [link.link for link in links if link.active is False]
    if down:
        return failed(
            f"GPU {index}: NVLink-C2C link(s) {', '.join(map(str, down))} inactive ({measured}), expected every link "
            f"active ({required.where()}); likely cause: {cause}",
            props,
        )
    limit = floor.value if floor is not None else None
    # An unread speed is unknown (below), never the floor: 0 GB/s is slow, not missing.
    slow = [
        link
        for link in active
        if limit is not None and link.max_bandwidth_gbps is not None and link.max_bandwidth_gbps < limit
    ]
    if slow and floor is not None:
        shown = ", ".join(f"link {link.link} {link.max_bandwidth_gbps:.1f} GB/s" for link in slow)
        return failed(
            f"GPU {index}: NVLink-C2C {shown}, below {floor.value} GB/s ({floor.where()}); likely cause: {cause}",
            props,
        )
    unread = [
        link.link for link in links if link.active is None or (floor is not None and link.max_bandwidth_gbps is None)
    ]
    if unread or len(links) < count:
        absent = [n for n in range(count) if n not in {link.link for link in links}]
        shown = ", ".join(map(str, sorted({*unread, *absent})))
        reason = ctx.node.unknown_reason(
            f"gpu{index}.c2c", f"the state or bandwidth of C2C link(s) {shown} was not read"
        )
        return unknown(f"the NVLink-C2C links of GPU {index}", reason, props)
    return passed(f"GPU {index}: NVLink-C2C {measured}, every link active", props)


_RANK = {"fail": 0, "unknown": 1, "no_evidence": 1, "pass": 2}


def with_c2c(figures: Verdict, links: Verdict) -> Verdict:
    """One GPU's host link as one verdict: its figures and, where the SKU requires NVLink-C2C, its C2C links.

    The worse of the two decides; where both fail the sentence names both. On a PCIe SKU the links do not
    apply and the figures' verdict stands alone.
    """
    if links.outcome.value == "not_applicable":
        return figures
    if figures.outcome.value == "not_applicable":
        return links
    worse, other = (figures, links) if _RANK[figures.outcome.value] <= _RANK[links.outcome.value] else (links, figures)
    both = f"{worse.message}; {other.message}" if worse.outcome.value == other.outcome.value else worse.message
    props = list(worse.properties) + [(f"c2c_{name}", value) for name, value in links.properties if worse is figures]
    return dataclasses.replace(worse, message=both, properties=props)
