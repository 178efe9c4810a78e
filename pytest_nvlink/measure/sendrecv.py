"""Pair bandwidth between ranks by send/recv, in rounds of disjoint pairs (as nccl-tests' sendrecv).

Copy engines cannot address another tray's memory, so across a rack a pair is measured between
two ranks: both send ``size`` bytes to each other at once, and the figure is bytes per second in
each direction. :func:`pair_schedule` picks the pairs (every pair within a tray, and each rank
against a few peers in other trays) and packs them into rounds in which no rank appears twice,
so that a round measures many pairs at once without two of them sharing a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_nvlink.measure.busbw import GB, MIB
from pytest_nvlink.measure.launched import Group, gather_json
from pytest_nvlink.measure.pattern import PatternData
from pytest_nvlink.model import P2PMeasurement

DEFAULT_CROSS_PEERS = 3
Pair = tuple[int, int]


def cross_tray_pairs(trays: Sequence[Sequence[int]], peers: int) -> set[Pair]:
    """Each rank against ``peers`` ranks of other trays, each in a different tray where there are enough.

    Deterministic: the i-th rank of tray t meets, for j < peers, the rank at position i + j of the
    tray ``t + d_j`` with offsets d_j spread evenly over the other trays.
    """
    count = len(trays)
    pairs: set[Pair] = set()
    if count < 2:
        return pairs
    wanted = min(peers, count - 1)
    offsets = [1 + (j * (count - 1)) // wanted for j in range(wanted)] if wanted else []
    for t, tray in enumerate(trays):
        for i, rank in enumerate(tray):
            for j, offset in enumerate(offsets):
                other = trays[(t + offset) % count]
                if other:
                    peer = other[(i + j) % len(other)]
                    pairs.add((min(rank, peer), max(rank, peer)))
    return pairs


def within_tray_pairs(trays: Sequence[Sequence[int]]) -> set[Pair]:
    return {(min(a, b), max(a, b)) for tray in trays for i, a in enumerate(tray) for b in tray[i + 1 :]}


def pack_rounds(pairs: set[Pair]) -> list[list[Pair]]:
    """Greedy packing into rounds of disjoint pairs (no rank twice in a round), in a fixed order."""
    remaining = sorted(pairs)
    rounds: list[list[Pair]] = []
    while remaining:
        busy: set[int] = set()
        this_round, left = [], []
        for pair in remaining:
            if pair[0] in busy or pair[1] in busy:
                left.append(pair)
                continue
            busy.update(pair)
            this_round.append(pair)
        rounds.append(this_round)
        remaining = left
    return rounds


def pair_schedule(trays: Sequence[Sequence[int]], cross_peers: int = DEFAULT_CROSS_PEERS) -> list[list[Pair]]:
    """Rounds of disjoint rank pairs covering every pair within a tray and ``cross_peers`` peers per rank."""
    return pack_rounds(within_tray_pairs(trays) | cross_tray_pairs(trays, cross_peers))


@dataclass(frozen=True)
class SendRecvPlan:
    size_bytes: int
    iterations: int
    warmup: int
    rounds: tuple[tuple[Pair, ...], ...]

    def conditions(self, backend: str) -> dict[str, str]:
        return {
            "size_mib": f"{self.size_bytes / MIB:g}",
            "iterations": str(self.iterations),
            "warmup": str(self.warmup),
            "backend": backend,
            "method": "send/recv both ways at once, rounds of disjoint pairs",
        }


def _exchange(group: Group, peer: int, plan: SendRecvPlan) -> dict[str, Any]:
    """Both ranks of a pair send and receive at once; this rank's time per exchange and its check."""
    state, dist, torch = group.state, group.dist, group.state.torch
    numel = plan.size_bytes // 4
    data = PatternData(torch, state.device, state.rank, group.info.world_size)
    send = torch.empty(numel, dtype=torch.float32, device=state.device)
    data.fill_cyclic(send, state.rank + 1)
    recv = torch.empty(numel, dtype=torch.float32, device=state.device)
    token = torch.zeros(1, dtype=torch.float32, device=state.device)
    echo = torch.empty_like(token)

    def swap(out: Any, back: Any) -> None:
        ops = [dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, back, peer)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    for _ in range(plan.warmup):
        swap(send, recv)
    recv.fill_(-1.0)
    swap(send, recv)
    state.sync()
    correct = data.is_cyclic(recv, peer + 1)
    # The pair meets before the timer starts: a peer still busy (its check, a slow host) would
    # otherwise count in this rank's time. Other pairs of the round run at once, so no global barrier.
    swap(token, echo)
    state.sync()
    start = time.perf_counter()
    for _ in range(plan.iterations):
        swap(send, recv)
    state.sync()
    return {"peer": peer, "seconds": (time.perf_counter() - start) / plan.iterations, "correct": correct}


def run_sendrecv(group: Group, plan: SendRecvPlan) -> list[dict[str, Any]] | None:
    """Every round on every rank; rank 0 gets all ranks' results (None elsewhere). Raises on a broken group."""
    mine: list[dict[str, Any]] = []
    for pairs in plan.rounds:
        for a, b in pairs:
            if group.info.rank in (a, b):
                mine.append(_exchange(group, b if group.info.rank == a else a, plan))
        group.dist.barrier()  # rounds stay apart: a pair never shares the fabric with the next round's
    gathered = gather_json(group, mine)
    if gathered is None:
        return None
    return [{**result, "rank": rank} for rank, results in enumerate(gathered) for result in results]


def measurements(
    results: Sequence[Mapping[str, Any]] | None,
    plan: SendRecvPlan,
    gpu_of: Mapping[int, int],
    backend: str,
    failure: str | None,
) -> list[P2PMeasurement]:
    """One ``sendrecv`` entry per scheduled pair, in GPU numbers; the slower side's time counts."""
    seen: dict[Pair, list[Mapping[str, Any]]] = {}
    for result in results or []:
        rank, peer = int(result["rank"]), int(result["peer"])
        seen.setdefault((min(rank, peer), max(rank, peer)), []).append(result)
    entries = []
    for pairs in plan.rounds:
        for a, b in pairs:
            entries.append(_entry(seen.get((a, b), []), plan, (gpu_of[a], gpu_of[b]), backend, failure))
    return entries


def _entry(
    sides: list[Mapping[str, Any]], plan: SendRecvPlan, gpus: tuple[int, int], backend: str, failure: str | None
) -> P2PMeasurement:
    src, dst = gpus
    source = f"torch.distributed/{backend} send/recv"
    conditions = plan.conditions(backend)
    if len(sides) != 2:
        error = failure or "no result from both ranks of the pair"
        return P2PMeasurement(src, dst, "sendrecv", None, "GB/s", error=error, source=source, conditions=conditions)
    seconds = max(float(side["seconds"]) for side in sides)
    wrong = not all(bool(side["correct"]) for side in sides)
    value = plan.size_bytes / seconds / GB if seconds > 0 else None
    return P2PMeasurement(
        src,
        dst,
        "sendrecv",
        None if wrong else value,
        "GB/s",
        bytes_copied=plan.size_bytes * plan.iterations,
        error="the data received differs from what the peer sent" if wrong else None,
        source=source,
        conditions=conditions,
    )
