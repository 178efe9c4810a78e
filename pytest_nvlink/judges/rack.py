"""Rack verdicts: a node spanning several hosts in one NVLink domain (an NVL72 rack), judged tray by tray.

A suite with ``gpus_per_host`` places GPU i on tray ``i // gpus_per_host`` (the launcher numbers
GPUs tray by tray); which host a tray is comes from ``Gpu.host``. A tray slot without GPUs is a
missing tray, never a smaller rack. Every tray must sit in the same NVLink clique of the same
cluster as the majority, send/recv pairs are judged per pair against ``p2p.sendrecv_min_gbps``, and
NCCL traffic between trays must stay on NVLink (P2P over MNNVL, NVLS).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import Gpu, NcclAudit, P2PMeasurement, TransportChannel
from pytest_nvlink.verdict import Verdict, failed, measured_properties, not_applicable, passed, unknown

SENDRECV_KEY = "p2p.sendrecv_min_gbps"
CLIQUE_KEY = "fabric.clique_required"
# Transports that leave the NVLink fabric: the network (IB/RoCE/sockets) and SHARP over it.
OFF_NVLINK = ("NET", "COLLNET")


def tray_count(ctx: Context) -> int:
    per_host = ctx.suite.gpus_per_host
    return 0 if per_host is None else ctx.suite.gpu_count // per_host


def tray_slots(ctx: Context, tray: int) -> range:
    per_host = ctx.suite.gpus_per_host or 1
    return range(tray * per_host, (tray + 1) * per_host)


def tray_gpus(ctx: Context, tray: int) -> list[Gpu]:
    return [gpu for gpu in ctx.node.gpus if gpu.index in tray_slots(ctx, tray)]


def _layout(ctx: Context) -> str:
    per_host = ctx.suite.gpus_per_host
    return (
        f"{tray_count(ctx)} trays of {per_host} GPUs ({ctx.suite_where('suite.gpu_count')} = {ctx.suite.gpu_count}, "
        f"suite.gpus_per_host = {per_host})"
    )


def _span(ctx: Context, tray: int) -> str:
    slots = tray_slots(ctx, tray)
    return f"GPUs {slots[0]}-{slots[-1]}"


def _tray_props(ctx: Context, tray: int, measured: object, expected: str, unit: str) -> list[tuple[str, str]]:
    props = measured_properties(measured, expected, unit, suite=ctx.suite_at("suite.gpus_per_host"))
    hosts = sorted({gpu.host for gpu in tray_gpus(ctx, tray) if gpu.host})
    return [*props, ("tray", str(tray)), *(("tray_host", host) for host in hosts[:1])]


def _missing_tray(ctx: Context, tray: int) -> Verdict:
    present = sorted({gpu.host for gpu in ctx.node.gpus if gpu.host})
    return failed(
        f"tray {tray} missing: none of its {_span(ctx, tray)} in the rack, which has {len(present)} of "
        f"{tray_count(ctx)} trays; expected {_layout(ctx)}; likely cause: the host is down, drained or not in the "
        f"job's allocation (srun -N {tray_count(ctx)} --ntasks-per-node={ctx.suite.gpus_per_host}), or its ranks "
        "never started",
        _tray_props(ctx, tray, "absent", f"{ctx.suite.gpus_per_host} GPUs", "GPUs"),
    )


# --- trays -------------------------------------------------------------------------------------


def rack_trays(ctx: Context) -> Verdict:
    """Every tray slot holds GPUs of one host, and the rack has exactly the suite's number of hosts."""
    expected = tray_count(ctx)
    hosts = sorted({gpu.host for gpu in ctx.node.gpus if gpu.host})
    props = measured_properties(len(hosts), str(expected), "trays", suite=ctx.suite_at("suite.gpus_per_host"))
    missing = [tray for tray in range(expected) if not tray_gpus(ctx, tray)]
    if missing:
        named = ", ".join(f"tray {t} ({_span(ctx, t)})" for t in missing)
        return failed(
            f"{named} missing: the rack has {len(hosts)} of {expected} trays; expected {_layout(ctx)}; likely cause: "
            "the host is down, drained or not in the job's allocation, or its ranks never started",
            props,
        )
    unnamed = [gpu.index for gpu in ctx.node.gpus if not gpu.host]
    if unnamed:
        return unknown("which tray each GPU sits in", _no_host(unnamed), props)
    if len(hosts) != expected:
        return failed(
            f"the rack's GPUs name {len(hosts)} hosts, expected {expected} ({_layout(ctx)}); see test_rack_tray for "
            "the tray whose GPUs belong to a wrong host",
            props,
        )
    return passed(f"{expected} trays present: {', '.join(hosts)}", props)


