"""What ``python -m pytest_nvlink.launch`` does on each rank: collectives, and a rack's facts and figures.

Every rank runs the same program; rank 0 alone writes. ``collectives`` writes the measurements
as JSON; ``rack`` gathers each tray's probe into one rack snapshot, adds the collectives and the
send/recv pair figures, and judges it with pytest on that snapshot. A rank whose own part failed
exits 1; rank 0 exits with the verdict (collectives: 1 when any entry failed).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_nvlink import __version__
from pytest_nvlink.config.suites import Suite
from pytest_nvlink.config.thresholds import Thresholds
from pytest_nvlink.core.atomic import write_text_atomically
from pytest_nvlink.core.placeholders import expand, placeholder_values
from pytest_nvlink.measure import collectives as local
from pytest_nvlink.measure import launched, sendrecv
from pytest_nvlink.measure.collectives import CollectiveSpec
from pytest_nvlink.measure.launched import Group
from pytest_nvlink.measure.ranks import RankInfo
from pytest_nvlink.measure.runner import sizes_from_thresholds
from pytest_nvlink.model import (
    CollectiveMeasurement,
    Environment,
    Measurements,
    NcclAudit,
    Node,
    P2PMeasurement,
)
from pytest_nvlink.model import trays as rack
from pytest_nvlink.model.document import SnapshotError, save_snapshot, snapshot_document
from pytest_nvlink.sources.live.versions import live_versions
from pytest_nvlink.sources.snapshot.file import load_snapshot

LAUNCH_KIND = "pytest-nvlink-launch"
LAUNCH_SCHEMA = 1
RACK_SNAPSHOT = "rack-snapshot.json"
TRAY_SNAPSHOT_ENV = "PYTEST_NVLINK_TRAY_SNAPSHOT"


@dataclass(frozen=True)
class Settings:
    """The parsed command line, shared by both commands."""

    suite: Suite
    thresholds: Thresholds
    backend: str
    site_thresholds: Path | None = None  # laid over the suite's set, passed on to the judging pytest
    op_timeout_s: float | None = None
    tray_snapshot: str | None = None  # rack: replay this file ({host} expands) instead of probing
    cross_peers: int = sendrecv.DEFAULT_CROSS_PEERS
    rack_name: str | None = None
    pytest_args: tuple[str, ...] = ()


def collective_spec(settings: Settings, world_size: int) -> CollectiveSpec:
    measure = settings.suite.measure
    sizes = sizes_from_thresholds(settings.thresholds, measure.collectives)
    return CollectiveSpec(
        backend=settings.backend,
        world_size=world_size,
        sizes=tuple(sizes.items()),
        iterations=measure.collective_iterations,
        warmup=measure.collective_warmup,
        timeout_s=float(measure.timeout_s),
        op_timeout_s=settings.op_timeout_s,
    )


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamped(entries: list[CollectiveMeasurement], settings: Settings, info: RankInfo) -> list[CollectiveMeasurement]:
    """The conditions a baseline comparison needs, as the local harness records them."""
    measure = settings.suite.measure
    conditions = {
        "iterations": str(measure.collective_iterations),
        "warmup": str(measure.collective_warmup),
        "backend": settings.backend,
        "launcher": info.launcher,
    }
    return [dataclasses.replace(entry, conditions=dict(conditions)) for entry in entries]


def _write_json(path: Path, document: dict[str, Any]) -> None:
    write_text_atomically(path, json.dumps(document, indent=1) + "\n")


def _ranks(group: Group) -> list[dict[str, Any]]:
    if group.members:
        return [dataclasses.asdict(member) for member in group.members]
    return [{"rank": group.info.rank, "host": group.info.host, "local_rank": group.info.local_rank}]


def with_audit(entries: list[CollectiveMeasurement], audit: NcclAudit | None) -> list[CollectiveMeasurement]:
    if audit is None:
        return entries
    return [dataclasses.replace(entry, nvls_available=audit.nvls_available) for entry in entries]


def collectives_document(
    group: Group, settings: Settings, entries: list[CollectiveMeasurement], audit: NcclAudit | None = None
) -> dict[str, Any]:
    """What rank 0 writes for ``collectives``: the measurements as a snapshot holds them, and who ran them."""
    ranks = _ranks(group)
    return {
        "kind": LAUNCH_KIND,
        "command": "collectives",
        "schema_version": LAUNCH_SCHEMA,
        "plugin_version": __version__,
        "created_utc": _utc_now(),
        "suite": settings.suite.name,
        "thresholds": [str(path) for path in settings.thresholds.files],
        "backend": settings.backend,
        "launcher": group.info.launcher,
        "world_size": group.info.world_size,
        "ranks": ranks,
        "hosts": list(dict.fromkeys(str(r["host"]) for r in ranks)),
        "measurements": dataclasses.asdict(Measurements(collectives=with_audit(entries, audit), nccl=audit)),
        "error": group.failure,
    }


def _entries_failed(entries: Sequence[CollectiveMeasurement | P2PMeasurement]) -> bool:
    return any(e.error is not None or getattr(e, "correct", True) is False for e in entries)


def run_collectives_command(info: RankInfo, settings: Settings, out: Path) -> int:
    """Every rank measures; rank 0 writes ``out``. Should rank 0's own watch give up on a step, it
    writes ``out`` with that op and every later one failed and exits ``HUNG_EXIT``."""

    def finish(group: Group) -> None:
        entries = local.entries_for(group.spec, dict(group.measured), group.refused, group.failure, None)
        _write_json(
            out, collectives_document(group, settings, stamped(entries, settings, info), launched.nccl_audit(group))
        )
        _report(group)

    group = launched.join(info, collective_spec(settings, info.world_size), finish if info.rank == 0 else None)
    entries = stamped(launched.run_collectives(group), settings, info)
    audit = launched.nccl_audit(group)
    code = 1 if group.failure is not None else 0
    if group.is_root:
        group.reporting()
        _write_json(out, collectives_document(group, settings, entries, audit))
        code = 1 if code or _entries_failed(entries) else 0
    _report(group)
    launched.leave(group)
    return code


def _report(group: Group) -> None:
    if group.failure is not None:
        print(f"pytest-nvlink launch: {group.failure}", file=sys.stderr, flush=True)


# --- rack ------------------------------------------------------------------------------------


def tray_document(info: RankInfo, settings: Settings, backend: str) -> dict[str, Any]:
    """This host's probe as ``{"host", "document"}`` or ``{"host", "error"}`` (plain JSON)."""
    try:
        node = _tray_node(info, settings, backend)
    except Exception as exc:  # any failure of one tray's probe is that tray's recorded error
        return {"host": info.host, "error": f"{type(exc).__name__}: {exc}"}
    return {"host": info.host, "document": snapshot_document(node)}


