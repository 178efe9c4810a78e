"""The collective harness for real on gloo (CPU): spawned ranks, no mocks of torch.distributed."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
import time
from pathlib import Path

import pytest

from pytest_nvlink.config.shipped import COLLECTIVE_OPS
from pytest_nvlink.config.suites import Measure
from pytest_nvlink.measure import busbw, collectives, worker
from pytest_nvlink.measure.collectives import CollectiveRun, CollectiveSpec, run_collectives
from pytest_nvlink.measure.runner import MeasurementSession
from pytest_nvlink.measure.step_watch import HUNG_EXIT

pytest.importorskip("torch.distributed")

TINY = 64 << 10
FAULT = worker.FAULT_ENV
WATCH_ENDED = f"(its step watchdog ended it, exit code {HUNG_EXIT})"


def spec(
    n: int, ops: tuple[str, ...] = COLLECTIVE_OPS, fault: str = "", op_timeout_s: float | None = None
) -> CollectiveSpec:
    return CollectiveSpec(
        backend="gloo",
        world_size=n,
        sizes=tuple((op, TINY) for op in ops),
        iterations=3,
        warmup=1,
        timeout_s=90.0,
        op_timeout_s=op_timeout_s,
        env=((FAULT, fault),) if fault else (),
    )


def assert_reaped(run: CollectiveRun) -> None:
    assert not multiprocessing.active_children()
    for pid in run.pids:
        # a reaped child has no /proc entry (a zombie would still have one)
        assert not Path(f"/proc/{pid}").exists(), f"rank process {pid} is still around"


@pytest.fixture(scope="module")
def four_ranks() -> tuple[CollectiveRun, list[str], float]:
    lines: list[str] = []
    started = time.monotonic()
    run = run_collectives(spec(4), lines.append)
    return run, lines, time.monotonic() - started


@pytest.fixture(scope="module")
def two_rank_session() -> MeasurementSession:
    measure = Measure(collective_iterations=3, collective_warmup=1, timeout_s=90, collectives=COLLECTIVE_OPS)
    return MeasurementSession(
        measure,
        backend="gloo",
        world_size=2,
        collective_sizes=dict.fromkeys(COLLECTIVE_OPS, TINY),
        env={FAULT: "corrupt:rank=1:op=all_to_all"},
    )


def test_four_ranks_every_op_is_correct(four_ranks: tuple[CollectiveRun, list[str], float]) -> None:
    run, _, _ = four_ranks
    assert [m.op for m in run.measurements] == list(COLLECTIVE_OPS)
    for m in run.measurements:
        assert m.error is None, m
        assert m.correct is True, m
        assert m.world_size == 4
        assert m.size_bytes == TINY
        assert m.backend == "gloo"
        assert m.time_us is not None and m.time_us > 0
        assert m.algbw_gbps == pytest.approx(TINY / (m.time_us * 1e-6) / 1e9)
        assert m.busbw_gbps == pytest.approx(busbw.bus_factor(m.op, 4) * (m.algbw_gbps or 0))
    assert run.nccl is None
    assert_reaped(run)


def test_four_ranks_progress(four_ranks: tuple[CollectiveRun, list[str], float]) -> None:
    _, lines, _ = four_ranks
    assert lines[0] == "collectives: starting 4 gloo ranks"
    assert lines[1].startswith("collective all_reduce 64 KiB x4 (gloo): busbw ")
    assert len(lines) == 1 + len(COLLECTIVE_OPS)


def test_two_ranks_through_the_session_and_a_corrupted_result(two_rank_session: MeasurementSession) -> None:
    session = two_rank_session
    assert session.backend == "gloo"
    for op in COLLECTIVE_OPS:
        m = session.collective(op)
        assert m.error is None, m
        assert m.world_size == 2
        assert m.correct is (op != "all_to_all"), m
        assert m.busbw_gbps == pytest.approx(busbw.bus_factor(op, 2) * (m.algbw_gbps or 0))
    assert session.collective_run() is session.collective_run()  # ran once, cached
    assert_reaped(session.collective_run())


def test_session_reports_ops_outside_the_suite(two_rank_session: MeasurementSession) -> None:
    m = two_rank_session.collective("gather")
    assert m.error == "not measured: gather is not in the suite's measure.collectives"


def test_hung_rank_is_killed_and_named() -> None:
    started = time.monotonic()
    ops = ("all_reduce", "all_gather", "broadcast")
    run = run_collectives(spec(2, ops, "hang:rank=1:op=all_gather", op_timeout_s=3.0))
    elapsed = time.monotonic() - started
    assert elapsed < 40
    reduce, gather, bcast = run.measurements
    assert reduce.error is None and reduce.correct is True
    # each rank's own watch ends it at the op's limit and says where it was; the one behind comes first
    assert gather.error == (
        f"rank 1 (cpu) hung in all_gather at 64 KiB (before its first call) for over 3 s {WATCH_ENDED}; "
        f"rank 0 (cpu) hung in all_gather at 64 KiB (warmup) for over 3 s {WATCH_ENDED}"
    )
    assert gather.time_us is None and gather.busbw_gbps is None
    assert bcast.error is not None and bcast.error.startswith("not run: all_gather failed first: rank 1 (cpu) hung")
    assert_reaped(run)


def test_a_rank_asleep_mid_collective_is_named_with_its_step() -> None:
    started = time.monotonic()
    ops = ("all_reduce", "all_gather", "broadcast", "all_to_all")
    run = run_collectives(spec(2, ops, "hang:rank=1:op=all_gather:step=check", op_timeout_s=3.0))
    assert time.monotonic() - started < 40
    reduce, gather, bcast, alltoall = run.measurements
    assert reduce.error is None and reduce.correct is True
    # rank 1 sleeps inside all_gather's data check, after its call; rank 0 waits for it at the next barrier
    assert gather.error == (
        f"rank 1 (cpu) hung in all_gather at 64 KiB (data check) for over 3 s {WATCH_ENDED}; "
        f"rank 0 (cpu) hung in all_gather at 64 KiB (barrier before timing) for over 3 s {WATCH_ENDED}"
    )
    for later in (bcast, alltoall):
        assert later.error == f"not run: all_gather failed first: {gather.error}"
    assert_reaped(run)


def test_a_rank_killed_mid_collective_is_named_with_its_step() -> None:
    ops = ("all_reduce", "all_gather", "broadcast")
    run = run_collectives(spec(2, ops, "crash:rank=1:op=all_gather:step=timed", op_timeout_s=20.0))
    reduce, gather, bcast = run.measurements
    assert reduce.error is None and reduce.correct is True
    assert gather.error is not None
    assert gather.error.startswith(
        "rank 1 (cpu) died with exit code -9 (signal 9) during all_gather at 64 KiB (timed iterations)"
    )
    assert bcast.error == f"not run: all_gather failed first: {gather.error}"
    assert_reaped(run)


def test_a_hang_in_process_group_init_is_bounded_by_the_init_limit() -> None:
    started = time.monotonic()
    hung = dataclasses.replace(spec(2, ("all_reduce", "broadcast"), "hang:rank=1:op=init"), init_timeout_s=4.0)
    run = run_collectives(hung)
    assert time.monotonic() - started < 40
    first, second = run.measurements
    # rank 0 waits in init_process_group (torch's store timeout is a minute longer); both watches end it
    assert first.error == (
        f"rank 0 (cpu) hung in process-group init for over 4 s {WATCH_ENDED}; "
        f"rank 1 (cpu) hung in process-group init for over 4 s {WATCH_ENDED}"
    )
    assert second.error == f"not run: all_reduce failed first: {first.error}"
    assert_reaped(run)


def test_without_an_op_limit_the_steps_end_by_the_session_limit() -> None:
    started = time.monotonic()
    asleep = spec(2, ("all_reduce", "broadcast"), "hang:rank=1:op=all_reduce:step=warmup")
    run = run_collectives(dataclasses.replace(asleep, timeout_s=20.0))
    assert time.monotonic() - started < 20 + collectives.WATCH_MARGIN_S + 10
    first, second = run.measurements
    assert first.error is not None
    # the ranks' watches, not the parent's session limit, end the hung op, and name its steps
    assert re.fullmatch(
        r"rank 1 \(cpu\) hung in all_reduce at 64 KiB \(warmup\) for over [0-9.]+ s \(.*\); "
        r"rank 0 \(cpu\) hung in all_reduce at 64 KiB \(data check\) for over [0-9.]+ s \(.*\)",
        first.error,
    ), first.error
    assert second.error == f"not run: all_reduce failed first: {first.error}"
    assert_reaped(run)


def test_crashed_rank_is_named_with_its_exit_code() -> None:
    run = run_collectives(spec(2, ("all_reduce", "broadcast", "all_to_all"), "crash:rank=0:op=broadcast"))
    reduce, bcast, alltoall = run.measurements
    assert reduce.correct is True
    assert bcast.error is not None
    assert bcast.error.startswith("rank 0 (cpu) died with exit code -9")
    assert "during broadcast" in bcast.error
    assert alltoall.error is not None and alltoall.error.startswith("not run: broadcast failed first: rank 0")
    assert_reaped(run)


def test_rank_that_raises_during_init() -> None:
    run = run_collectives(spec(2, ("all_reduce", "broadcast"), "raise:rank=1:op=init"))
    first, second = run.measurements
    assert first.error is not None
    assert first.error.startswith("rank 1 (cpu) raised RuntimeError: injected fault raise during process-group init")
    assert second.error is not None and second.error.startswith("not run: all_reduce failed first")
    assert_reaped(run)


def test_world_of_one() -> None:
    run = run_collectives(spec(1, ("all_reduce", "sendrecv", "broadcast")))
    reduce, sendrecv, bcast = run.measurements
    assert reduce.correct is True and reduce.busbw_gbps == 0.0  # 2(n-1)/n = 0 on one rank
    assert sendrecv.error == "not run: sendrecv needs at least 2 ranks"
    assert bcast.correct is True and bcast.busbw_gbps == bcast.algbw_gbps
    assert_reaped(run)


# --- pieces that need no processes ------------------------------------------------------------


def test_parse_faults() -> None:
    faults = worker.parse_faults("hang:rank=1:op=all_gather, crash:op=init,corrupt,hang:op=broadcast:step=timed")
    assert faults == [
        worker.Fault("hang", 1, "all_gather"),
        worker.Fault("crash", None, "init"),
        worker.Fault("corrupt", None, None),
        worker.Fault("hang", None, "broadcast", "timed"),
    ]
    assert worker.fault_for(faults, 1, "all_gather", "all_reduce") == faults[0]
    assert worker.fault_for(faults, 0, "all_gather", "all_reduce") is None
    assert worker.fault_for(faults, 0, "all_reduce", "all_reduce") == faults[2]
    assert worker.parse_faults("") == []
    with pytest.raises(ValueError, match="unknown fault"):
        worker.parse_faults("explode:rank=1")
    with pytest.raises(ValueError, match="expected KIND"):
        worker.parse_faults("hang:rnak=1")
    with pytest.raises(ValueError, match="step must be one of start, warmup, check, barrier, timed, after"):
        worker.parse_faults("crash:step=later")


def test_nccl_child_env_and_recorded_env(tmp_path: Path) -> None:
    user = {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/x", "PATH": "/bin"}
    assert collectives.recorded_nccl_env(user) == {"NCCL_P2P_DISABLE": "1"}
    nccl = CollectiveSpec("nccl", 2, (("all_reduce", TINY),))
    env = collectives.child_env(nccl, tmp_path, user)
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl.%h.%p")
    assert env["NCCL_DEBUG_SUBSYS"] == collectives.NCCL_DEBUG_SUBSYS
    kept = collectives.child_env(nccl, tmp_path, {"NCCL_DEBUG_SUBSYS": "ALL"})
    assert kept["NCCL_DEBUG_SUBSYS"] == "ALL"
    gloo = collectives.child_env(CollectiveSpec("gloo", 2, ()), tmp_path, user)
    assert "NCCL_DEBUG" not in gloo


@pytest.mark.parametrize(
    ("given", "ranks_get"),
    [
        ("COLL", "COLL,INIT,ENV,GRAPH"),
        ("coll,init", "coll,init,ENV,GRAPH"),
        ("^INIT,NET", "^NET"),
        ("^INIT", "ALL"),
        ("ALL", "ALL"),
        ("", collectives.NCCL_DEBUG_SUBSYS),
    ],
)
def test_a_users_debug_subsys_never_hides_the_lines_the_audit_reads(given: str, ranks_get: str, tmp_path: Path) -> None:
    nccl = CollectiveSpec("nccl", 2, (("all_reduce", TINY),))
    assert collectives.child_env(nccl, tmp_path, {"NCCL_DEBUG_SUBSYS": given})["NCCL_DEBUG_SUBSYS"] == ranks_get


RANK_LOGS = {
    "nccl.node.101": (
        "node:101:201 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
        "node:101:201 [0] NCCL INFO NVLS multicast support is not available on dev 0\n"
    ),
    "nccl.node.102": (
        "node:102:202 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
        "node:102:202 [1] misc/socket.cc:50 NCCL WARN socket closed by peer\n"
    ),
}


def test_rank_logs_are_read_and_audited(tmp_path: Path) -> None:
    for name, text in RANK_LOGS.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "rendezvous").write_text("not a log")
    logs = collectives.read_logs(tmp_path)
    assert logs == RANK_LOGS
    audit = collectives.nccl_audit(logs, {"NCCL_P2P_LEVEL": "NVL"})
    assert audit.env["NCCL_P2P_LEVEL"] == "NVL"
    assert audit.last_warn is not None and "socket closed by peer" in audit.last_warn
    assert audit.source is not None and audit.source.startswith("NCCL_DEBUG_FILE (2 rank logs)")
    assert "not parsed" not in audit.source
    assert len(audit.channels) == 2
    assert audit.nvls_available is False


def test_audit_without_logs() -> None:
    audit = collectives.nccl_audit({"nccl.a.1": ""}, {})
    assert audit.source == "NCCL_DEBUG_FILE (0 rank logs); not parsed: no NCCL log lines were captured"
    assert audit.channels == []


def test_session_without_cuda_reports_instead_of_measuring() -> None:
    session = MeasurementSession(Measure(), cuda_probe=lambda: "CUDA is not available to torch")
    assert session.backend is None
    m = session.collective("all_reduce")
    assert m.error is not None and m.error.startswith("not measured: CUDA is not available to torch; NCCL")
    p = session.p2p(0, 1, "unidirectional")
    assert p.error == "not measured: CUDA is not available to torch"
    measurements = session.measurements()
    assert [c.op for c in measurements.collectives] == list(Measure().collectives)
    assert measurements.p2p == []


def test_no_fault_variable_leaks_into_the_parent() -> None:
    assert FAULT not in os.environ
