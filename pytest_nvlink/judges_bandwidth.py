"""Bandwidth verdicts: P2P figures, proof that the bytes crossed NVLink, collectives, NCCL transports.

Measurements arrive as model objects whichever source produced them (a live run, a replayed
snapshot, parsed tool output), so re-judging a saved run against other thresholds is the same code.
"""

from __future__ import annotations

from pytest_nvlink.judges import Context, pair_properties
from pytest_nvlink.model import CollectiveMeasurement, NcclAudit, P2PMeasurement
from pytest_nvlink.verdict import Verdict, failed, measured_properties, not_applicable, passed, unknown

P2P_KINDS: dict[str, tuple[str, str, str]] = {
    # kind: (threshold key, unit, comparison)
    "unidirectional": ("p2p.unidirectional_min_gbps", "GB/s", "min"),
    "bidirectional": ("p2p.bidirectional_min_gbps", "GB/s", "min"),
    "latency": ("p2p.latency_max_us", "us", "max"),
}
PCIE_LIKE_FRACTION = 0.25  # below a quarter of the NVLink floor, the copy cannot have used NVLink
MIB = 1 << 20


def _pair_props(ctx: Context, src: int, dst: int, m: P2PMeasurement | None) -> list[tuple[str, str]]:
    props = pair_properties(ctx, src, dst)
    if m is not None and m.source:
        props.append(("measurement_source", m.source))
    return props


def p2p_figure(ctx: Context, src: int, dst: int, kind: str, m: P2PMeasurement | None) -> Verdict:
    key, unit, comparison = P2P_KINDS[kind]
    threshold = ctx.thresholds.get(key)
    guard = ctx.nvlink_pair_guard(src, dst, f"{key} is an NVLink figure")
    if guard:
        return guard
    if threshold is None:
        return not_applicable(f"threshold set {ctx.thresholds.name} sets no {key}")
    value = m.value if m is not None else None
    bound = f"{'>=' if comparison == 'min' else '<='} {threshold.value}"
    props = measured_properties(value, bound, unit, threshold) + _pair_props(ctx, src, dst, m)
    if m is None or value is None:
        reason = (m.error if m is not None and m.error else None) or "no measurement recorded"
        return unknown(ctx.node.source, f"the {kind} P2P {_what(kind)} GPU {src} -> GPU {dst}", reason, props)
    ok = value >= threshold.value if comparison == "min" else value <= threshold.value
    shown = f"{value:.1f} {unit}" if unit == "GB/s" else f"{value:.2f} {unit}"
    if ok:
        return passed(f"GPU {src} -> GPU {dst}: {kind} {shown}", props)
    word = "below" if comparison == "min" else "above"
    return failed(
        f"GPU {src} -> GPU {dst}: {_label(kind)} {shown}, {word} {threshold.value} {unit} "
        f"({threshold.where()}); likely cause: {_bandwidth_cause(ctx, src, dst, kind, value)}",
        props,
    )


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
    waived = ctx.thresholds.get("p2p.counters_waived")
    if waived is not None and waived.value is True:
        return not_applicable(f"traffic-counter proof waived by {waived.where()}")
    threshold = ctx.thresholds.get("p2p.nvlink_counter_fraction_min")
    if threshold is None:
        return not_applicable(f"threshold set {ctx.thresholds.name} sets no p2p.nvlink_counter_fraction_min")
    copied = m.bytes_copied if m else None
    nvlink, pcie = (m.nvlink_bytes, m.pcie_bytes) if m else (None, None)
    fraction = nvlink / copied if nvlink is not None and copied else None
    props = measured_properties(fraction, f">= {threshold.value}", "fraction of bytes on NVLink", threshold)
    props += [
        *_pair_props(ctx, src, dst, m),
        ("bytes_copied", str(copied)),
        ("nvlink_bytes", str(nvlink)),
        ("pcie_bytes", str(pcie)),
    ]
    if fraction is None:
        note = (m.counters_note or m.error) if m else None
        return unknown(
            ctx.node.source,
            f"which path GPU {src} -> GPU {dst} used",
            (note or "no traffic counters recorded")
            + "; set p2p.counters_waived = true in a site threshold file to accept bandwidth "
            "alone",
            props,
        )
    if fraction >= threshold.value:
        return passed(f"GPU {src} -> GPU {dst}: {fraction:.0%} of the copied bytes crossed NVLink", props)
    pcie_text = f", PCIe counters moved {_gb(pcie)}" if pcie is not None else ""
    fallback = (
        "silent PCIe fallback" if pcie is not None and copied and pcie >= 0.5 * copied else "bytes bypassed NVLink"
    )
    return failed(
        f"GPU {src} -> GPU {dst}: {fallback} — NVLink counters moved {_gb(nvlink)} of {_gb(copied)} copied "
        f"({fraction:.0%}){pcie_text}, expected >= {threshold.value:.0%} ({threshold.where()}); check P2P "
        "status, Fabric Manager and VM passthrough of NVLink",
        props,
    )


