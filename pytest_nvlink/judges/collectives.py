"""Collective verdicts: bus bandwidth per operation over all the suite's GPUs, and the NCCL transport audit.

Measurements arrive as model objects whichever source produced them (a live run, a replayed
snapshot, parsed tool output), so re-judging a saved run against other thresholds is the same code.
"""

from __future__ import annotations

import math

from pytest_nvlink.judges.context import Context
from pytest_nvlink.judges.mig import mig_note, with_mig_cause
from pytest_nvlink.model import CollectiveMeasurement, NcclAudit, TransportChannel
from pytest_nvlink.verdict import Verdict, failed, measured_properties, not_applicable, passed, unknown

MIB = 1 << 20


def pick_collective(op: str, size_mib: int, results: list[CollectiveMeasurement]) -> CollectiveMeasurement | None:
    """The result at the threshold's size; a run that reached no size at all (hung, killed) counts there too.

    A figure at another size is not the figure the threshold is defined on: a trimmed log that lost
    the row at the judged size must read as "no result at that size", not pass on a larger message.
    """
    mine = [r for r in results if r.op == op]
    exact = [r for r in mine if r.size_bytes == size_mib * MIB or (r.size_bytes == 0 and r.error)]
    if not exact:
        return None
    # Several results at one size (files that disagree): the worst, a failed run first, is the verdict's.
    return min(exact, key=lambda r: (r.busbw_gbps is not None and not r.error, r.busbw_gbps or 0.0))


def _wrong_data(op: str, results: list[CollectiveMeasurement]) -> CollectiveMeasurement | None:
    """A result of ``op`` at any size whose data did not verify: the run is broken whatever its speed."""
    return next((r for r in results if r.op == op and r.correct is False and r.busbw_gbps is not None), None)


def _sizes_text(op: str, results: list[CollectiveMeasurement]) -> str:
    sizes = sorted({r.size_bytes for r in results if r.op == op and r.size_bytes})
    return ", ".join(f"{size / MIB:g} MiB" for size in sizes) or "none"


def collective(ctx: Context, op: str, results: list[CollectiveMeasurement]) -> Verdict:
    threshold = ctx.thresholds.get(f"collectives.{op}.busbw_min_gbps")
    if threshold is None:
        return ctx.missing_threshold(f"collectives.{op}.busbw_min_gbps")
    size_mib = int(ctx.thresholds.value(f"collectives.{op}.size_mib", 1024))
    # Only a figure over all the suite's GPUs counts; another is shown only to say why it does not.
    covering = [r for r in results if rank_gap(ctx, r) is None and _across_hosts(ctx, r) is None]
    m = pick_collective(op, size_mib, covering) or pick_collective(op, size_mib, results)
    props = measured_properties(m.busbw_gbps if m else None, f">= {threshold.value}", "GB/s busbw", threshold)
    if m is not None:
        props += [
            ("size_bytes", str(m.size_bytes)),
            ("world_size", str(m.world_size)),
            ("rank_gpus", _gpu_list(m.rank_gpus) if m.rank_gpus is not None else "unknown"),
            ("algbw_gbps", str(m.algbw_gbps)),
            ("time_us", str(m.time_us)),
            ("correct", str(m.correct)),
            ("nvls_available", str(m.nvls_available)),
            ("backend", str(m.backend)),
        ]
    if m is not None and m.correct is False and m.busbw_gbps is None:
        # Evidence of a run that gave no figure at all (hung or killed): a failure, not missing evidence.
        return failed(
            f"{op}: {m.error or 'the run produced no result'}; likely cause: "
            + with_mig_cause(
                ctx.node,
                _ranks_gpus(ctx, m),
                "NCCL hung (a link, NVSwitch or P2P fault) — rerun with NCCL_DEBUG=INFO and check dmesg for Xid errors",
            ),
            props,
        )
    if m is None or m.error or m.busbw_gbps is None:
        reason = (m.error if m else None) or (
            f"no {op} result at {size_mib} MiB, the size the minimum is defined on "
            f"({ctx.thresholds.name}:collectives.{op}.size_mib); sizes recorded: {_sizes_text(op, results)}"
        )
        return unknown(f"{op} bus bandwidth", reason, props)
    out_of_scope = _single_rank(m) or _across_hosts(ctx, m)
    if out_of_scope is not None:
        return unknown(f"{op} bus bandwidth", f"{op}: {out_of_scope}", props)
    wrong = _wrong_data(op, covering) or m
    if wrong.correct is False:
        return failed(
            f"{op} at {wrong.size_bytes / MIB:.0f} MiB returned WRONG DATA (like nccl-tests #wrong > 0); "
            "likely cause: a faulty GPU, link or NCCL/driver bug — rerun and check dmesg for Xid errors",
            props,
        )
    gap = rank_gap(ctx, m)
    if gap is not None:
        return failed(
            f"{op}: busbw {m.busbw_gbps:.1f} GB/s was measured over {_ranks_text(m)}, but the suite expects all "
            f"{ctx.suite.gpu_count} GPUs ({ctx.suite.file.name}:suite.gpu_count): {gap}; a figure over other GPUs "
            "says nothing about this node's ring; likely cause: a GPU lost or hidden by CUDA_VISIBLE_DEVICES when "
            "it ran, or a run over a subset (nccl-tests -g/-n) — rerun over every GPU",
            props,
        )
    if not math.isfinite(m.busbw_gbps) or m.busbw_gbps < 0:
        return failed(
            f"{op}: busbw {m.busbw_gbps} GB/s is not a possible figure, so it is not judged against "
            f"{threshold.where()}; likely cause: the source is damaged or the run's timing is broken — rerun",
            props,
        )
    note = ""
    if m.correct is None:
        # nccl-tests -c 0 (or '#wrong N/A') says nothing about the data: record it rather than pass silently.
        props.append(("validated", "no"))
        note = "; results not validated (nccl-tests -c 0 or #wrong N/A)"
    if m.busbw_gbps >= threshold.value:
        return passed(f"{op}: busbw {m.busbw_gbps:.1f} GB/s over {_ranks_text(m)}{note}", props)
    return failed(
        f"{op}: busbw {m.busbw_gbps:.1f} GB/s over {m.world_size} ranks{note}, below "
        f"{threshold.value} GB/s ({threshold.where()}); likely cause: "
        f"{with_mig_cause(ctx.node, _ranks_gpus(ctx, m), _collective_cause(ctx, op, m))}",
        props,
    )


