"""The launch path for real: local processes with srun's or torchrun's variables, on gloo."""

from __future__ import annotations

import json
from pathlib import Path

from launch_procs import Finished, free_port, launch, slurm_envs, slurm_port, torchrun_envs, write_suite

from pytest_nvlink.measure.ranks import derived_port
from pytest_nvlink.model import Measurements
from pytest_nvlink.model.records import from_json


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
    # the dead rank (the cause) first, with the step it last finished; then what rank 0 saw
    assert gather["error"].startswith(
        "rank 1 (b) stopped answering (died or froze; its last step: after all_reduce at 1 MiB); "
        "rank 0 (a) failed in all_gather at 1 MiB after "
    )
    assert "a rank that crashed, hung or left the job shows up this way" in gather["error"]
    assert document["error"] == gather["error"]
    assert "pytest-nvlink launch: rank 1 (b) stopped answering" in finished[0].stderr


def test_a_hung_rank_makes_rank0_time_out_and_record_it(tmp_path: Path) -> None:
    envs = torchrun_envs(2, free_port(), ["a", "b"])
    for env in envs:
        env["PYTEST_NVLINK_TEST_FAULT"] = "hang:rank=1:op=all_reduce"
    out, finished = _collectives(tmp_path, envs, "--timeout-s", "3", waits_for=0)
    assert finished[0].returncode == 1
    assert finished[1].returncode is None  # still hanging: the test killed it
    first, second = json.loads(out.read_text())["measurements"]["collectives"]
    assert first["error"].startswith(
        "rank 1 (b) is alive but did not reach all_reduce at 1 MiB (its last step: joined); "
        "rank 0 (a) failed in all_reduce at 1 MiB after "
    )
    assert second["error"].startswith("not run: all_reduce failed first: rank 1 (b) is alive")
