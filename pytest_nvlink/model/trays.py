"""One rack node from its trays' probes: GPUs renumbered tray by tray, every pair fact remapped.

Each tray (host) is probed by its local rank 0 and sent to rank 0 as a snapshot document (plain
JSON). Trays are ordered by their first global rank; tray t's GPU i becomes GPU ``offset_t + i``
with ``host`` and ``local_index`` recording where it sits. A tray whose probe failed is a probe
error naming the host, and its GPUs (one per rank there) stay listed with that problem, so the
rack never reads as a smaller one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_nvlink.model import Gpu, Node, P2PStatus, PairPath
from pytest_nvlink.model.document import SnapshotError, node_from_document

# Facts of the whole host that every tray of a rack should share; a tray that differs is named.
SHARED_FIELDS: tuple[str, ...] = (
    "driver_version",
    "cuda_driver_version",
    "nvml_version",
    "hypervisor",
    "nvlink_bw_mode",
    "fabric_manager_note",
)
_GPU_KEY = re.compile(r"^gpu(\d+)(?=\.|$)")
_PAIR_KEY = re.compile(r"^p2p(\d+)-(\d+)(?=\.|$)")


@dataclass
class TrayProbe:
    """What one host sent: its ranks (global, by local rank) and a snapshot document or why there is none."""

    host: str
    ranks: list[int]  # global ranks on this host, ordered by local rank
    document: dict[str, Any] | None = None
    error: str | None = None

    @property
    def first_rank(self) -> int:
        return min(self.ranks)


@dataclass
class Tray:
    host: str
    ranks: list[int]
    offset: int
    node: Node | None
    error: str | None


def read_trays(probes: Sequence[TrayProbe]) -> list[Tray]:
    """Trays in rack order with their GPU offsets; an unreadable document becomes the tray's error."""
    trays, offset = [], 0
    for probe in sorted(probes, key=lambda p: p.first_rank):
        node, error = None, probe.error
        if probe.document is not None and error is None:
            try:
                node = node_from_document(probe.document, f"tray {probe.host}")
            except SnapshotError as exc:
                error = str(exc)
        if node is None and error is None:
            error = "no probe arrived from its local rank 0"
        trays.append(Tray(probe.host, list(probe.ranks), offset, node, error))
        offset += max(len(node.gpus), len(probe.ranks)) if node is not None else len(probe.ranks)
    return trays


def rank_gpus(
    trays: Sequence[Tray], local_rank_of: dict[int, int], uuid_of: Mapping[int, str | None] | None = None
) -> dict[int, int]:
    """Global rank -> rack GPU index: the tray GPU with the rank's GPU UUID, else the one whose CUDA
    index is the rank's local rank (else that index).

    The UUID comes first: under ``srun --gpus-per-task=1`` every rank sees its GPU as ``cuda:0``, so
    neither its CUDA index nor its local rank says which of the tray's GPUs it used.
    """
    mapping = {}
    for tray in trays:
        gpus = tray.node.gpus if tray.node else []
        by_cuda = {g.cuda_index: g.index for g in gpus if g.cuda_index is not None}
        by_uuid = {_uuid_key(g.uuid): g.index for g in gpus if g.uuid}
        for rank in tray.ranks:
            local = local_rank_of[rank]
            uuid = (uuid_of or {}).get(rank)
            found = by_uuid.get(_uuid_key(uuid)) if uuid else None
            mapping[rank] = tray.offset + (found if found is not None else by_cuda.get(local, local))
    return mapping


def _uuid_key(uuid: str) -> str:
    """torch's UUIDs lack NVML's ``GPU-`` prefix."""
    text = uuid.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def merge_trays(trays: Sequence[Tray], host: str, source: str = "live") -> Node:
    """The rack as one node (no measurements yet)."""
    rack = Node(source=source, host=host, gpus=[])
    paths: list[PairPath] = []
    statuses: list[P2PStatus] = []
    for tray in trays:
        if tray.node is None:
            _lost_tray(rack, tray)
            continue
        _add_tray(rack, tray, tray.node, paths, statuses)
    rack.paths, rack.p2p = paths, statuses
    _shared_facts(rack, [t for t in trays if t.node is not None])
    _events(rack, trays)
    return rack