def _single_rank(m: CollectiveMeasurement) -> str | None:
    """A run of one rank (nccl-tests without MPI under a launcher prints one such table per process)."""
    if m.world_size != 1:
        return None
    return (
        f"single rank: the figure at {m.size_bytes / MIB:g} MiB comes from a run of 1 rank ({m.source}), whose "
        "busbw is 0 by definition and says nothing about NVLink; likely cause: nccl-tests built without MPI=1 "
        "started once per GPU by mpirun/srun (every process prints its own single-rank table) — rebuild with "
        "MPI=1 or run one process with -g over every GPU"
    )


def _across_hosts(ctx: Context, m: CollectiveMeasurement) -> str | None:
    """A multi-node figure judged against a one-server suite: it runs over the network between the hosts."""
    conditions = m.conditions or {}
    if ctx.suite.gpus_per_host is not None or "nodes" not in conditions:
        return None  # a rack suite: the figure over its hosts is the multi-node NVLink (MNNVL) one
    hosts = f" ({conditions['hosts']})" if "hosts" in conditions else ""
    busbw = f"busbw {m.busbw_gbps:.1f} GB/s " if m.busbw_gbps is not None else ""
    return (
        f"multi-node result: {busbw}over {m.world_size} ranks on {conditions['nodes']} hosts{hosts}; a figure "
        "across hosts runs over the network between them and says nothing about this node's NVLink ring, so it "
        f"is not judged against the single-node suite {ctx.suite.name}'s busbw minimum — give a run over this "
        f"node's {ctx.suite.gpu_count} GPUs"
    )


def rank_gap(ctx: Context, m: CollectiveMeasurement) -> str | None:
    """Why the ranks of ``m`` are not exactly the suite's GPUs (count, and identity where known); None if they are."""
    expected = ctx.suite.gpu_count
    if m.world_size != expected:
        return f"{m.world_size} of {expected} GPUs took part"
    if m.rank_gpus is None:
        return None
    if len(m.rank_gpus) != expected or sorted(m.rank_gpus) != list(range(expected)):
        missing = sorted(set(range(expected)) - set(m.rank_gpus))
        doubled = sorted({g for g in m.rank_gpus if m.rank_gpus.count(g) > 1})
        parts = [f"GPU(s) {_gpu_list(missing)} not covered"] if missing else []
        parts += [f"GPU(s) {_gpu_list(doubled)} ran more than one rank"] if doubled else []
        outside = sorted(set(m.rank_gpus) - set(range(expected)))
        parts += [f"GPU(s) {_gpu_list(outside)} are not in the suite"] if outside else []
        return "; ".join(parts)
    return None