def _gb(value: int | None) -> str:
    return "unknown" if value is None else f"{value / 1e9:.2f} GB"


def pick_collective(op: str, size_mib: int, results: list[CollectiveMeasurement]) -> CollectiveMeasurement | None:
    """The result at the threshold's size, else the largest size measured for that op."""
    mine = [r for r in results if r.op == op]
    exact = [r for r in mine if r.size_bytes == size_mib * MIB]
    if exact:
        return max(exact, key=lambda r: r.busbw_gbps or 0.0)
    return max(mine, key=lambda r: r.size_bytes, default=None)


def collective(ctx: Context, op: str, results: list[CollectiveMeasurement]) -> Verdict:
    threshold = ctx.thresholds.get(f"collectives.{op}.busbw_min_gbps")
    if threshold is None:
        return not_applicable(f"threshold set {ctx.thresholds.name} sets no collectives.{op}.busbw_min_gbps")
    size_mib = int(ctx.thresholds.value(f"collectives.{op}.size_mib", 1024))
    m = pick_collective(op, size_mib, results)
    props = measured_properties(m.busbw_gbps if m else None, f">= {threshold.value}", "GB/s busbw", threshold)
    if m is not None:
        props += [
            ("size_bytes", str(m.size_bytes)),
            ("world_size", str(m.world_size)),
            ("algbw_gbps", str(m.algbw_gbps)),
            ("time_us", str(m.time_us)),
            ("correct", str(m.correct)),
            ("nvls_available", str(m.nvls_available)),
            ("backend", str(m.backend)),
        ]
    if m is None or m.error or m.busbw_gbps is None:
        reason = (m.error if m else None) or f"no {op} result recorded"
        return unknown(ctx.node.source, f"{op} bus bandwidth", reason, props)
    if m.correct is False:
        return failed(
            f"{op} at {m.size_bytes / MIB:.0f} MiB returned WRONG DATA (like nccl-tests #wrong > 0); "
            "likely cause: a faulty GPU, link or NCCL/driver bug — rerun and check dmesg for Xid errors",
            props,
        )
    size_note = (
        ""
        if m.size_bytes == size_mib * MIB
        else f" (measured at {m.size_bytes / MIB:g} MiB, threshold assumes {size_mib} MiB)"
    )
    if m.busbw_gbps >= threshold.value:
        return passed(f"{op}: busbw {m.busbw_gbps:.1f} GB/s{size_note}", props)
    return failed(
        f"{op}: busbw {m.busbw_gbps:.1f} GB/s over {m.world_size} ranks{size_note}, below "
        f"{threshold.value} GB/s ({threshold.where()}); likely cause: {_collective_cause(ctx, op, m)}",
        props,
    )