def _events(rack: Node, trays: Sequence[Tray]) -> None:
    """The trays' Xid events, renumbered; one window only when every tray listened (their clocks differ)."""
    windows = [(tray, tray.node.event_window) for tray in trays if tray.node is not None]
    if not windows or any(window is None for _, window in windows) or len(windows) < len(trays):
        return
    rack.xid_events = []
    gpus: list[int] = []
    for tray, window in windows:
        assert tray.node is not None
        assert window is not None
        shift = tray.offset
        gpus.extend(index + shift for index in window.gpus)
        for event in tray.node.xid_events or []:
            gpu = None if event.gpu is None else event.gpu + shift
            rack.xid_events.append(dataclasses.replace(event, gpu=gpu, at_s=None, text=f"{tray.host}: {event.text}"))
    first = windows[0][1]
    assert first is not None
    rack.event_window = dataclasses.replace(
        first, source=f"{first.source} of {len(windows)} trays", length_s=None, gpus=gpus, campaigns=[]
    )


def _lost_tray(rack: Node, tray: Tray) -> None:
    ranks = ",".join(str(r) for r in tray.ranks)
    rack.probe_errors.append(f"tray {tray.host} (ranks {ranks}): probe failed: {tray.error}")
    for local in range(len(tray.ranks)):
        problem = f"not probed: the probe of tray {tray.host} failed"
        rack.gpus.append(Gpu(index=tray.offset + local, host=tray.host, local_index=local, problem=problem))


def _add_tray(rack: Node, tray: Tray, node: Node, paths: list[PairPath], statuses: list[P2PStatus]) -> None:
    shift = tray.offset
    for gpu in node.gpus:
        rack.gpus.append(dataclasses.replace(gpu, index=gpu.index + shift, host=tray.host, local_index=gpu.index))
    for local in range(len(node.gpus), len(tray.ranks)):
        # More ranks than GPUs on the host: a rank's GPU would otherwise take the next tray's number.
        problem = f"not probed: tray {tray.host} runs {len(tray.ranks)} ranks but its probe lists {len(node.gpus)} GPUs"
        rack.gpus.append(Gpu(index=shift + local, host=tray.host, local_index=local, problem=problem))
    if node.paths is None:
        rack.unknown_reasons[f"paths.{tray.host}"] = f"tray {tray.host} reported no path classes"
    for path in node.paths or []:
        paths.append(PairPath(a=path.a + shift, b=path.b + shift, path=path.path))
    if node.p2p is None:
        rack.unknown_reasons[f"p2p.{tray.host}"] = f"tray {tray.host} reported no P2P status"
    for status in node.p2p or []:
        statuses.append(dataclasses.replace(status, src=status.src + shift, dst=status.dst + shift))
    rack.probe_errors.extend(f"tray {tray.host}: {error}" for error in node.probe_errors)
    for key, reason in node.unknown_reasons.items():
        rack.unknown_reasons[_shifted_key(key, shift, tray.host)] = reason
    for key, where in node.provenance.items():
        rack.provenance[f"{key}.{tray.host}"] = where


def _shifted_key(key: str, shift: int, host: str) -> str:
    """``gpu3.nvlinks`` -> ``gpu7.nvlinks`` for shift 4; keys of the whole tray get the host appended."""
    pair = _PAIR_KEY.match(key)
    if pair:
        a, b = int(pair.group(1)) + shift, int(pair.group(2)) + shift
        return f"p2p{a}-{b}{key[pair.end() :]}"
    gpu = _GPU_KEY.match(key)
    if gpu:
        return f"gpu{int(gpu.group(1)) + shift}{key[gpu.end() :]}"
    return f"{key}.{host}"


def _shared_facts(rack: Node, trays: Sequence[Tray]) -> None:
    """A host-wide fact the trays agree on is the rack's; where they differ it is unknown, naming them."""
    for name in SHARED_FIELDS:
        values = {tray.host: getattr(tray.node, name) for tray in trays}
        distinct = {repr(v) for v in values.values()}
        if len(distinct) == 1:
            setattr(rack, name, next(iter(values.values())))
        elif values:
            shown = ", ".join(f"{host}: {value}" for host, value in values.items())
            rack.unknown_reasons[name] = f"the trays differ ({shown})"