def _tray_node(info: RankInfo, settings: Settings, backend: str) -> Node:
    replay = settings.tray_snapshot or os.environ.get(TRAY_SNAPSHOT_ENV)
    if replay:
        path = Path(expand(replay, placeholder_values(info.host), "--tray-snapshot"))
        try:
            return load_snapshot(path)
        except SnapshotError as exc:
            raise RuntimeError(f"tray snapshot {exc}") from None
    from pytest_nvlink.sources.live.probe import join_cuda_indices, probe_node, torch_cuda_devices

    node = probe_node()
    if backend == "nccl":  # CUDA is in use on this rank anyway; its numbering maps ranks to GPUs
        join_cuda_indices(node, torch_cuda_devices())
    return node


def _probes(group: Group, gathered: list[Any] | None, own: dict[str, Any] | None) -> list[rack.TrayProbe]:
    """One probe per host; hosts whose probe never arrived carry the group's failure."""
    by_host: dict[str, list[int]] = {}
    for member in sorted(group.members, key=lambda m: (m.host, m.local_rank)):
        by_host.setdefault(member.host, []).append(member.rank)
    if not by_host:
        by_host[group.info.host] = [group.info.rank]
    sent = {str(item["host"]): item for item in gathered or [] if item is not None}
    if own is not None:  # rank 0 probed its own host: kept even when the gather broke
        sent.setdefault(own["host"], own)
    probes = []
    for host, ranks in by_host.items():
        item = sent.get(host)
        if item is None:
            error = group.failure or "its local rank 0 sent no probe (is LOCAL_RANK/SLURM_LOCALID 0 on that host?)"
            probes.append(rack.TrayProbe(host, ranks, error=error))
        else:
            probes.append(rack.TrayProbe(host, ranks, item.get("document"), item.get("error")))
    return probes


