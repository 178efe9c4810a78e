"""A pretend rack on one machine: 3 trays x 2 ranks on gloo, each tray replaying its own tray snapshot."""

from __future__ import annotations

import json
import time
from pathlib import Path

from launch_procs import free_port, launch, torchrun_envs, write_suite, write_trays

from pytest_nvlink.measure.sendrecv import pair_schedule
from pytest_nvlink.measure.step_watch import HUNG_EXIT
from pytest_nvlink.sources.snapshot.file import load_snapshot

HOSTS = ["tray-a", "tray-a", "tray-b", "tray-b", "tray-c", "tray-c"]


def test_rack_merges_three_trays_measures_and_judges_on_rank0(tmp_path: Path) -> None:
    suite, thresholds = write_suite(tmp_path, gpus=6)
    pattern = write_trays(tmp_path / "trays", sorted(set(HOSTS)))
    out = tmp_path / "rack"
    args = ["rack", "--suite", str(suite), "--thresholds", str(thresholds), "--backend", "gloo"]
    args += ["--out-dir", str(out), "--tray-snapshot", str(pattern), "--cross-peers", "1", "--rack-name", "rack-7"]
    finished = launch([*args, "--", "-p", "no:randomly"], torchrun_envs(6, free_port(), HOSTS), tmp_path)
    assert [f.returncode for f in finished[1:]] == [0] * 5, [f.stderr[-1500:] for f in finished]
    assert sorted(p.name for p in out.iterdir()) == ["junit.xml", "rack-snapshot.json", "report.html", "results.json"]

    node = load_snapshot(out / "rack-snapshot.json")
    assert node.host == "rack-7"
    assert node.probe_errors == []
    assert [(g.index, g.host, g.local_index) for g in node.gpus] == [
        (0, "tray-a", 0),
        (1, "tray-a", 1),
        (2, "tray-b", 0),
        (3, "tray-b", 1),
        (4, "tray-c", 0),
        (5, "tray-c", 1),
    ]
    assert sorted((p.a, p.b, p.path) for p in node.paths or []) == [(0, 1, "NV18"), (2, 3, "NV18"), (4, 5, "NV18")]
    assert sorted((s.src, s.dst) for s in node.p2p or []) == [(0, 1), (1, 0), (2, 3), (3, 2), (4, 5), (5, 4)]
    collectives = node.measurements.collectives
    assert [(c.op, c.world_size, c.correct, c.error) for c in collectives] == [
        ("all_reduce", 6, True, None),
        ("all_gather", 6, True, None),
    ]
    pairs = [(m.src, m.dst) for m in node.measurements.p2p]
    expected = [pair for rounds in pair_schedule([[0, 1], [2, 3], [4, 5]], 1) for pair in rounds]
    assert pairs == expected  # ranks are GPUs here: tray t's local rank l is GPU 2t + l
    assert {(0, 1), (2, 3), (4, 5)} <= set(pairs)
    assert all(m.kind == "sendrecv" and m.error is None and m.value and m.value > 0 for m in node.measurements.p2p)

    results = json.loads((out / "results.json").read_text())
    outcome = {item["nodeid"].split("/")[-1]: item for item in results["items"]}
    assert outcome["test_collectives.py::test_collective_busbw[all_reduce]"]["outcome"] == "pass"
    assert outcome["test_topology.py::test_path[gpu2-gpu3]"]["outcome"] == "pass"
    # No NVML path class exists between trays: left to the rack suite, it fails closed here.
    assert outcome["test_topology.py::test_path[gpu1-gpu2]"]["outcome"] == "fail"
    assert finished[0].returncode == (0 if results["verdict"] == "PASS" else 1)
    assert "judging the rack" in finished[0].stdout


