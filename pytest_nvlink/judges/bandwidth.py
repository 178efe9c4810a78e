"""Bandwidth verdicts: P2P figures between GPU pairs, and proof that the bytes crossed NVLink.

Measurements arrive as model objects whichever source produced them (a live run, a replayed
snapshot, parsed tool output), so re-judging a saved run against other thresholds is the same code.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from functools import partial
from itertools import repeat
from typing import cast

from pytest_nvlink.config.thresholds import Threshold
from pytest_nvlink.judges.context import Context, pair_properties
from pytest_nvlink.judges.mig import mig_cause, mig_note, with_mig_cause
from pytest_nvlink.model import WRONG_DATA, P2PMeasurement
from pytest_nvlink.verdict import PassedLater, Verdict, failed, measured_properties, unknown

FigureOf = Callable[[int, int, str], "P2PMeasurement | None"]  # a provider's p2p(src, dst, kind)
P2P_KINDS: dict[str, tuple[str, str, str]] = {
    # kind: (threshold key, unit, comparison)
    "unidirectional": ("p2p.unidirectional_min_gbps", "GB/s", "min"),
    "bidirectional": ("p2p.bidirectional_min_gbps", "GB/s", "min"),
    "latency": ("p2p.latency_max_us", "us", "max"),
}
PCIE_LIKE_FRACTION = 0.25  # below a quarter of the NVLink floor, the copy cannot have used NVLink
# A copy cannot beat the links it crosses: per-link speeds are the signalling rate, so payload stays below
# their sum; 10 % covers timer granularity. A pair whose P2P falls back to PCIe may still reach a Gen5 x16
# link's ~63 GB/s per direction (PCI-SIG: 32 GT/s x 16 lanes, 128b/130b), whatever its NVLink count.
CAPACITY_SLACK = 1.10
PCIE_GEN5_X16_GBPS = 63.0


def _pair_props(ctx: Context, src: int, dst: int, m: P2PMeasurement | None) -> list[tuple[str, str]]:
    props = pair_properties(ctx, src, dst)
    if m is not None and m.source:
        props.append(("measurement_source", m.source))
    return props


def p2p_figure(ctx: Context, src: int, dst: int, kind: str, m: P2PMeasurement | None) -> Verdict:
    key, unit, comparison = P2P_KINDS[kind]
    if not ctx.nvlink_pair_usable(src, dst):  # the guard's sentence is written only for the pairs it stops
        guard = ctx.nvlink_pair_guard(src, dst, f"{key} is an NVLink figure")
        if guard:
            return guard
    threshold = ctx.thresholds.get(key)
    if threshold is None:
        return ctx.missing_threshold(key)
    value = _comparable(m)
    if m is not None and m.error and m.error.startswith(WRONG_DATA):
        return failed(
            f"GPU {src} -> GPU {dst}: {m.error}; likely cause: a faulty GPU, NVLink or NVSwitch corrupting copies — "
            "check dmesg for Xid errors and the NVLink error counters (nvidia-smi nvlink -e)",
            _figure_props(ctx, (src, dst), kind, m, threshold),
        )
    if m is None or value is None:
        reason = (m.error if m is not None and m.error else None) or "no measurement recorded"
        reason += mig_note(ctx.node, (src, dst))
        what = f"the {kind} P2P {_what(kind)} GPU {src} -> GPU {dst}"
        return unknown(what, reason, _figure_props(ctx, (src, dst), kind, m, threshold))
    if not 0 < value < math.inf:  # NaN, infinity, a figure of no time: a broken timing must not pass a bound
        return failed(
            f"GPU {src} -> GPU {dst}: {_label(kind)} {value} {unit} is not a possible figure, so it is not judged "
            f"against {threshold.where()}; likely cause: the timing is broken (a copy of no duration, a failed "
            "measurement recorded as a figure) or the source is damaged — rerun",
            _figure_props(ctx, (src, dst), kind, m, threshold),
        )
    too_fast = _above_link_capacity(ctx, src, dst, kind, value, threshold=threshold)
    if too_fast is not None:
        message, ceiling = too_fast
        capacity = measured_properties(value, f"<= {ceiling:.1f}", unit, threshold)
        return failed(message, capacity + _pair_props(ctx, src, dst, m), badness=-value)  # against a ceiling
    if value >= threshold.value if comparison == "min" else value <= threshold.value:
        # One partial, not closures over nine names: ~15,000 of these per 72-GPU run.
        return PassedLater(
            partial(_figure_passed, ctx, (src, dst), kind, m, threshold), value if comparison == "min" else -value
        )
    props, shown = _figure_props(ctx, (src, dst), kind, m, threshold), _shown(value, unit)
    word = "below" if comparison == "min" else "above"
    if m.source and ctx.node.provenance.get("p2p_bandwidth"):
        shown += f" ({m.source})"  # figures read from files: which file to open; with several, the worst figure's
    return failed(
        f"GPU {src} -> GPU {dst}: {_label(kind)} {shown}, {word} {threshold.value} {unit} "
        f"({threshold.where()}); likely cause: "
        f"{with_mig_cause(ctx.node, (src, dst), _bandwidth_cause(ctx, src, dst, kind, value))}",
        props,
        badness=value if comparison == "min" else -value,
    )


def passing_figures(
    ctx: Context, pairs: Sequence[tuple[int, int]], kind: str, figure_of: FigureOf
) -> list[float | None] | None:
    """Each pair's ranking figure when every pair surely passes :func:`p2p_figure`, else None.

    p2p_figure's pass, tested for a whole source GPU's peers at once (a 72-GPU domain asks it 15,336
    times per run): a usable NVLink pair, the threshold set, a figure within the links' capacity and on
    the right side of the bound. ``figure_of`` is asked only when every pair is usable, as the checks ask.
    """
    key, _, comparison = P2P_KINDS[kind]
    threshold = ctx.thresholds.get(key)
    if threshold is None or not ctx.all_usable(pairs):
        return None
    found = list(map(_comparable, map(figure_of, map(_SRC, pairs), map(_DST, pairs), repeat(kind))))
    if None in found:
        return None
    values = cast("list[float]", found)
    total = sum(values)  # NaN or infinity anywhere leaves the sum not finite: p2p_figure refuses those
    if total - total != 0 or min(values) <= 0:
        return None
    # value >= bound (min) or value <= bound (max) for each; NaN holds neither.
    if not all(map(operator.le if comparison == "min" else operator.ge, repeat(threshold.value), values)):
        return None
    if kind != "latency" and _any_beyond_links(ctx, pairs, values, kind):
        return None
    return found if comparison == "min" else [-value for value in values]


def _any_beyond_links(ctx: Context, pairs: Sequence[tuple[int, int]], values: list[float], kind: str) -> bool:
    """Whether _beyond_links refuses any pair's figure: one past the smaller of its GPUs' link limits."""
    limits = _capacity_limits(ctx, kind)
    return any(
        [
            value > min(at_src, at_dst)
            for value, at_src, at_dst in zip(
                values, map(limits.get, map(_SRC, pairs)), map(limits.get, map(_DST, pairs)), strict=True
            )
            if at_src is not None and at_dst is not None
        ]
    )


def _capacity_limits(ctx: Context, kind: str) -> dict[int, float]:
    """Per GPU whose links are known, the figure of ``kind`` beyond which _beyond_links refuses a pair of it:
    the ceiling of its own links (a pair's is its narrower GPU's), slack included."""
    return ctx.remembered((f"capacity_limits {kind}", 0, 0), _limits_of, _link_capacities(ctx), kind)


def _limits_of(capacities: dict[int, Capacity | None], kind: str) -> dict[int, float]:
    return {gpu: _ceiling(found[0], kind) * CAPACITY_SLACK for gpu, found in capacities.items() if found is not None}


_SRC, _DST = operator.itemgetter(0), operator.itemgetter(1)


def _figure_props(
    ctx: Context, pair: tuple[int, int], kind: str, m: P2PMeasurement | None, threshold: Threshold
) -> list[tuple[str, str]]:
    (src, dst), (_, unit, comparison) = pair, P2P_KINDS[kind]
    bound = f"{'>=' if comparison == 'min' else '<='} {threshold.value}"
    return measured_properties(_comparable(m), bound, unit, threshold) + _pair_props(ctx, src, dst, m)


def _figure_passed(
    ctx: Context, pair: tuple[int, int], kind: str, m: P2PMeasurement | None, threshold: Threshold
) -> tuple[str, list[tuple[str, str]]]:
    value, unit = _comparable(m), P2P_KINDS[kind][1]
    shown = _shown(value, unit) if value is not None else "unknown"
    return f"GPU {pair[0]} -> GPU {pair[1]}: {kind} {shown}", _figure_props(ctx, pair, kind, m, threshold)


def _shown(value: float, unit: str) -> str:
    return f"{value:.1f} {unit}" if unit == "GB/s" else f"{value:.2f} {unit}"


# Per-direction GB/s a GPU's active NVLinks can carry, their count, and where the links were taken from when the
# GPU's own were not reported ("" when they were): the SKU's thresholds then say what its links carry at most.
Capacity = tuple[float, int, str]


def _link_capacities(ctx: Context) -> dict[int, Capacity | None]:
    """Every GPU's capacity (None where not known), worked out once: each ordered pair of each bandwidth
    check asks for two of them."""
    return ctx.remembered(("link_capacities", 0, 0), _every_gpus_links, ctx)


def _every_gpus_links(ctx: Context) -> dict[int, Capacity | None]:
    sku = _sku_links(ctx)
    return {index: _summed_links(ctx, index) or sku for index in {gpu.index for gpu in ctx.node.gpus}}


def _sku_links(ctx: Context) -> Capacity | None:
    """What a GPU of the SKU carries at most when its own links are not known (evidence without nvlink -s):
    the same facts, a figure and the SKU, give the same verdict whichever source stated them."""
    count, speed = ctx.thresholds.get("nvlink.active_links"), ctx.thresholds.get("nvlink.link_speed_min_gbps")
    if count is None or speed is None or not count.value:
        return None
    where = f"{count.where()} x {speed.where()}"
    return (float(count.value) * float(speed.value), int(count.value), where)


def _summed_links(ctx: Context, index: int) -> Capacity | None:
    gpu = ctx.node.gpu(index)
    if gpu is None or gpu.nvlinks is None:
        return None
    total, count = 0.0, 0
    for link in gpu.nvlinks:
        if link.active is None:
            return None  # a link whose state is unknown: the active count is unknown
        if link.active:
            if link.speed_gbps is None:
                return None
            total += link.speed_gbps
            count += 1
    return (total, count, "") if count else None


def _beyond_links(value: float, at_src: Capacity | None, at_dst: Capacity | None, kind: str) -> Capacity | None:
    """(the most GB/s the two GPUs' active NVLinks can carry for ``kind``, the narrower GPU's link count) when
    ``value`` is more than that; None when it is not, or the links are not known, or ``kind`` is a latency."""
    if kind == "latency" or at_src is None or at_dst is None:
        return None
    narrow, links, where = min(at_src, at_dst)
    ceiling = _ceiling(narrow, kind)
    return (ceiling, links, where) if value > ceiling * CAPACITY_SLACK else None


def _ceiling(total: float, kind: str) -> float:
    """The GB/s of ``kind`` links summing to ``total`` per direction can carry (never below a PCIe Gen5 x16 link)."""
    return max(total, PCIE_GEN5_X16_GBPS) * (2 if kind == "bidirectional" else 1)


def _above_link_capacity(
    ctx: Context, src: int, dst: int, kind: str, value: float, *, threshold: Threshold
) -> tuple[str, float] | None:
    """A figure the two GPUs' NVLinks cannot carry means the timing is wrong: it must not pass as a fast pair."""
    capacities = _link_capacities(ctx)
    found = _beyond_links(value, capacities.get(src), capacities.get(dst), kind)
    if found is None:
        return None
    ceiling, links, where = found
    carried = (
        f"the SKU's {links} link(s) at their minimum speed, {where}, as the GPUs' own links are not reported"
        if where
        else f"{links} active link(s) on the narrower GPU, summed per-link speed"
    )
    return (
        f"GPU {src} -> GPU {dst}: {_label(kind)} {value:.1f} GB/s is more than the {ceiling:.1f} GB/s "
        f"the NVLinks can carry ({carried}{', both directions' if kind == 'bidirectional' else ''}), "
        "so the figure cannot be true and is not judged "
        f"against {threshold.where()}; likely cause: the timing is wrong (copies still running when the timer "
        "stopped, a per-direction figure taken as the sum, bytes counted twice) — rerun, and check the tool's version",
        ceiling,
    )


