"""A send/recv pair's timer starts only once both ranks are there: a late peer does not count as slow transfer."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_nvlink.measure import sendrecv
from pytest_nvlink.measure.collectives import CollectiveSpec
from pytest_nvlink.measure.launched import Group
from pytest_nvlink.measure.ranks import RankInfo
from pytest_nvlink.measure.worker import WorkerSpec, init_rank

pytest.importorskip("torch.distributed")

LATE_S = 1.5
PLAN = sendrecv.SendRecvPlan(64 << 10, iterations=3, warmup=1, rounds=(((0, 1),),))


def _late_after_the_check(dist: Any) -> None:
    """Rank 1 dawdles once the pair's data-check exchange is done, as a slow host would."""
    real, calls = dist.batch_isend_irecv, [0]

    def late(ops: Any) -> Any:
        works = real(ops)  # in flight: the peer's side completes while this rank sleeps
        calls[0] += 1
        if calls[0] == PLAN.warmup + 1:
            time.sleep(LATE_S)
        return works

    dist.batch_isend_irecv = late


def _rank(conn: Any, rank: int, rendezvous: str) -> None:
    spec = WorkerSpec("gloo", 2, rendezvous, ops=(), iterations=PLAN.iterations, warmup=PLAN.warmup, pg_timeout_s=30)
    state = init_rank(rank, spec)
    if rank == 1:
        _late_after_the_check(state.dist)
    info = RankInfo(rank, 2, rank, "127.0.0.1", 0, "torchrun", f"host{rank}")
    group = Group(info, CollectiveSpec("gloo", 2, ()), (), {}, state=state)
    conn.send(sendrecv._exchange(group, 1 - rank, PLAN))
    state.dist.destroy_process_group()


def test_a_late_peer_is_waited_for_before_the_timer_starts(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    rendezvous = (tmp_path / "rendezvous").as_uri()
    pipes = [ctx.Pipe(duplex=False) for _ in range(2)]
    ranks = [ctx.Process(target=_rank, args=(pipes[r][1], r, rendezvous), daemon=True) for r in range(2)]
    for process in ranks:
        process.start()
    try:
        results = [pipes[r][0].recv() if pipes[r][0].poll(60) else None for r in range(2)]
    finally:
        for process in ranks:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()
    done = [result for result in results if result is not None]
    assert len(done) == 2, results
    assert [result["correct"] for result in done] == [True, True]
    # 64 KiB over gloo takes milliseconds; a timer started before the peer arrived reads ~LATE_S / 3 per exchange
    assert max(result["seconds"] for result in done) < LATE_S / PLAN.iterations / 3, done
