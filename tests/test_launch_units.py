"""Launch pieces without processes: rank discovery, the pair schedule, the rack merge, the send/recv entries."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
from launch_procs import tray_node

from pytest_nvlink import launch
from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.measure import sendrecv
from pytest_nvlink.measure.collectives import CollectiveSpec
from pytest_nvlink.measure.launch_run import Settings, judge_command, tray_document
from pytest_nvlink.measure.launched import Group, Member, contradiction, nccl_audit
from pytest_nvlink.measure.ranks import (
    PORT_BASE,
    PORT_SPAN,
    RankEnvError,
    RankInfo,
    derived_port,
    first_host,
    rank_info,
)
from pytest_nvlink.model import trays as rack
from pytest_nvlink.model.document import node_from_document, snapshot_document

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "head", "MASTER_PORT": "29500"}
SLURM = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "72",
    "SLURM_LOCALID": "1",
    "SLURM_STEP_NODELIST": "gb200-r1-[07-24]",
    "SLURM_JOB_NODELIST": "other[1-2]",
    "SLURM_JOB_ID": "123456",
    "SLURMD_NODENAME": "gb200-r1-08",
}


def test_torchrun_environment() -> None:
    info = rank_info(TORCHRUN | {"PYTEST_NVLINK_HOST": "tray-x"})
    assert (info.rank, info.world_size, info.local_rank, info.launcher) == (3, 8, 1, "torchrun")
    assert (info.master_addr, info.master_port, info.host) == ("head", 29500, "tray-x")
    assert info.rendezvous_env() == {**TORCHRUN, "MASTER_PORT": "29500"}


def test_slurm_environment_derives_master_and_port() -> None:
    info = rank_info(SLURM)
    assert (info.rank, info.world_size, info.local_rank, info.launcher) == (5, 72, 1, "slurm")
    assert info.master_addr == "gb200-r1-07"  # the step's first host, not the job's
    assert info.master_port == PORT_BASE + 123456 % PORT_SPAN
    assert info.host == "gb200-r1-08"


def test_slurm_falls_back_to_the_job_nodelist_and_honours_overrides() -> None:
    without_step = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_NODELIST"}
    assert rank_info(without_step).master_addr == "other1"
    info = rank_info(SLURM | {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "40000"})
    assert (info.master_addr, info.master_port) == ("10.0.0.1", 40000)


def test_torchrun_wins_over_slurm_under_srun_torchrun() -> None:
    assert rank_info(SLURM | TORCHRUN).launcher == "torchrun"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "no launcher environment: run under torchrun"),
        ({k: v for k, v in TORCHRUN.items() if k != "MASTER_ADDR"}, "MASTER_ADDR is not set"),
        ({k: v for k, v in TORCHRUN.items() if k != "LOCAL_RANK"}, "LOCAL_RANK is not set"),
        ({k: v for k, v in TORCHRUN.items() if k != "MASTER_PORT"}, "MASTER_PORT is not set"),
        (TORCHRUN | {"RANK": "8"}, "RANK=8 is not below WORLD_SIZE=8"),
        (TORCHRUN | {"WORLD_SIZE": "eight"}, "WORLD_SIZE='eight' is not an integer"),
        (TORCHRUN | {"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a TCP port"),
        (SLURM | {"SLURM_PROCID": "72"}, "SLURM_PROCID=72 is not below SLURM_NTASKS=72"),
        (SLURM | {"SLURM_LOCALID": "-1"}, "SLURM_LOCALID=-1 must be at least 0"),
        ({k: v for k, v in SLURM.items() if k != "SLURM_JOB_ID"}, "MASTER_PORT is not set"),
        ({k: v for k, v in SLURM.items() if not k.endswith("NODELIST")}, "neither SLURM_STEP_NODELIST"),
        (SLURM | {"SLURM_JOB_ID": "12_3"}, "SLURM_JOB_ID='12_3' is not a job number"),
    ],
)
def test_missing_or_contradictory_variables_are_one_sentence(env: dict[str, str], message: str) -> None:
    with pytest.raises(RankEnvError, match="^" + message.replace("(", r"\(")):
        rank_info(env)


@pytest.mark.parametrize(
    ("hostlist", "first"),
    [
        ("gpu001", "gpu001"),
        ("gpu[007-009,012],login1", "gpu007"),
        ("a,b", "a"),
        ("rack1-node[3,5]-ib", "rack1-node3-ib"),
        ("n[10-11],m[1-2]", "n10"),
    ],
)
def test_first_host_of_a_hostlist(hostlist: str, first: str) -> None:
    assert first_host(hostlist) == first


@pytest.mark.parametrize("hostlist", ["", "[x-y]", ","])
def test_unreadable_hostlist(hostlist: str) -> None:
    with pytest.raises(RankEnvError, match="cannot read a first host"):
        first_host(hostlist)


def test_derived_ports_stay_unprivileged_and_below_the_ephemeral_range() -> None:
    ports = {derived_port(str(job)) for job in range(0, 200_000, 7)}
    assert min(ports) >= 1024
    assert max(ports) < 32768


def test_the_command_refuses_a_missing_launcher_env_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    code = launch.main(["collectives", "--suite", "h100-8gpu", "--backend", "gloo", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("python -m pytest_nvlink.launch: error: no launcher environment")
    assert not (tmp_path / "x").exists()


def test_the_command_refuses_an_unknown_suite_with_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert launch.main(["rack", "--suite", "nope", "--out-dir", str(tmp_path)]) == 2
    assert "nope: unknown suite" in capsys.readouterr().err


# --- the send/recv schedule -------------------------------------------------------------------


def _check_schedule(trays: list[list[int]], peers: int) -> list[list[tuple[int, int]]]:
    rounds = sendrecv.pair_schedule(trays, peers)
    flat = [pair for pairs in rounds for pair in pairs]
    for pairs in rounds:  # disjoint: no rank twice in a round
        ranks = [rank for pair in pairs for rank in pair]
        assert len(ranks) == len(set(ranks)), pairs
    assert len(flat) == len(set(flat))  # no pair twice
    assert all(a < b for a, b in flat)
    for tray in trays:  # every pair within a tray
        assert set(itertools.combinations(tray, 2)) <= set(flat)
    tray_of = {rank: t for t, tray in enumerate(trays) for rank in tray}
    for rank, own in tray_of.items():  # each rank meets min(peers, trays - 1) other trays
        met = {tray_of[b if a == rank else a] for a, b in flat if rank in (a, b)} - {own}
        assert len(met) >= min(peers, len(trays) - 1), (rank, met)
    return rounds


def test_schedule_for_a_pretend_rack() -> None:
    rounds = _check_schedule([[0, 1], [2, 3], [4, 5]], 1)
    assert rounds == sendrecv.pair_schedule([[0, 1], [2, 3], [4, 5]], 1)  # deterministic on every rank


def test_schedule_for_an_nvl72_rack_stays_short() -> None:
    trays = [[4 * t + i for i in range(4)] for t in range(18)]
    rounds = _check_schedule(trays, 3)
    cross = sendrecv.cross_tray_pairs(trays, 3)
    assert len(cross) >= 72 * 3 // 2
    assert len(rounds) <= 12  # 6 pairs per tray plus ~3-6 cross peers per GPU, all in parallel


@pytest.mark.parametrize(("trays", "peers"), [([[0, 1, 2, 3]], 3), ([[0], [1], [2, 3, 4]], 5), ([[0, 2], [1]], 0)])
def test_schedule_edge_cases(trays: list[list[int]], peers: int) -> None:
    _check_schedule(trays, peers)


def test_uneven_trays_get_peers_in_every_other_tray() -> None:
    flat = {pair for pairs in sendrecv.pair_schedule([[0], [1], [2, 3, 4]], 5) for pair in pairs}
    assert {(0, 1), (0, 2), (1, 2)} <= flat


# --- the rack merge ---------------------------------------------------------------------------


def _probe(host: str, ranks: list[int], gpus: int = 2) -> rack.TrayProbe:
    return rack.TrayProbe(host, ranks, snapshot_document(tray_node(host, gpus)))


def test_trays_are_numbered_in_order_of_their_first_rank() -> None:
    trays = rack.read_trays([_probe("zeta", [0, 1]), _probe("alpha", [4, 5]), _probe("mid", [2, 3])])
    node = rack.merge_trays(trays, "rack-1")
    assert [(g.index, g.host, g.local_index) for g in node.gpus][::2] == [
        (0, "zeta", 0),
        (2, "mid", 0),
        (4, "alpha", 0),
    ]
    assert [g.uuid for g in node.gpus[2:4]] == [g.uuid for g in tray_node("mid").gpus]
    assert node.driver_version == "550.54.15"
    assert node.unknown_reasons["gpu3.gpu_memory_numa_node"] == "NVML: Not Supported"
    assert node.unknown_reasons["nvlink_bw_mode.alpha"].startswith("NVML")
    # The merged rack is a valid snapshot on its own.
    again = node_from_document(snapshot_document(node), "rack")
    assert [(g.host, g.local_index) for g in again.gpus] == [(g.host, g.local_index) for g in node.gpus]


def test_a_failed_tray_is_a_probe_error_with_its_gpus_listed() -> None:
    lost = rack.TrayProbe("tray-b", [2, 3], error="RuntimeError: NVML Driver Not Loaded")
    node = rack.merge_trays(rack.read_trays([_probe("tray-a", [0, 1]), lost, _probe("tray-c", [4, 5])]), "r")
    assert node.probe_errors == ["tray tray-b (ranks 2,3): probe failed: RuntimeError: NVML Driver Not Loaded"]
    assert [(g.index, g.host, g.problem is not None) for g in node.gpus] == [
        (0, "tray-a", False),
        (1, "tray-a", False),
        (2, "tray-b", True),
        (3, "tray-b", True),
        (4, "tray-c", False),
        (5, "tray-c", False),
    ]
    assert sorted((p.a, p.b) for p in node.paths or []) == [(0, 1), (4, 5)]
    node_from_document(snapshot_document(node), "rack")  # still a complete, valid GPU list


def test_an_unreadable_tray_document_names_the_host() -> None:
    broken = rack.TrayProbe("tray-b", [1], {"kind": "something else"})
    node = rack.merge_trays(rack.read_trays([_probe("tray-a", [0]), broken]), "r")
    assert node.probe_errors[0].startswith("tray tray-b (ranks 1): probe failed: tray tray-b: not a pytest-nvlink")


def test_trays_that_disagree_leave_the_fact_unknown() -> None:
    odd = tray_node("tray-b")
    odd.driver_version = "535.1"
    probes = [_probe("tray-a", [0, 1]), rack.TrayProbe("tray-b", [2, 3], snapshot_document(odd))]
    node = rack.merge_trays(rack.read_trays(probes), "r")
    assert node.driver_version is None
    assert node.unknown_reasons["driver_version"] == "the trays differ (tray-a: 550.54.15, tray-b: 535.1)"


def test_ranks_map_to_gpus_through_cuda_indices() -> None:
    swapped = tray_node("tray-b")
    swapped.gpus[0].cuda_index, swapped.gpus[1].cuda_index = 1, 0
    probes = [_probe("tray-a", [0, 1]), rack.TrayProbe("tray-b", [2, 3], snapshot_document(swapped))]
    trays = rack.read_trays(probes)
    assert rack.rank_gpus(trays, {0: 0, 1: 1, 2: 0, 3: 1}) == {0: 0, 1: 1, 2: 3, 3: 2}


# --- send/recv entries ------------------------------------------------------------------------


def test_sendrecv_entries_fail_closed() -> None:
    plan = sendrecv.SendRecvPlan(1 << 20, 4, 1, (((0, 1), (2, 3)),))
    results = [
        {"rank": 0, "peer": 1, "seconds": 0.001, "correct": True},
        {"rank": 1, "peer": 0, "seconds": 0.002, "correct": True},
        {"rank": 2, "peer": 3, "seconds": 0.001, "correct": False},
        {"rank": 3, "peer": 2, "seconds": 0.001, "correct": True},
    ]
    good, wrong = sendrecv.measurements(results, plan, {r: 10 + r for r in range(4)}, "gloo", None)
    assert (good.src, good.dst, good.kind, good.unit) == (10, 11, "sendrecv", "GB/s")
    assert good.value == pytest.approx((1 << 20) / 0.002 / 1e9)  # the slower side counts
    assert (wrong.value, wrong.error) == (None, "the data received differs from what the peer sent")
    (lost, _) = sendrecv.measurements(results[1:], plan, {r: r for r in range(4)}, "gloo", "rank 0 died")
    assert (lost.value, lost.error) == (None, "rank 0 died")


def test_rank0_refuses_an_unwritable_target_before_joining(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name, value in TORCHRUN.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RANK", "0")
    (tmp_path / "taken").mkdir()
    code = launch.main(["collectives", "--suite", "h100-8gpu", "--out", str(tmp_path / "taken")])
    assert code == 2
    assert "is a folder; give a file name" in capsys.readouterr().err


def test_two_ranks_claiming_one_gpu_slot_are_a_contradiction() -> None:
    members = [Member(0, "a", 0), Member(1, "a", 1), Member(2, "a", 1)]
    text = contradiction(members)
    assert text is not None
    assert text.startswith("ranks 1 and 2 both say they are local rank 1 on host a;")
    assert contradiction(members[:2]) is None


def test_more_ranks_than_probed_gpus_keep_the_numbering_of_the_next_tray() -> None:
    probes = [_probe("tray-a", [0, 1, 2], gpus=2), _probe("tray-b", [3, 4], gpus=2)]
    trays = rack.read_trays(probes)
    node = rack.merge_trays(trays, "r")
    assert [(g.index, g.host, g.local_index) for g in node.gpus] == [
        (0, "tray-a", 0),
        (1, "tray-a", 1),
        (2, "tray-a", 2),
        (3, "tray-b", 0),
        (4, "tray-b", 1),
    ]
    assert node.gpus[2].problem == "not probed: tray tray-a runs 3 ranks but its probe lists 2 GPUs"
    assert rack.rank_gpus(trays, {0: 0, 1: 1, 2: 2, 3: 0, 4: 1}) == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4}


def test_the_judging_pytest_gets_absolute_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "mine.toml").write_text(load_suite("h100-8gpu").file.read_text())
    monkeypatch.chdir(tmp_path)
    suite = load_suite("suites/mine.toml")
    settings = Settings(suite, load_thresholds(suite.thresholds_ref), "gloo", Path("site.toml"), pytest_args=("-q",))
    command = judge_command(settings, Path("out/rack-snapshot.json"), Path("out"))
    assert command[1:6] == ["-m", "pytest", "-p", "no:cacheprovider", f"--nvlink-suite={tmp_path}/suites/mine.toml"]
    assert command[6:] == [
        f"--nvlink-replay={tmp_path}/out/rack-snapshot.json",
        f"--nvlink-json={tmp_path}/out/results.json",
        f"--junitxml={tmp_path}/out/junit.xml",
        f"--nvlink-report={tmp_path}/out/report.html",
        f"--nvlink-thresholds={tmp_path}/site.toml",
        "-q",
    ]


def _info(host: str) -> RankInfo:
    return RankInfo(0, 2, 0, "head", 12000, "torchrun", host)


def test_a_tray_probe_is_a_snapshot_document_or_its_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = Settings(load_suite("h100-8gpu"), load_thresholds("h100-sxm"), "gloo")
    from pytest_nvlink.sources.live import probe as nvml_probe

    monkeypatch.setattr(nvml_probe, "probe_node", lambda: tray_node("tray-live"))
    probed = tray_document(_info("tray-live"), settings, "gloo")
    assert node_from_document(probed["document"], "t").gpus[0].uuid == tray_node("tray-live").gpus[0].uuid
    replayed = dataclasses.replace(settings, tray_snapshot=str(tmp_path / "{host}.json"))
    missing = tray_document(_info("tray-x"), replayed, "gloo")
    assert missing == {
        "host": "tray-x",
        "error": f"RuntimeError: tray snapshot {tmp_path}/tray-x.json: snapshot file not found",
    }


def test_nccl_logs_of_a_launched_rank_become_the_audit(tmp_path: Path) -> None:
    sample = Path(__file__).parent / "data" / "evidence" / "nccl-debug" / "h20-nvlink-two-pods-p2p-cumem-nccl1781.txt"
    (tmp_path / "nccl.host.1").write_text(sample.read_text())
    spec = CollectiveSpec("nccl", 2, (("all_reduce", 1 << 20),))
    group = Group(_info("tray-a"), spec, (), {}, log_dir=tmp_path, recorded_env={"NCCL_P2P_LEVEL": "NVL"})
    group.failure = "rank 1 died"  # a broken group: rank 0 audits its own log alone
    audit = nccl_audit(group)
    assert audit is not None
    assert audit.env == {"NCCL_HOSTID": "10.10.10.10", "NCCL_P2P_LEVEL": "NVL"}  # from the log, and ours
    assert audit.channels
    assert {channel.detail for channel in audit.channels} == {"P2P/CUMEM"}
    assert not tmp_path.exists()  # the rank's log folder is cleaned up


def test_gloo_ranks_have_no_nccl_audit() -> None:
    spec = CollectiveSpec("gloo", 2, (("all_reduce", 1 << 20),))
    assert nccl_audit(Group(_info("a"), spec, (), {})) is None
