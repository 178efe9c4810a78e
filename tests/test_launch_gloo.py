"""The launch path for real: local processes with srun's or torchrun's variables, on gloo."""

from __future__ import annotations

import json
import time
from pathlib import Path

from launch_procs import Finished, free_port, launch, slurm_envs, slurm_port, torchrun_envs, write_suite

from pytest_nvlink.measure.ranks import derived_port
from pytest_nvlink.measure.step_watch import HUNG_EXIT
from pytest_nvlink.model import Measurements
from pytest_nvlink.model.records import from_json

WATCH_ENDED = f"(its step watchdog ended it, exit code {HUNG_EXIT})"


def _collectives(
    tmp_path: Path, envs: list[dict[str, str]], *extra: str, waits_for: int | None = None
) -> tuple[Path, list[Finished]]:
    suite, thresholds = write_suite(tmp_path, gpus=len(envs))
    out = tmp_path / "out" / "collectives.json"
    args = [
        "collectives",
        "--suite",
        str(suite),
        "--thresholds",
        str(thresholds),
        "--backend",
        "gloo",
        "--out",
        str(out),
        *extra,
    ]
    return out, launch(args, envs, tmp_path, waits_for=waits_for)


def test_torchrun_ranks_run_the_collectives_and_rank0_alone_writes(tmp_path: Path) -> None:
    hosts = ["tray-a", "tray-a", "tray-b"]
    out, finished = _collectives(tmp_path, torchrun_envs(3, free_port(), hosts))
    assert [f.returncode for f in finished] == [0, 0, 0], [f.stderr[-2000:] for f in finished]
    assert sorted(p.name for p in out.parent.iterdir()) == ["collectives.json"]
    document = json.loads(out.read_text())
    assert document["launcher"] == "torchrun"
    assert document["world_size"] == 3
    gloo = {"cuda_index": None, "gpu_uuid": None}  # gloo ranks open no GPU
    assert document["ranks"] == [
        {"rank": 0, "host": "tray-a", "local_rank": 0, **gloo},
        {"rank": 1, "host": "tray-a", "local_rank": 1, **gloo},
        {"rank": 2, "host": "tray-b", "local_rank": 0, **gloo},
    ]
    assert document["hosts"] == ["tray-a", "tray-b"]
    assert document["error"] is None
    measurements = from_json(Measurements, document["measurements"], "out")
    assert [(m.op, m.world_size, m.correct, m.error) for m in measurements.collectives] == [
        ("all_reduce", 3, True, None),
        ("all_gather", 3, True, None),
    ]
    assert all(m.busbw_gbps is not None and m.busbw_gbps > 0 for m in measurements.collectives)
    assert measurements.collectives[0].conditions == {
        "iterations": "2",
        "warmup": "1",
        "backend": "gloo",
        "launcher": "torchrun",
    }


def test_slurm_tasks_meet_at_the_first_host_on_the_job_port(tmp_path: Path) -> None:
    port, job_id = slurm_port()
    assert derived_port(job_id) == port  # the ranks can only meet there if the derivation holds
    envs = slurm_envs(2, job_id, ["node1", "node2"], nodelist="localhost,node[2-9]")
    out, finished = _collectives(tmp_path, envs)
    assert [f.returncode for f in finished] == [0, 0], [f.stderr[-2000:] for f in finished]
    document = json.loads(out.read_text())
    assert document["launcher"] == "slurm"
    assert document["hosts"] == ["node1", "node2"]
    assert all(entry["correct"] for entry in document["measurements"]["collectives"])