def test_a_lost_tray_and_a_crashed_rank_fail_the_rack_closed(tmp_path: Path) -> None:
    suite, thresholds = write_suite(tmp_path, gpus=2)
    pattern = write_trays(tmp_path / "trays", ["tray-a"], gpus=1)  # none for tray-b: its probe fails
    out = tmp_path / "rack"
    envs = torchrun_envs(2, free_port(), ["tray-a", "tray-b"])
    for env in envs:
        env["PYTEST_NVLINK_TEST_FAULT"] = "crash:rank=1:op=all_gather"
    args = ["rack", "--suite", str(suite), "--thresholds", str(thresholds), "--backend", "gloo", "--timeout-s", "20"]
    args += ["--out-dir", str(out), "--tray-snapshot", str(pattern)]
    rank0, rank1 = launch([*args, "--", "-p", "no:randomly"], envs, tmp_path)
    assert rank1.returncode == -9
    assert rank0.returncode == 1, rank0.stderr[-2000:]
    node = load_snapshot(out / "rack-snapshot.json")
    assert len(node.probe_errors) == 1
    assert node.probe_errors[0].startswith("tray tray-b (ranks 1): probe failed: RuntimeError: tray snapshot ")
    assert [(g.host, g.problem) for g in node.gpus] == [
        ("tray-a", None),
        ("tray-b", "not probed: the probe of tray tray-b failed"),
    ]
    reduce, gather = node.measurements.collectives
    assert (reduce.correct, reduce.error) == (True, None)
    assert gather.error is not None
    # the killed rank is named first, with the step it finished last; the results and JUnit carry it
    assert gather.error.startswith(
        "rank 1 (tray-b) stopped answering (died or froze; its last step: "
        "all_gather at 1 MiB (before its first call)); "
        "rank 0 (tray-a) failed in all_gather at 1 MiB"
    )
    assert "rank 1 (tray-b) stopped answering" in (out / "junit.xml").read_text()
    (pair,) = node.measurements.p2p
    assert (pair.src, pair.dst, pair.value, pair.error) == (0, 1, None, gather.error)
    results = json.loads((out / "results.json").read_text())
    assert results["verdict"] == "FAIL"


def test_a_rank_asleep_mid_collective_leaves_rank0_writing_the_snapshot_and_junit(tmp_path: Path) -> None:
    suite, thresholds = write_suite(tmp_path, gpus=2)
    pattern = write_trays(tmp_path / "trays", ["tray-a", "tray-b"], gpus=1)
    out = tmp_path / "rack"
    envs = torchrun_envs(2, free_port(), ["tray-a", "tray-b"])
    for env in envs:
        env["PYTEST_NVLINK_TEST_FAULT"] = "hang:rank=1:op=all_reduce:step=timed"
    args = ["rack", "--suite", str(suite), "--thresholds", str(thresholds), "--backend", "gloo", "--timeout-s", "4"]
    args += ["--out-dir", str(out), "--tray-snapshot", str(pattern)]
    started = time.monotonic()
    rank0, rank1 = launch([*args, "--", "-p", "no:randomly"], envs, tmp_path)
    assert time.monotonic() - started < 80
    assert (rank0.returncode, rank1.returncode) == (HUNG_EXIT, HUNG_EXIT), rank0.stderr[-2000:]
    node = load_snapshot(out / "rack-snapshot.json")
    reduce, gather = node.measurements.collectives
    # rank 1 sleeps after its first timed all_reduce; rank 0 waits in the second: both watches give up
    assert reduce.error == (
        "rank 0 (tray-a) hung in all_reduce at 1 MiB (timed iterations) for over 4 s "
        f"(its step watchdog ended it, exit code {HUNG_EXIT}); "
        "rank 1 (tray-b) hung in all_reduce at 1 MiB (timed iterations) for over 4 s "
        f"(its step watchdog ended it, exit code {HUNG_EXIT})"
    )
    assert gather.error == f"not run: all_reduce failed first: {reduce.error}"
    (pair,) = node.measurements.p2p
    assert (pair.value, pair.error) == (None, reduce.error)
    junit = (out / "junit.xml").read_text()
    assert "rank 1 (tray-b) hung in all_reduce at 1 MiB (timed iterations)" in junit
    results = json.loads((out / "results.json").read_text())
    assert results["verdict"] == "FAIL"
