"""NVLink verdicts per GPU: active links, generation, per-link speed and error counters."""

from __future__ import annotations

import math

from pytest_nvlink.config.thresholds import Threshold
from pytest_nvlink.judges.context import Context, gpu_properties, per_gpu
from pytest_nvlink.judges.errors import judge_error_counters
from pytest_nvlink.model import Gpu, NvLinkInfo
from pytest_nvlink.verdict import Verdict, failed, measured_properties, not_applicable, passed, unknown


def _nvlink_threshold(ctx: Context, key: str) -> Threshold | None:
    return ctx.thresholds.get(f"nvlink.{key}")


@per_gpu
def nvlink_active_links(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    threshold = _nvlink_threshold(ctx, "active_links")
    if threshold is None:
        return ctx.missing_threshold("nvlink.active_links")
    expected = int(threshold.value)
    active = gpu.active_link_count()
    props = measured_properties(active, str(expected), "links", threshold) + gpu_properties(gpu)
    if active is None:
        return unknown(
            f"the NVLink state of GPU {index}",
            ctx.node.unknown_reason(f"gpu{index}.nvlink", "NVLink state not reported"),
            props,
        )
    if active == expected:
        return passed(f"GPU {index}: {active} NVLinks active", props)
    return failed(_links_message(ctx, gpu, active, expected, threshold), props)


def _links_message(ctx: Context, gpu: Gpu, active: int, expected: int, threshold: Threshold) -> str:
    head = f"GPU {gpu.index}: {active} of {expected} NVLinks active ({threshold.where()})"
    if expected == 0:
        return f"{head}; this SKU has no NVLink, so the GPU is not the model the suite describes"
    if active > expected:
        return (
            f"GPU {gpu.index}: {active} NVLinks active, more than the {expected} this SKU has "
            f"({threshold.where()}); a link cannot appear, so the suite or threshold set does not describe this "
            f"{gpu.name or 'GPU'}: pick the matching suite (--nvlink-suite=auto) or correct the site file"
        )
    inactive = [link.link for link in gpu.nvlinks or [] if link.active is False]
    if active == 0 and ctx.node.virtualization() in ("passthrough", "vgpu"):
        return (
            f"{head}; this is a {ctx.node.virtualization()} VM guest that hides NVLink, so GPU traffic falls "
            "back silently to PCIe: ask the provider for NVLink/NVSwitch passthrough (Fabric Manager "
            "full-passthrough or shared-NVSwitch partition)"
        )
    if active == 0:
        return (
            f"{head}; likely cause: NVLink is not trained (Fabric Manager not running on an NVSwitch "
            "system, or a driver/firmware mismatch): check `systemctl status nvidia-fabricmanager` and "
            "`nvidia-smi nvlink -s`"
        )
    listed = ", ".join(str(n) for n in inactive) if inactive else "unknown"
    return (
        f"{head}, inactive link(s): {listed}; likely cause: a link down (bad cable/board connector or "
        "NVSwitch port): check `nvidia-smi nvlink -s -i "
        f"{gpu.index}` and dmesg for Xid 74, then reseat or RMA"
    )


@per_gpu
def nvlink_version(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    ready = _active_links(ctx, gpu, "version", "NVLink version")
    if isinstance(ready, Verdict):
        return ready
    threshold, active = ready
    versions = sorted({link.version for link in active if link.version is not None})
    props = measured_properties(
        ",".join(map(str, versions)) or None, str(threshold.value), "NVLink generation", threshold
    ) + gpu_properties(gpu)
    if not active or len(versions) == 0 or any(link.version is None for link in active):
        return unknown(
            f"the NVLink version of GPU {index}",
            ctx.node.unknown_reason(f"gpu{index}.nvlink", "no active link reports a version"),
            props,
        )
    if versions != [threshold.value]:
        return failed(
            f"GPU {index}: NVLink generation {versions} on active links, expected {threshold.value} "
            f"({threshold.where()}); likely cause: a different SKU than the suite describes, or links trained "
            "at a fallback version",
            props,
        )
    return passed(f"GPU {index}: NVLink {threshold.value}", props)


def _no_active_links(ctx: Context, gpu: Gpu, what: str) -> Verdict | None:
    """A GPU with no active NVLink cannot show a version or speed: say so plainly instead of 'unknown'."""
    active = gpu.active_link_count()
    if active != 0:
        return None
    threshold = ctx.thresholds.get("nvlink.active_links")
    expected = threshold.value if threshold else 0
    return failed(
        f"GPU {gpu.index}: no active NVLink (0 of {expected}), so its {what} cannot be judged; "
        f"see test_nvlink_active_links[gpu{gpu.index}] for the cause",
        measured_properties(0, str(expected), "active links", threshold) + gpu_properties(gpu),
    )


def _active_links(ctx: Context, gpu: Gpu, key: str, what: str) -> tuple[Threshold, list[NvLinkInfo]] | Verdict:
    """The threshold and active links a per-link check needs, or the verdict that ends it early."""
    threshold = _nvlink_threshold(ctx, key)
    no_nvlink = _no_nvlink_expected(ctx)
    if no_nvlink is not None:
        return no_nvlink
    if threshold is None:
        return ctx.missing_threshold(f"nvlink.{key}")
    dead = _no_active_links(ctx, gpu, what)
    if dead:
        return dead
    return threshold, [link for link in gpu.nvlinks or [] if link.active]


def _no_nvlink_expected(ctx: Context) -> Verdict | None:
    """Per-link checks do not apply only where the threshold file states the SKU has no NVLink."""
    links = ctx.thresholds.get("nvlink.active_links")
    if links is not None and links.value == 0:
        return not_applicable(f"the SKU has no NVLink ({links.where()} = 0)")
    return None


@per_gpu
def nvlink_speed(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    ready = _active_links(ctx, gpu, "link_speed_min_gbps", "NVLink speed")
    if isinstance(ready, Verdict):
        return ready
    threshold, active = ready
    speeds = [link.speed_gbps for link in active]
    known = [s for s in speeds if s is not None]
    slowest = min(known) if known else None
    props = measured_properties(slowest, f">= {threshold.value}", "GB/s", threshold) + gpu_properties(gpu)
    if not active or len(known) != len(speeds):
        return unknown(
            f"the NVLink speed of GPU {index}",
            ctx.node.unknown_reason(f"gpu{index}.nvlink", "no per-link speed reported"),
            props,
        )
    # "not at or above the floor": a NaN speed compares false either way, and an infinite one is no speed.
    slow = [
        link.link
        for link in active
        if link.speed_gbps is not None and not threshold.value <= link.speed_gbps < math.inf
    ]
    if slow:
        return failed(
            f"GPU {index}: link(s) {', '.join(map(str, slow))} run at {slowest:.3f} GB/s, below "
            f"{threshold.value} GB/s ({threshold.where()}); likely cause: links trained at reduced speed or a "
            "reduced NVLink bandwidth mode (nvidia-smi nvlink -gbm) — check cabling and nvlink -s",
            props,
        )
    mode = ctx.node.nvlink_bw_mode
    if mode not in (None, "full"):
        # Links can report full line rate while the system caps NVLink bandwidth (nvmlSystemGetNvlinkBwMode).
        return failed(
            f"GPU {index}: links run at {slowest:.3f} GB/s but the system NVLink bandwidth mode is {mode!r}, not "
            f"'full'; likely cause: a power/thermal policy or admin setting — check `nvidia-smi nvlink -gbm`",
            [*props, ("nvlink_bw_mode", mode)],
        )
    if mode is None:
        # Older drivers lack nvmlSystemGetNvlinkBwMode: the speeds pass, but the mode stays an open question.
        reason = ctx.node.unknown_reason("nvlink_bw_mode", "the source does not report it")
        return passed(
            f"GPU {index}: slowest active link {slowest:.3f} GB/s; NVLink bandwidth mode unknown ({reason})",
            [*props, ("nvlink_bw_mode", "unknown"), ("nvlink_bw_mode_reason", reason)],
        )
    return passed(f"GPU {index}: slowest active link {slowest:.3f} GB/s", [*props, ("nvlink_bw_mode", mode)])


@per_gpu
def nvlink_errors(ctx: Context, gpu: Gpu) -> Verdict:
    no_nvlink = _no_nvlink_expected(ctx)
    if no_nvlink is not None:
        return no_nvlink
    dead = _no_active_links(ctx, gpu, "NVLink error counters")
    if dead:
        return dead
    return judge_error_counters(ctx.thresholds, ctx.node, gpu, gpu_properties(gpu), measured_here=ctx.measures_node)