def _no_host(indices: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in list(indices)[:8])
    return f"GPU(s) {shown} name no host, so the source is not a rack snapshot (python -m pytest_nvlink.launch rack)"


def tray(ctx: Context, tray: int) -> Verdict:
    """One tray: present, one host, exactly ``gpus_per_host`` GPUs of that host, all usable."""
    gpus = tray_gpus(ctx, tray)
    per_host = ctx.suite.gpus_per_host or 0
    if not gpus:
        return _missing_tray(ctx, tray)
    hosts = sorted({gpu.host for gpu in gpus if gpu.host})
    props = _tray_props(ctx, tray, len(gpus), str(per_host), "GPUs")
    if len(hosts) != 1 or any(not gpu.host for gpu in gpus):
        unnamed = [gpu.index for gpu in gpus if not gpu.host]
        if unnamed:
            return unknown(f"the host of tray {tray}", _no_host(unnamed), props)
        by_host = "; ".join(f"{h}: {', '.join(str(g.index) for g in gpus if g.host == h)}" for h in hosts)
        return failed(
            f"tray {tray} ({_span(ctx, tray)}) mixes hosts ({by_host}); expected one host per tray ({_layout(ctx)}); "
            "likely cause: a host runs more or fewer ranks than it has GPUs (--ntasks-per-node)",
            props,
        )
    host = hosts[0]
    on_host = [gpu for gpu in ctx.node.gpus if gpu.host == host]
    if len(on_host) != per_host or len(gpus) != per_host:
        return failed(
            f"tray {tray} (host {host}) has {len(gpus)} GPU(s) in its slots and {len(on_host)} on the host, expected "
            f"{per_host} ({_layout(ctx)}); likely cause: a GPU not enumerated on {host} (dmesg Xid 79) or the host "
            "listed twice in the job",
            props,
        )
    lost = [f"GPU {gpu.index}: {ctx.problem_of(gpu)}" for gpu in gpus if ctx.problem_of(gpu)]
    if lost:
        return failed(
            f"tray {tray} (host {host}) has unusable GPUs: {'; '.join(lost)}; expected {per_host} usable GPUs "
            f"({_layout(ctx)}); likely cause: the tray's probe failed or a GPU fell off the bus",
            props,
        )
    return passed(f"tray {tray}: host {host}, {_span(ctx, tray)}", props)


# --- one clique ----------------------------------------------------------------------------------

Membership = tuple[str, int]  # (cluster UUID, clique id)


def _is_zero_uuid(uuid: str) -> bool:
    return not uuid.replace("-", "").replace("0", "").strip()


def _membership(gpu: Gpu) -> Membership | None:
    fabric = gpu.fabric
    if fabric is None or fabric.cluster_uuid is None or fabric.clique_id is None:
        return None
    return fabric.cluster_uuid, fabric.clique_id


def _tray_membership(ctx: Context, tray: int) -> Membership | None:
    """The one membership all of the tray's usable GPUs report; None when unknown or split."""
    seen = {_membership(gpu) for gpu in tray_gpus(ctx, tray) if ctx.problem_of(gpu) is None}
    return next(iter(seen)) if len(seen) == 1 else None


def _shown(membership: Membership) -> str:
    return f"clique {membership[1]} of cluster {membership[0]}"


def rack_clique(ctx: Context, tray: int) -> Verdict:
    """The tray's GPUs share a non-zero clique of a real cluster, the same as the majority of trays."""
    threshold = ctx.thresholds.get(CLIQUE_KEY)
    if threshold is None:
        return ctx.missing_threshold(CLIQUE_KEY)  # a waiver makes it not apply, anything else fails
    if threshold.value is False:
        return not_applicable(f"{threshold.where()} = false")
    gpus = [gpu for gpu in tray_gpus(ctx, tray) if ctx.problem_of(gpu) is None]
    if not tray_gpus(ctx, tray):
        return _missing_tray(ctx, tray)
    host = gpus[0].host if gpus else None
    own = _tray_membership(ctx, tray)
    majority, holders, total = _majority(ctx)
    expected = _shown(majority) if majority else "one clique on all trays"
    props = measured_properties(_shown(own) if own else None, expected, "fabric clique", threshold)
    props += [("tray", str(tray)), *((("tray_host", host),) if host else ())]
    early = _clique_of_gpus(ctx, tray, gpus, props, threshold.where())
    if early is not None:
        return early
    assert own is not None
    found = (majority, holders, total)
    return _against_majority(ctx, tray, host, own, majority=found, props=props, where=threshold.where())