def _comparable(m: P2PMeasurement | None) -> float | None:
    """The figure on the thresholds' scale: bidirectional minimums are sums of both directions
    (p2pBandwidthLatencyTest's definition), so a per-direction figure (nvbandwidth >= 0.6) counts twice."""
    if m is None or m.value is None:
        return None
    if m.kind == "bidirectional" and m.bidirectional_sum is False:
        return 2 * m.value
    return m.value


def _label(kind: str) -> str:
    return "latency" if kind == "latency" else f"{kind} bandwidth"


def _what(kind: str) -> str:
    return "latency" if kind == "latency" else "bandwidth"


def _bandwidth_cause(ctx: Context, src: int, dst: int, kind: str, value: float) -> str:
    status = ctx.node.p2p_status(src, dst)
    if status is not None and (status.read not in (None, "ok") or status.write not in (None, "ok")):
        return (
            f"P2P is not enabled for this pair (NVML read={status.read}, write={status.write}), so copies are "
            "staged through host memory"
        )
    floor = ctx.thresholds.value("p2p.unidirectional_min_gbps")
    if kind == "unidirectional" and floor and value < floor * PCIE_LIKE_FRACTION:
        return (
            f"{value:.0f} GB/s is a PCIe/host-memory figure (~10x below NVLink, cf. 37 vs 375 GB/s on H100 "
            "in NVIDIA/nccl#1264): silent PCIe fallback — check `nvidia-smi topo -p2p rw` and the VM/IOMMU setup"
        )
    if kind == "latency":
        return "copies are staged through host memory (P2P off) or the GPUs are busy — rerun on an idle node"
    return (
        "degraded NVLink (links down or trained slow — see the nvlink checks), other load on the GPUs, or "
        "clocks/power capped — rerun on an idle node and check `nvidia-smi -q -d CLOCK,PERFORMANCE`"
    )