def _collective_cause(ctx: Context, op: str, m: CollectiveMeasurement) -> str:
    audit = ctx.node.measurements.nccl
    slow = [c for c in audit.channels if c.transport in ("SHM", "NET")] if audit else []
    if slow:
        first = slow[0]
        return (
            f"NCCL routed channel {first.channel} rank {first.src_rank} -> {first.dst_rank} via {first.detail} "
            "instead of NVLink P2P (see test_nccl_transport)"
        )
    assumes_nvls = ctx.thresholds.value(f"collectives.{op}.assumes_nvls", False)
    if assumes_nvls and m.nvls_available is False:
        return (
            "the minimum assumes NVLink SHARP (NVLS) but NVLS was not available — check Fabric Manager, "
            "NCCL_NVLS_ENABLE and the NCCL version"
        )
    return "degraded NVLink or P2P (see the P2P results), other load on the GPUs, or an old NCCL"


def nccl_transport(ctx: Context, audit: NcclAudit | None) -> Verdict:
    if not ctx.suite.expects_any_nvlink():
        return not_applicable(f"suite {ctx.suite.name} expects no NVLink, so SHM/NET transports are expected")
    bad = (
        []
        if audit is None
        else [c for c in audit.channels if c.transport in ("SHM", "NET") and _expects_nvlink(ctx, c.src_dev, c.dst_dev)]
    )
    # The suite's NVLink paths are what make P2P/NVLS the expected transport on every channel.
    props = measured_properties(
        None if audit is None else f"{len(bad)} of {len(audit.channels)} on SHM/NET",
        "0 channels on SHM/NET between GPUs the suite expects on NVLink",
        "NCCL channels",
        suite=ctx.suite_at("topology.default"),
    )
    if audit is None:
        return unknown(ctx.node.source, "the transports NCCL used", "no NCCL INFO log captured", props)
    props += [("channels", str(len(audit.channels))), ("nvls_available", str(audit.nvls_available))]
    props += [(f"env_{k}", v) for k, v in sorted(audit.env.items())]
    if audit.p2p_disabled_warnings:
        return failed(f"NCCL reports P2P disabled: {audit.p2p_disabled_warnings[0]}{_env_note(audit)}", props)
    if bad:
        pairs = sorted(
            {f"rank {c.src_rank}[GPU {c.src_dev}] -> rank {c.dst_rank}[GPU {c.dst_dev}] via {c.detail}" for c in bad}
        )
        return failed(
            f"NCCL used {bad[0].transport} instead of NVLink P2P on {len(bad)} channel(s): "
            f"{'; '.join(pairs[:4])}{' …' if len(pairs) > 4 else ''}{_env_note(audit)}",
            props,
        )
    if not audit.channels:
        return unknown(
            ctx.node.source,
            "the transports NCCL used",
            "the NCCL log has no 'Channel … via …' lines (NCCL_DEBUG=INFO not in effect?)",
            props,
        )
    if ctx.suite.nvswitch and audit.nvls_available is False and "NCCL_NVLS_ENABLE" not in audit.env:
        nvls = measured_properties(
            "NVLS not available", "NVLS available", "NCCL NVLS", suite=ctx.suite_at("suite.nvswitch")
        )
        return failed(
            "NCCL reports NVLS multicast not available on an NVSwitch system although NCCL_NVLS_ENABLE is "
            "unset; likely cause: Fabric Manager/IMEX not running or a driver without multicast",
            nvls + props[len(nvls) :],
        )
    return passed(f"all {len(audit.channels)} NCCL channels use P2P/NVLS", props)


def _expects_nvlink(ctx: Context, src_dev: int, dst_dev: int) -> bool:
    """NCCL names CUDA devices; the suite speaks NVML indices, joined where the probe knows both."""
    by_cuda = {gpu.cuda_index: gpu.index for gpu in ctx.node.gpus if gpu.cuda_index is not None}
    src, dst = by_cuda.get(src_dev, src_dev), by_cuda.get(dst_dev, dst_dev)
    return src == dst or ctx.suite.pair_expects_nvlink(src, dst)


def _env_note(audit: NcclAudit) -> str:
    inherited = [f"{k}={v}" for k, v in sorted(audit.env.items())]
    return f" (inherited {' '.join(inherited)})" if inherited else ""