def test_a_crashed_rank_fails_closed_with_an_error_entry(tmp_path: Path) -> None:
    envs = torchrun_envs(2, free_port(), ["a", "b"])
    for env in envs:
        env["PYTEST_NVLINK_TEST_FAULT"] = "crash:rank=1:op=all_gather"
    out, finished = _collectives(tmp_path, envs, "--timeout-s", "20")
    assert finished[0].returncode == 1
    assert finished[1].returncode == -9  # SIGKILLed itself
    document = json.loads(out.read_text())
    reduce, gather = document["measurements"]["collectives"]
    assert reduce["error"] is None and reduce["correct"] is True
    assert gather["busbw_gbps"] is None
    # the dead rank (the cause) first, with the step it was in; then what rank 0 saw
    assert gather["error"].startswith(
        "rank 1 (b) stopped answering (died or froze; its last step: all_gather at 1 MiB (before its first call)); "
        "rank 0 (a) failed in all_gather at 1 MiB after "
    )
    assert "a rank that crashed, hung or left the job shows up this way" in gather["error"]
    assert document["error"] == gather["error"]
    assert "pytest-nvlink launch: rank 1 (b) stopped answering" in finished[0].stderr


def test_a_rank_killed_mid_collective_is_named_with_its_step(tmp_path: Path) -> None:
    envs = torchrun_envs(2, free_port(), ["a", "b"])
    for env in envs:
        env["PYTEST_NVLINK_TEST_FAULT"] = "crash:rank=1:op=all_gather:step=timed"
    started = time.monotonic()
    out, finished = _collectives(tmp_path, envs, "--timeout-s", "20")
    assert time.monotonic() - started < 60
    assert (finished[0].returncode, finished[1].returncode) == (1, -9)
    reduce, gather = json.loads(out.read_text())["measurements"]["collectives"]
    assert reduce["error"] is None
    assert gather["error"].startswith(
        "rank 1 (b) stopped answering (died or froze; its last step: all_gather at 1 MiB (timed iterations)); "
        "rank 0 (a) failed in all_gather at 1 MiB after "
    )


def test_a_hung_rank_is_ended_by_its_watch_and_rank0_records_it(tmp_path: Path) -> None:
    envs = torchrun_envs(2, free_port(), ["a", "b"])
    for env in envs:
        env["PYTEST_NVLINK_TEST_FAULT"] = "hang:rank=1:op=all_reduce"
    out, finished = _collectives(tmp_path, envs, "--timeout-s", "3")
    assert (finished[0].returncode, finished[1].returncode) == (HUNG_EXIT, HUNG_EXIT)
    first, second = json.loads(out.read_text())["measurements"]["collectives"]
    assert first["error"] == (
        f"rank 1 (b) hung in all_reduce at 1 MiB (before its first call) for over 3 s {WATCH_ENDED}; "
        f"rank 0 (a) hung in all_reduce at 1 MiB (warmup) for over 3 s {WATCH_ENDED}"
    )
    assert second["error"] == f"not run: all_reduce failed first: {first['error']}"


def test_a_rank_asleep_mid_collective_leaves_rank0_writing_the_results(tmp_path: Path) -> None:
    envs = torchrun_envs(2, free_port(), ["a", "b"])
    for env in envs:
        env["PYTEST_NVLINK_TEST_FAULT"] = "hang:rank=1:op=all_gather:step=check"
    started = time.monotonic()
    out, finished = _collectives(tmp_path, envs, "--timeout-s", "3")
    assert time.monotonic() - started < 60
    assert (finished[0].returncode, finished[1].returncode) == (HUNG_EXIT, HUNG_EXIT)
    document = json.loads(out.read_text())
    reduce, gather = document["measurements"]["collectives"]
    assert reduce["error"] is None and reduce["correct"] is True
    # rank 1 sleeps in all_gather's data check; rank 0 waits for it at the barrier after: rank 1 is behind
    assert gather["error"] == (
        f"rank 1 (b) hung in all_gather at 1 MiB (data check) for over 3 s {WATCH_ENDED}; "
        f"rank 0 (a) hung in all_gather at 1 MiB (barrier before timing) for over 3 s {WATCH_ENDED}"
    )
    assert document["error"] == gather["error"]
    assert "pytest-nvlink launch: rank 1 (b) hung in all_gather" in finished[0].stderr