def path_proof(ctx: Context, src: int, dst: int, m: P2PMeasurement | None) -> Verdict:
    """Pass only if NVLink counters carried the bytes of the copy (not PCIe)."""
    guard = ctx.nvlink_pair_guard(src, dst, "no NVLink path to prove")
    if guard:
        return guard
    threshold = ctx.thresholds.get("p2p.nvlink_counter_fraction_min")
    if threshold is None:
        return ctx.missing_threshold("p2p.nvlink_counter_fraction_min")
    ceiling = ctx.thresholds.get("p2p.nvlink_counter_fraction_max")
    if ceiling is None:
        # Without an upper bound a counter scale error (per-link vs aggregate, KiB vs bytes) would pass.
        return ctx.missing_threshold("p2p.nvlink_counter_fraction_max")
    copied = m.bytes_copied if m else None
    nvlink, pcie = (m.nvlink_bytes, m.pcie_bytes) if m else (None, None)
    fraction, bounds = _nvlink_fraction(m), (threshold, ceiling)
    if fraction is None:
        note = (m.counters_note or m.error) if m else None
        return unknown(
            f"which path GPU {src} -> GPU {dst} used",
            (note or "no traffic counters recorded")
            + mig_note(ctx.node, (src, dst))
            + "; to accept bandwidth alone, waive the proof with a reason in a site threshold file: [waive] "
            '"p2p.nvlink_counter_fraction_min" = "why the counters cannot be read here"',
            _proof_props(ctx, (src, dst), m, bounds),
        )
    if fraction > ceiling.value:
        return failed(
            f"GPU {src} -> GPU {dst}: counter scale — NVLink counters moved {_gb(nvlink)} for {_gb(copied)} copied "
            f"({fraction:.0%}), more than {ceiling.value:.0%} ({ceiling.where()}); likely cause: the counters are "
            "read with the wrong semantics (per-link vs all-link aggregate, KiB vs bytes, TX and RX both summed) "
            "or other traffic ran during the copy — the proof of path cannot be trusted",
            _proof_props(ctx, (src, dst), m, bounds),
            badness=fraction,  # ranked by its share, as against the floor
        )
    if fraction >= threshold.value:
        return PassedLater(partial(_proof_passed, ctx, (src, dst), m, bounds), fraction)
    pcie_text = f", PCIe counters moved {_gb(pcie)}" if pcie is not None else ""
    fallback = (
        "silent PCIe fallback" if pcie is not None and copied and pcie >= 0.5 * copied else "bytes bypassed NVLink"
    )
    advice = "check P2P status, Fabric Manager and VM passthrough of NVLink"
    mig = mig_cause(ctx.node, (src, dst))
    return failed(
        f"GPU {src} -> GPU {dst}: {fallback} — NVLink counters moved {_gb(nvlink)} of {_gb(copied)} copied "
        f"({fraction:.0%}){pcie_text}, expected >= {threshold.value:.0%} ({threshold.where()}); "
        + (advice if mig is None else f"likely cause: {mig}; otherwise {advice}"),
        _proof_props(ctx, (src, dst), m, bounds),
        badness=fraction,
    )