def _clique_of_gpus(
    ctx: Context, tray: int, gpus: list[Gpu], props: list[tuple[str, str]], where: str
) -> Verdict | None:
    host = gpus[0].host if gpus else "unknown"
    if not gpus:
        return failed(f"tray {tray} (host {host}) has no usable GPU, so its fabric clique is unknown", props)
    unread = [gpu.index for gpu in gpus if _membership(gpu) is None]
    if unread:
        reason = ctx.node.unknown_reason(f"gpu{unread[0]}.fabric", "the source reports no clique id / cluster UUID")
        return unknown(f"the fabric clique of tray {tray} (host {host})", reason, props)
    split = sorted({m for m in map(_membership, gpus) if m is not None})
    if len(split) > 1:
        return failed(
            f"tray {tray} (host {host}): its GPUs report different cliques ({'; '.join(map(_shown, split))}); "
            f"expected one ({where}); likely cause: a GPU registered with another fabric partition — check "
            f"nvidia-smi -q (Fabric) on {host} and Fabric Manager/IMEX logs",
            props,
        )
    cluster, clique = split[0]
    if clique == 0 or _is_zero_uuid(cluster):
        what = "clique id 0" if clique == 0 else f"ClusterUUID {cluster} (all zeros)"
        return failed(
            f"tray {tray} (host {host}): fabric reports {what}, expected a non-zero clique of a rack cluster "
            f"({where}); likely cause: the tray is not part of a multi-node NVLink partition (IMEX not running, "
            f"Fabric Manager not configured for the rack, or switch trays unreachable) — check nvidia-smi -q on {host}",
            props,
        )
    return None


def _majority(ctx: Context) -> tuple[Membership | None, int, int]:
    """The membership most trays report, how many report it, and how many trays report one at all."""
    memberships = [m for m in (_tray_membership(ctx, t) for t in range(tray_count(ctx))) if m is not None]
    if not memberships:
        return None, 0, 0
    (top, holders), *_ = Counter(memberships).most_common(1)
    return top, holders, len(memberships)


def _against_majority(
    ctx: Context,
    tray: int,
    host: str | None,
    own: Membership,
    *,
    majority: tuple[Membership | None, int, int],
    props: list[tuple[str, str]],
    where: str,
) -> Verdict:
    top, holders, total = majority
    if top is None or holders * 2 <= total:
        return failed(
            f"tray {tray} (host {host}) is in {_shown(own)}, but no clique holds a majority of the {total} trays "
            f"({holders} at most); expected one clique on all {tray_count(ctx)} trays ({where}); likely cause: the "
            "job spans trays of several racks or NVLink partitions — allocate one rack (Slurm --segment, clique label)",
            props,
        )
    if own != top:
        return failed(
            f"tray {tray} (host {host}) is in {_shown(own)}, but the rack's majority ({holders} of {total} trays) "
            f"is in {_shown(top)} ({where}); likely cause: the tray belongs to another rack or NVLink partition "
            f"(a tray swapped in, a Fabric Manager partition, or the job placed across racks) — check nvidia-smi -q "
            f"on {host}",
            props,
        )
    return passed(f"tray {tray} (host {host}): {_shown(own)}, as {holders} of {total} trays", props)


# --- send/recv pairs -------------------------------------------------------------------------------


def _where_gpu(ctx: Context, index: int) -> str:
    gpu = ctx.node.gpu(index)
    if gpu is None or gpu.host is None:
        return f"GPU {index} (tray {ctx.suite.host_slot(index)})"
    local = f", GPU {gpu.local_index} there" if gpu.local_index is not None else ""
    return f"GPU {index} ({gpu.host}{local})"


def _pair_text(ctx: Context, m: P2PMeasurement) -> str:
    return f"{_where_gpu(ctx, m.src)} <-> {_where_gpu(ctx, m.dst)}"


@dataclass(frozen=True)
class _PairFinding:
    measurement: P2PMeasurement
    problem: str  # "slow" | "unmeasured"