def _ranks_text(m: CollectiveMeasurement) -> str:
    on = f" on GPU(s) {_gpu_list(m.rank_gpus)}" if m.rank_gpus is not None else ""
    return f"{m.world_size} rank(s){on}"


def _gpu_list(gpus: list[int] | set[int]) -> str:
    return ", ".join(str(g) for g in gpus) if gpus else "none"


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
    rack = ctx.suite.gpus_per_host is not None  # channel device numbers restart on every host: judged by rank
    bad = [] if audit is None or rack else _off_nvlink(ctx, audit)
    # The suite's NVLink paths are what make P2P/NVLS the expected transport on every channel.
    props = measured_properties(
        None if audit is None else f"{len(bad)} of {len(audit.channels)} on SHM/NET",
        "0 channels on SHM/NET between GPUs the suite expects on NVLink",
        "NCCL channels",
        suite=ctx.suite_at("topology.default"),
    )
    if audit is None:
        return unknown("the transports NCCL used", "no NCCL INFO log captured", props)
    props += [("channels", str(len(audit.channels))), ("nvls_available", str(audit.nvls_available))]
    props += [(f"env_{k}", v) for k, v in sorted(audit.env.items())]
    if audit.p2p_disabled_warnings:
        mig = mig_note(ctx.node, _channel_gpus(audit.channels) or range(ctx.suite.gpu_count))
        return failed(f"NCCL reports P2P disabled: {audit.p2p_disabled_warnings[0]}{_env_note(audit)}{mig}", props)
    if rack:  # the rack judges are imported only for rack suites
        from pytest_nvlink.judges.rack import rack_transport

        off_nvlink = rack_transport(ctx, audit)
        if off_nvlink is not None:
            return off_nvlink
    if bad:
        first = bad[0]
        key = ctx.suite_where(ctx.path_key(first.src_dev, first.dst_dev))
        pairs = sorted(
            {f"rank {c.src_rank}[GPU {c.src_dev}] -> rank {c.dst_rank}[GPU {c.dst_dev}] via {c.detail}" for c in bad}
        )
        return failed(
            f"NCCL used {bad[0].transport} instead of NVLink P2P on {len(bad)} channel(s): "
            f"{'; '.join(pairs[:4])}{' …' if len(pairs) > 4 else ''}{_env_note(audit)}; expected P2P or NVLS "
            f"between GPUs the suite expects on NVLink ({key}); likely cause: "
            f"{with_mig_cause(ctx.node, _channel_gpus(bad), _transport_cause(first.transport))}",
            props,
        )
    if audit.last_warn:
        # NCCL warns where setting up or running a transport failed ("Cuda failure 'peer access is not
        # supported ...'"): channel lines printed before it do not say the run used them as printed.
        return failed(
            f"NCCL warned: {audit.last_warn}{_env_note(audit)}; a run whose log holds an NCCL WARN is no proof of "
            "its transports, whatever its channel lines say; likely cause: "
            + with_mig_cause(
                ctx.node,
                _channel_gpus(audit.channels) or range(ctx.suite.gpu_count),
                "P2P or a transport failed to set up (peer access, IPC or NVLink fault) — check the warning and "
                "dmesg for Xid errors",
            ),
            props,
        )
    if not audit.channels:
        return unknown(
            "the transports NCCL used",
            "the NCCL log has no 'Channel … via …' lines (NCCL_DEBUG=INFO not in effect?)",
            props,
        )
    if rack:
        from pytest_nvlink.judges.rack import rack_audit_gap

        uncovered = rack_audit_gap(ctx, audit)
    else:
        uncovered = _audit_gap(ctx, audit)
    if uncovered:
        return failed(uncovered, props)
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


def _off_nvlink(ctx: Context, audit: NcclAudit) -> list[TransportChannel]:
    """SHM/NET channels between GPUs the suite expects on NVLink, less those between hosts of a multi-node run."""
    crossing = _cross_host_channels(ctx, audit)
    return [
        c
        for c in audit.channels
        if c.transport in ("SHM", "NET")
        and (c.src_rank, c.dst_rank) not in crossing
        and _expects_nvlink(ctx, c.src_dev, c.dst_dev)
    ]