def _gather_trays(group: Group, settings: Settings) -> list[rack.TrayProbe]:
    group.step("probing this tray")
    own = tray_document(group.info, settings, settings.backend) if group.info.local_rank == 0 else None
    gathered: list[Any] | None = None
    if group.state is not None and group.failure is None:
        group.step("gathering the trays' probes")
        try:
            gathered = launched.gather_json(group, own)
        except Exception as exc:
            group.reporting()
            group.fail("gathering the trays' probes", exc, time.monotonic())
    if not group.is_root:
        return []
    return _probes(group, gathered, own)


def _trays_of_ranks(group: Group) -> list[list[int]]:
    """Ranks grouped by host, trays in order of their first rank, each by local rank."""
    by_host: dict[str, list[tuple[int, int]]] = {}
    for member in group.members:
        by_host.setdefault(member.host, []).append((member.local_rank, member.rank))
    trays = [[rank for _, rank in sorted(members)] for members in by_host.values()]
    return sorted(trays, key=min)


def _pair_plan(group: Group, settings: Settings) -> sendrecv.SendRecvPlan:
    measure = settings.suite.measure
    size = int(settings.thresholds.value("collectives.sendrecv.size_mib", measure.p2p_size_mib)) << 20
    rounds = sendrecv.pair_schedule(_trays_of_ranks(group), settings.cross_peers)
    return sendrecv.SendRecvPlan(size, measure.p2p_iterations, measure.p2p_warmup, tuple(map(tuple, rounds)))


def _sendrecv(group: Group, settings: Settings) -> list[dict[str, Any]] | None:
    results = None
    if group.state is not None and group.failure is None:
        started = time.monotonic()
        group.step("send/recv pairs")
        try:
            results = sendrecv.run_sendrecv(group, _pair_plan(group, settings))
        except Exception as exc:
            group.reporting()
            group.fail("send/recv pairs", exc, started)
    return results


def rack_node(group: Group, settings: Settings, probes: list[rack.TrayProbe]) -> tuple[Node, dict[int, int]]:
    trays = rack.read_trays(probes)
    sources = {t.node.source for t in trays if t.node is not None}
    host = settings.rack_name or f"rack-{trays[0].host}"
    node = rack.merge_trays(trays, host, "live" if sources <= {"live"} else "replay")
    if group.failure is not None and not group.members:
        node.probe_errors.append(
            f"the rack's process group did not form, so the other trays are unknown: {group.failure}"
        )
    local_rank_of = {m.rank: m.local_rank for m in group.members} or {group.info.rank: group.info.local_rank}
    return node, rack.rank_gpus(trays, local_rank_of, {m.rank: m.gpu_uuid for m in group.members})


@dataclass
class _RackSoFar:
    """What rank 0 has gathered so far: written as it stands should its own watch give up on a step."""

    probes: list[rack.TrayProbe] | None = None
    results: list[dict[str, Any]] | None = None