def rack_sendrecv(ctx: Context, tray: int) -> Verdict:
    """Every send/recv pair with a GPU on this tray at or above the floor; at least one pair to another tray."""
    threshold = ctx.thresholds.get(SENDRECV_KEY)
    if threshold is None:
        return ctx.missing_threshold(SENDRECV_KEY)  # a waiver makes it not apply, anything else fails
    if not tray_gpus(ctx, tray):
        return _missing_tray(ctx, tray)
    floor = float(threshold.value)
    pairs = [m for m in ctx.node.measurements.p2p if m.kind == "sendrecv" and tray in _trays_of(ctx, m)]
    cross = [m for m in pairs if len(_trays_of(ctx, m)) == 2]
    findings = [_PairFinding(m, "unmeasured") for m in pairs if m.value is None]
    # Not "below the floor" but "not at or above it": a NaN compares false either way and must not pass.
    findings += [_PairFinding(m, "slow") for m in pairs if m.value is not None and not floor <= m.value < math.inf]
    worst = min((m.value for m in pairs if m.value is not None), default=None)
    props = measured_properties(worst, f">= {floor}", "GB/s", threshold)
    props += [("tray", str(tray)), ("pairs", str(len(pairs))), ("pairs_across_trays", str(len(cross)))]
    if not cross:
        return unknown(
            f"the send/recv bandwidth between tray {tray} and the other trays",
            "no send/recv pair of its GPUs with another tray was measured (python -m pytest_nvlink.launch rack)",
            props,
        )
    if findings:
        return failed(_pairs_message(ctx, tray, findings, threshold.where(), floor), props)
    return passed(
        f"tray {tray}: {len(pairs)} send/recv pair(s), {len(cross)} to other trays, slowest {worst:.1f} GB/s", props
    )


def _trays_of(ctx: Context, m: P2PMeasurement) -> set[int | None]:
    return {ctx.suite.host_slot(m.src), ctx.suite.host_slot(m.dst)}


def _pairs_message(ctx: Context, tray: int, findings: list[_PairFinding], where: str, floor: float) -> str:
    ordered = sorted(findings, key=lambda f: (f.problem != "unmeasured", f.measurement.value or 0.0))
    parts = []
    for finding in ordered[:3]:
        m = finding.measurement
        if finding.problem == "unmeasured":
            parts.append(f"{_pair_text(ctx, m)}: not measured ({m.error or 'no figure recorded'})")
        else:
            parts.append(f"{_pair_text(ctx, m)}: send/recv {m.value:.1f} GB/s per direction, below {floor} GB/s")
    more = f" (and {len(findings) - 3} more)" if len(findings) > 3 else ""
    return f"tray {tray}: {'; '.join(parts)}{more} ({where}); likely cause: {_pairs_cause(ctx, tray, findings)}"


def _pairs_cause(ctx: Context, tray: int, findings: list[_PairFinding]) -> str:
    measured = [f.measurement for f in findings]
    common = set.intersection(*({m.src, m.dst} for m in measured))
    if len(measured) > 1 and len(common) == 1:
        gpu = next(iter(common))
        return (
            f"{_where_gpu(ctx, gpu)} is in every failing pair: its NVLinks or their switch-tray ports "
            "(check nvidia-smi nvlink -s on its host and test_nvlink_active_links)"
        )
    others = set.intersection(*(_trays_of(ctx, m) - {tray} for m in measured))
    shared = ""
    if len(measured) > 1 and len(others) == 1:
        other = next(iter(others))
        host = next((g.host for g in tray_gpus(ctx, other or 0) if g.host), "unknown host")
        shared = f"tray {other} ({host}) is in every failing pair (see test_rack_clique[tray{other}]); "
    slow = [m.value for m in measured if m.value is not None]
    if slow and max(slow) < 100:
        return (
            f"{shared}a figure at network speed: NCCL took InfiniBand/Ethernet instead of NVLink between the trays "
            "(see test_nccl_transport; a tray outside the clique, NCCL_MNNVL_ENABLE=0, or IMEX channels missing)"
        )
    return (
        f"{shared}links trained down or a degraded NVLink switch tray on the path between these trays; check "
        "nvidia-smi nvlink -s on both hosts and the fabric health (nvidia-smi -q, Fabric)"
    )


# --- NCCL transports between trays ------------------------------------------------------------------