def passing_proofs(ctx: Context, pairs: Sequence[tuple[int, int]], figure_of: FigureOf) -> list[float | None] | None:
    """Each pair's NVLink share when every pair surely passes :func:`path_proof` (same tests), else None."""
    floor = ctx.thresholds.get("p2p.nvlink_counter_fraction_min")
    ceiling = ctx.thresholds.get("p2p.nvlink_counter_fraction_max")
    if floor is None or ceiling is None or not ctx.all_usable(pairs):
        return None
    figures = map(figure_of, map(_SRC, pairs), map(_DST, pairs), repeat("unidirectional"))
    found = list(map(_nvlink_fraction, figures))
    if None in found:
        return None
    fractions = cast("list[float]", found)
    # floor <= fraction <= ceiling for each; NaN holds neither.
    within = all(map(operator.ge, repeat(ceiling.value), fractions))
    if not within or not all(map(operator.le, repeat(floor.value), fractions)):
        return None
    return found


def _proof_props(
    ctx: Context, pair: tuple[int, int], m: P2PMeasurement | None, bounds: tuple[Threshold, Threshold]
) -> list[tuple[str, str]]:
    floor, ceiling = bounds
    copied, nvlink, pcie = (m.bytes_copied, m.nvlink_bytes, m.pcie_bytes) if m else (None, None, None)
    return [
        *measured_properties(
            _nvlink_fraction(m), f">= {floor.value}, <= {ceiling.value}", "fraction of bytes on NVLink", floor
        ),
        *_pair_props(ctx, *pair, m),
        ("bytes_copied", str(copied)),
        ("nvlink_bytes", str(nvlink)),
        ("pcie_bytes", str(pcie)),
        ("threshold_max_key", ceiling.key),
    ]


def _proof_passed(
    ctx: Context, pair: tuple[int, int], m: P2PMeasurement | None, bounds: tuple[Threshold, Threshold]
) -> tuple[str, list[tuple[str, str]]]:
    fraction = _nvlink_fraction(m)
    share = f"{fraction:.0%}" if fraction is not None else "unknown"
    return f"GPU {pair[0]} -> GPU {pair[1]}: {share} of the copied bytes crossed NVLink", _proof_props(
        ctx, pair, m, bounds
    )


def _nvlink_fraction(m: P2PMeasurement | None) -> float | None:
    """The share of the copied bytes the NVLink counters saw; None without both counts."""
    if m is None or m.nvlink_bytes is None or not m.bytes_copied:
        return None
    return m.nvlink_bytes / m.bytes_copied


def _gb(value: int | None) -> str:
    return "unknown" if value is None else f"{value / 1e9:.2f} GB"