def run_rack_command(info: RankInfo, settings: Settings, out_dir: Path) -> int:
    so_far = _RackSoFar()

    def finish(group: Group) -> None:  # rank 0, from its watch: the hung step and every later one fail
        entries = local.entries_for(group.spec, dict(group.measured), group.refused, group.failure, None)
        probes = so_far.probes if so_far.probes is not None else _probes(group, None, None)
        collectives, audit = stamped(entries, settings, info), launched.nccl_audit(group)
        _report(group)
        saved = _save_rack(
            group, settings, out_dir, probes=probes, collectives=collectives, results=so_far.results, audit=audit
        )
        judge(settings, saved, out_dir)

    group = launched.join(info, collective_spec(settings, info.world_size), finish if info.rank == 0 else None)
    so_far.probes = _gather_trays(group, settings)
    collectives = stamped(launched.run_collectives(group), settings, info)
    so_far.results = _sendrecv(group, settings)
    audit = launched.nccl_audit(group)
    _report(group)
    if not group.is_root:
        launched.leave(group)
        return 1 if group.failure is not None else 0
    group.reporting()
    snapshot = _save_rack(
        group, settings, out_dir, probes=so_far.probes, collectives=collectives, results=so_far.results, audit=audit
    )
    launched.leave(group)
    return judge(settings, snapshot, out_dir)


def _save_rack(
    group: Group,
    settings: Settings,
    out_dir: Path,
    *,
    probes: list[rack.TrayProbe],
    collectives: list[CollectiveMeasurement],
    results: list[dict[str, Any]] | None,
    audit: NcclAudit | None,
) -> Path:
    """Rank 0: the rack snapshot, with what was measured and every figure that was not as an error."""
    node, gpu_of = rack_node(group, settings, probes)
    pairs = sendrecv.measurements(results, _pair_plan(group, settings), gpu_of, settings.backend, group.failure)
    on_gpus = [_on_gpus(c, gpu_of) for c in with_audit(collectives, audit)]
    node.measurements = Measurements(p2p=pairs, collectives=on_gpus, nccl=audit)
    node.environment = Environment(
        versions=live_versions(),
        suite=settings.suite.name,
        suite_file=str(settings.suite.file),
        thresholds=[str(path) for path in settings.thresholds.files],
        saved_utc=_utc_now(),
    )
    snapshot = out_dir / RACK_SNAPSHOT
    save_snapshot(node, snapshot)
    return snapshot


def _on_gpus(entry: CollectiveMeasurement, gpu_of: dict[int, int]) -> CollectiveMeasurement:
    """Name each rank's GPU, as the local harness does; gloo ranks run on the CPU, so they name none."""
    if entry.world_size != len(gpu_of) or entry.backend == "gloo":
        return entry
    return dataclasses.replace(entry, rank_gpus=[gpu_of[rank] for rank in range(entry.world_size)])


def judge_command(settings: Settings, snapshot: Path, out_dir: Path) -> list[str]:
    """The pytest run that judges the rack snapshot and writes the rack's one verdict.

    It runs in ``out_dir`` (so that it picks up no project's ini file), hence every path is absolute.
    """
    out = out_dir.resolve()
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",  # rank 0 writes the verdict files and nothing else
        f"--nvlink-suite={settings.suite.file.resolve()}",
        f"--nvlink-replay={snapshot.resolve()}",
        f"--nvlink-json={out / 'results.json'}",
        f"--junitxml={out / 'junit.xml'}",
        f"--nvlink-report={out / 'report.html'}",
    ]
    if settings.site_thresholds is not None:
        command.append(f"--nvlink-thresholds={settings.site_thresholds.resolve()}")
    return [*command, *settings.pytest_args]


def judge(settings: Settings, snapshot: Path, out_dir: Path) -> int:
    command = judge_command(settings, snapshot, out_dir)
    print("pytest-nvlink launch: judging the rack: " + " ".join(command[1:]), flush=True)
    return subprocess.run(command, cwd=out_dir, check=False).returncode