def rank_to_gpu(ctx: Context) -> dict[int, int]:
    """Global rank -> rack GPU, from a collective that names its ranks' GPUs; else rank r on GPU r.

    The launcher places ranks tray by tray (srun --ntasks-per-node, torchrun per host), which is the
    fallback's assumption; NCCL's ``R[D]`` device numbers restart on every host, so they cannot place a rank.
    """
    for m in ctx.node.measurements.collectives:
        if m.rank_gpus is not None and len(m.rank_gpus) == ctx.suite.gpu_count:
            return dict(enumerate(m.rank_gpus))
    return {rank: rank for rank in range(ctx.suite.gpu_count)}


def _channel_text(ctx: Context, c: TransportChannel, gpus: dict[int, int]) -> str:
    src, dst = gpus.get(c.src_rank, c.src_rank), gpus.get(c.dst_rank, c.dst_rank)
    return f"rank {c.src_rank} [{_where_gpu(ctx, src)}] -> rank {c.dst_rank} [{_where_gpu(ctx, dst)}] via {c.detail}"


def rack_transport(ctx: Context, audit: NcclAudit) -> Verdict | None:
    """Channels of a rack: between trays only P2P (MNNVL) or NVLS; None when nothing between trays is wrong.

    Within a tray the usual rules apply; the caller judges the rest (coverage, NVLS) by ranks.
    """
    gpus = rank_to_gpu(ctx)
    slot = ctx.suite.host_slot
    between = [
        c for c in audit.channels if slot(gpus.get(c.src_rank, c.src_rank)) != slot(gpus.get(c.dst_rank, c.dst_rank))
    ]
    within = [c for c in audit.channels if c not in between]
    left = [c for c in between if c.transport in OFF_NVLINK]
    staged = [c for c in within if c.transport in ("SHM", *OFF_NVLINK)]
    props = measured_properties(
        f"{len(left)} of {len(between)} between trays, {len(staged)} of {len(within)} within trays off NVLink",
        "every channel on P2P (MNNVL between trays) or NVLS",
        "NCCL channels",
        suite=ctx.suite_at("suite.gpus_per_host"),
    )
    props += [("channels", str(len(audit.channels))), ("channels_between_trays", str(len(between)))]
    if left:
        shown = sorted({_channel_text(ctx, c, gpus) for c in left})
        return failed(
            f"rack traffic left NVLink: NCCL used {left[0].transport} between trays on {len(left)} of {len(between)} "
            f"channel(s): {'; '.join(shown[:3])}{' …' if len(shown) > 3 else ''}; expected P2P over MNNVL or NVLS "
            f"between the trays of one rack ({ctx.suite_where('suite.gpus_per_host')}); likely cause: a tray outside "
            "the rack's clique (see test_rack_clique), NCCL_MNNVL_ENABLE=0, no IMEX channel in the job "
            "(NVIDIA_IMEX_CHANNELS, a Kubernetes ComputeDomain), or an NCCL without multi-node NVLink",
            props,
        )
    if staged:
        shown = sorted({_channel_text(ctx, c, gpus) for c in staged})
        return failed(
            f"NCCL used {staged[0].transport} instead of NVLink P2P within a tray on {len(staged)} channel(s): "
            f"{'; '.join(shown[:3])}; expected P2P or NVLS within a tray ({ctx.suite_where('topology.default')}); "
            "likely cause: P2P disabled (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL) or a container without NVLink P2P",
            props,
        )
    return None


def rack_audit_gap(ctx: Context, audit: NcclAudit) -> str | None:
    """Why the channels do not cover every GPU of the rack (by rank, not by per-host device number); None if they do."""
    gpus = rank_to_gpu(ctx)
    seen = {gpus.get(rank, rank) for c in audit.channels for rank in (c.src_rank, c.dst_rank)}
    missing = sorted(set(range(ctx.suite.gpu_count)) - seen)
    if not missing:
        return None
    trays = sorted({ctx.suite.host_slot(g) for g in missing}, key=lambda t: t or 0)
    return (
        f"NCCL transport audit incomplete: no channel of GPU(s) {', '.join(map(str, missing[:12]))}"
        f"{' …' if len(missing) > 12 else ''} (tray(s) {', '.join(map(str, trays))}) was seen, so their transport "
        f"is unknown; expected all {ctx.suite.gpu_count} ranks ({ctx.suite_where('suite.gpu_count')}); likely cause: "
        "the NCCL logs of some ranks were not gathered, or the run covered fewer trays"
    )