def _cross_host_channels(ctx: Context, audit: NcclAudit) -> set[tuple[int, int]]:
    """(src rank, dst rank) of channels between ranks on different hosts of a multi-node run: NET/IB there is expected.

    Host names alone do not make a run multi-node (ranks in separate pods of one server have their own host
    names, and NET between them is the fault to report): only a run that the evidence states spans several
    nodes (NCCL's own nNodes in the log, nccl-tests' header or srun -N, device lines on several hosts) excuses
    its cross-host channels.
    """
    multi = {
        (r.source or "").removeprefix("nccl-tests: ")
        for r in ctx.node.measurements.collectives
        if int((r.conditions or {}).get("nodes", "1")) > 1
    }
    sources = set((audit.source or "").split(", "))
    if not multi & sources and not (audit.nodes is not None and audit.nodes > 1):
        return set()
    host_of = {r.rank: r.host for r in audit.ranks if r.host}
    return {
        (c.src_rank, c.dst_rank)
        for c in audit.channels
        if c.src_rank in host_of and c.dst_rank in host_of and host_of[c.src_rank] != host_of[c.dst_rank]
    }


def _expects_nvlink(ctx: Context, src_dev: int, dst_dev: int) -> bool:
    # A channel's device numbers are NVML's already (model.TransportChannel).
    return src_dev == dst_dev or ctx.suite.pair_expects_nvlink(src_dev, dst_dev)


def _audit_gap(ctx: Context, audit: NcclAudit) -> str | None:
    """Why the log does not show every GPU the suite expects on NVLink; None when it does.

    A log of a run over 2 GPUs says nothing about the transports of the other 6, so it cannot
    pass the audit of an 8-GPU node.
    """
    count = ctx.suite.gpu_count
    expects = ctx.suite.pair_expects_nvlink
    expected = {a for a in range(count) if any(expects(a, b) for b in range(count) if b != a)}
    ranks = {rank for c in audit.channels for rank in (c.src_rank, c.dst_rank)}
    seen = {dev for c in audit.channels for dev in (c.src_dev, c.dst_dev)}
    missing = sorted(expected - seen)
    if not missing:
        return None
    return (
        f"NCCL transport audit incomplete: the log covers {len(ranks)} rank(s) ({_gpu_list(sorted(ranks))}) "
        f"on GPU(s) {_gpu_list(sorted(seen))}, "
        f"but the suite expects GPU(s) {_gpu_list(sorted(expected))} on NVLink ({ctx.suite.file.name}:topology); "
        f"no channel of GPU(s) {_gpu_list(missing)} was seen, so their "
        "transport is unknown; likely cause: the log is from a run over fewer GPUs (nccl-tests -g/-n, "
        f"CUDA_VISIBLE_DEVICES) or a GPU was lost — capture NCCL_DEBUG=INFO from a run over all {count} GPUs"
    )


def _ranks_gpus(ctx: Context, m: CollectiveMeasurement) -> list[int]:
    """The GPUs a collective ran on: its ranks' where the source says, else every GPU of the suite."""
    return m.rank_gpus if m.rank_gpus is not None else list(range(ctx.suite.gpu_count))


def _channel_gpus(channels: list[TransportChannel]) -> list[int]:
    """Both GPUs of every channel, in order: a channel's device numbers are NVML indices on one host."""
    return [gpu for c in channels for gpu in (c.src_dev, c.dst_dev)]


def _transport_cause(transport: str) -> str:
    if transport == "NET":
        return (
            "NCCL saw the ranks as different hosts (containers or pods without a shared host id, NCCL_HOSTID) "
            "or had P2P and SHM disabled, so it went through the network stack — check NCCL_P2P_DISABLE and "
            "NCCL_SHM_DISABLE"
        )
    return (
        "NCCL could not use P2P between these GPUs (a VM or container without NVLink P2P, P2P disabled by a "
        "registry key, NCCL_P2P_DISABLE or NCCL_P2P_LEVEL), so it staged through host memory — see test_p2p_status"
    )


def _env_note(audit: NcclAudit) -> str:
    inherited = [f"{k}={v}" for k, v in sorted(audit.env.items())]
    return f" (inherited {' '.join(inherited)})" if inherited else ""
