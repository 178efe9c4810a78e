"""The Slurm recipes for real: jobs on a one-host Slurm cluster (``.ci/slurm-up``) run by ``srun``.

Skipped only where no Slurm cluster answers and ``CI`` is unset; ``.ci/run`` starts one, and in CI a
missing cluster fails. Every task runs this interpreter (``sys.executable``), so the tests exercise
whichever install of pytest-nvlink runs them (the wheel, in CI).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import SNAPSHOTS
from launch_procs import SUITE, THRESHOLDS, base_env, tray_node, write_suite

from pytest_nvlink.measure.sendrecv import DEFAULT_CROSS_PEERS, pair_schedule
from pytest_nvlink.model import FabricInfo, Measurements
from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.model.records import from_json
from pytest_nvlink.sources.snapshot.file import load_snapshot

SRUN = shutil.which("srun")
SINFO = shutil.which("sinfo")
SBATCH = shutil.which("sbatch")
SCONTROL = shutil.which("scontrol")
SCANCEL = shutil.which("scancel") or "scancel"
RECIPES = Path(__file__).resolve().parents[1] / "contrib" / "slurm"
FLEET = Path(sys.executable).parent / "pytest-nvlink"  # the console script of this interpreter's install


def idle_node() -> str:
    """A node of the cluster that can take a job now (the one-host cluster's only one)."""
    assert SINFO is not None
    names = subprocess.run(
        [SINFO, "--noheader", "--states=idle,mixed", "--format=%n"],
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    ).stdout.split()
    assert names, "no idle Slurm node"
    return names[0]


def _cluster_answers() -> bool:
    if SRUN is None or SINFO is None:
        return False
    try:
        states = subprocess.run(
            [SINFO, "--noheader", "--format=%T"], capture_output=True, text=True, timeout=15, check=False
        ).stdout.split()
    except subprocess.TimeoutExpired:
        return False
    return any(state in ("idle", "mixed", "allocated", "completing") for state in states)


CLUSTER = _cluster_answers()

pytestmark = pytest.mark.skipif(
    not CLUSTER and not os.environ.get("CI"), reason="no Slurm cluster answers (CI starts one with .ci/slurm-up)"
)


@pytest.fixture(autouse=True)
def _cluster() -> None:
    assert CLUSTER, "CI is set but no Slurm node answers sinfo: .ci/run must start one with .ci/slurm-up"


def srun(
    tasks: int, command: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``srun`` a fresh job of ``tasks`` one-CPU tasks from ``cwd``; outputs from every task, interleaved."""
    assert SRUN is not None
    job = [SRUN, f"--ntasks={tasks}", "--cpus-per-task=1", "--job-name=pytest-nvlink-test", "--time=3"]
    return subprocess.run(
        [*job, f"--chdir={cwd}", *command],
        env={**base_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


def test_srun_launches_the_collective_harness_on_gloo(tmp_path: Path) -> None:
    suite, thresholds = write_suite(tmp_path, gpus=2)
    out = tmp_path / "out" / "collectives.json"
    launch = [sys.executable, "-m", "pytest_nvlink.launch", "collectives", "--suite", str(suite)]
    done = srun(2, [*launch, "--thresholds", str(thresholds), "--backend", "gloo", "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in out.parent.iterdir()) == ["collectives.json"]  # rank 0 alone writes
    document = json.loads(out.read_text())
    assert document["launcher"] == "slurm"
    assert document["world_size"] == 2
    host = document["ranks"][0]["host"]  # slurmd's node name: the one-host cluster's only node
    assert document["ranks"] == [
        {"rank": 0, "host": host, "local_rank": 0, "cuda_index": None, "gpu_uuid": None},  # gloo: no GPU
        {"rank": 1, "host": host, "local_rank": 1, "cuda_index": None, "gpu_uuid": None},
    ]
    assert document["hosts"] == [host]
    assert document["error"] is None
    measurements = from_json(Measurements, document["measurements"], "out")
    assert [(m.op, m.world_size, m.correct, m.error) for m in measurements.collectives] == [
        ("all_reduce", 2, True, None),
        ("all_gather", 2, True, None),
    ]
    assert all(m.busbw_gbps is not None and m.busbw_gbps > 0 for m in measurements.collectives)
    assert measurements.collectives[0].conditions == {
        "iterations": "2",
        "warmup": "1",
        "backend": "gloo",
        "launcher": "slurm",
    }


def sbatch(script: str, options: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Submit a recipe from contrib/slurm and wait for it; its exit status and its job output.

    The job's state is polled every half second: ``sbatch --wait`` backs off to half a minute.
    """
    assert SBATCH is not None and SCONTROL is not None
    log = cwd / "job.out"
    submitted = subprocess.run(
        [SBATCH, "--parsable", f"--chdir={cwd}", f"--output={log}", *options, str(RECIPES / script)],
        env={**base_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 240
    while True:
        shown = subprocess.run(
            [SCONTROL, "show", "job", "--oneliner", job], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        state = re.search(r"\bJobState=(\S+)", shown)
        assert state is not None, shown
        if state.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            break
        if time.monotonic() > deadline:
            subprocess.run([SCANCEL, job], timeout=30, check=False)
            pytest.fail(f"job {job} ({script}) still {state.group(1)} after 240 s: {shown}")
        time.sleep(0.5)
    code = re.search(r"\bExitCode=(\d+):(\d+)", shown)
    assert code is not None, shown
    status = int(code.group(1)) if code.group(2) == "0" else 128 + int(code.group(2))  # killed by a signal
    return status, shown + (log.read_text() if log.exists() else "")


# A one-tray rack suite: the cluster's one node is the tray, its four tasks the tray's GPUs.
RACK_KEYS = """
[fabric]
# Source: tests only: the pretend tray carries a clique, as NVL72 trays do.
clique_required = true

[p2p]
# Source: tests only: any figure gloo send/recv produces on a loaded CPU passes.
sendrecv_min_gbps = 0.0001
"""


def test_the_rack_recipe_launches_every_rank_and_rank0_judges(tmp_path: Path) -> None:
    node_name = idle_node()
    suite = tmp_path / "rack-suite.toml"
    suite.write_text(SUITE.format(gpus=4).replace("gpu_count = 4\n", "gpu_count = 4\ngpus_per_host = 4\n"))
    thresholds = tmp_path / "rack-thresholds.toml"
    thresholds.write_text(THRESHOLDS + RACK_KEYS)
    tray, cluster = tray_node(node_name, gpus=4), str(uuid.uuid4())
    for gpu in tray.gpus:
        gpu.fabric = FabricInfo(state="completed", status="success", clique_id=5, cluster_uuid=cluster)
    save_snapshot(tray, tmp_path / "trays" / f"{node_name}.json")
    out = tmp_path / "rack"
    env = {
        "NVLINK_SUITE": str(suite),
        "NVLINK_OUT": str(out),
        "NVLINK_PYTHON": sys.executable,
        "NVLINK_BACKEND": "gloo",
        "NVLINK_LAUNCH_ARGS": f"--thresholds {thresholds} --rack-name rack-ci",
        # Copy-engine figures, counters and NCCL logs do not exist on gloo: judge what a rack adds.
        "NVLINK_PYTEST_ARGS": "-p no:randomly -k (rack)or(test_path)or(test_p2p_status)or(collective_busbw)",
        "PYTEST_NVLINK_TRAY_SNAPSHOT": str(tmp_path / "trays" / "{host}.json"),
    }
    status, log = sbatch("nvlink-rack.sbatch", ["--nodes=1", f"--nodelist={node_name}"], env, tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["junit.xml", "rack-snapshot.json", "report.html", "results.json"]
    node = load_snapshot(out / "rack-snapshot.json")
    assert node.host == "rack-ci"
    assert [(g.index, g.host, g.local_index) for g in node.gpus] == [(i, node_name, i) for i in range(4)]
    assert [(c.op, c.world_size, c.correct, c.error) for c in node.measurements.collectives] == [
        ("all_reduce", 4, True, None),
        ("all_gather", 4, True, None),
    ]
    expected = [pair for rounds in pair_schedule([[0, 1, 2, 3]], DEFAULT_CROSS_PEERS) for pair in rounds]
    assert [(m.src, m.dst) for m in node.measurements.p2p] == expected
    assert all(m.kind == "sendrecv" and m.error is None and m.value and m.value > 0 for m in node.measurements.p2p)
    results = json.loads((out / "results.json").read_text())
    outcome = {item["nodeid"].split("::")[-1]: item for item in results["items"]}
    for name in ("test_rack_trays", "test_rack_clique[tray0]", "test_collective_busbw[all_reduce]"):
        assert outcome[name]["outcome"] == "pass", outcome[name]["message"]
    # One host is one tray: no pair with another tray exists, and the rack check says so.
    failed = {name: item["message"] for name, item in outcome.items() if item["outcome"] != "pass"}
    assert list(failed) == ["test_rack_sendrecv[tray0]"], failed
    assert "no send/recv pair of its GPUs with another tray was measured" in failed["test_rack_sendrecv[tray0]"]
    assert results["verdict"] == "FAIL"
    assert status == 1, log  # the job's exit status is rank 0's verdict


def test_a_sweep_where_no_node_wrote_results_fails(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    env = {"NVLINK_OUT": str(out), "NVLINK_PYTHON": "false", "NVLINK_FLEET": "false"}
    status, log = sbatch("nvlink-sweep.sbatch", ["--nodes=1"], env, tmp_path)
    assert status == 1, log
    assert f"nvlink-sweep: no node wrote results into {out}/nodes: the sweep failed everywhere" in log
    assert sorted(p.name for p in out.iterdir()) == ["nodes", "snapshots"]


# One task of the sweep: pretend node "node<SLURM_PROCID>" replays its own snapshot; a task with no
# snapshot stands for a node that died before writing anything.
PRETEND_NODE = """
host=node$SLURM_PROCID
snapshot=$1/$host.json
shift
[ -e "$snapshot" ] || exit 3
exec "$@" --nvlink-replay="$snapshot" --nvlink-host="$host"
"""
PRETEND_SNAPSHOTS = {
    "node0": "h100-8gpu-healthy",
    "node1": "h100-8gpu-degraded",
    "node2": "h100-8gpu-vm-pcie",
    "node3": "h100-8gpu-healthy",
}


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLEET), "fleet", *args], capture_output=True, text=True, timeout=120, check=False)


def drained(script: Path) -> dict[str, str]:
    """NodeName -> Reason of the ``scontrol update ... State=DRAIN`` lines of a drain script."""
    lines = [shlex.split(line) for line in script.read_text().splitlines() if line.startswith("scontrol ")]
    assert all(words[:2] == ["scontrol", "update"] and "State=DRAIN" in words for words in lines), lines
    return {
        word.removeprefix("NodeName="): next(w.removeprefix("Reason=") for w in words if w.startswith("Reason="))
        for words in lines
        for word in words
        if word.startswith("NodeName=")
    }


def test_an_srun_sweep_of_pretend_nodes_merges_into_per_node_verdicts(tmp_path: Path) -> None:
    snapshots, nodes, work = tmp_path / "snapshots", tmp_path / "nodes", tmp_path / "work"
    for folder in (snapshots, nodes, work):
        folder.mkdir()
    for host, name in PRETEND_SNAPSHOTS.items():
        shutil.copy(SNAPSHOTS / f"{name}.json", snapshots / f"{host}.json")
    pytest_run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nvlink-suite=h100-8gpu"]
    task = ["bash", "-c", PRETEND_NODE, "pretend-node", str(snapshots), *pytest_run]
    done = srun(5, [*task, f"--nvlink-json={nodes}/{{host}}.json", f"--junitxml={nodes}/{{host}}.xml"], work)
    assert done.returncode != 0  # two nodes fail and one wrote nothing
    written = sorted(p.name for p in nodes.iterdir())
    assert written == [f"node{i}.{ext}" for i in range(4) for ext in ("json", "xml")], done.stderr[-2000:]
    for host in PRETEND_SNAPSHOTS:
        assert json.loads((nodes / f"{host}.json").read_text())["host"] == host

    out = tmp_path / "fleet"
    merged = fleet(
        str(nodes),
        "--expect-nodes",
        "node[0-4]",
        "--json",
        f"{out}.json",
        "--junit",
        f"{out}.xml",
        "--html",
        f"{out}.html",
        "--drain-script",
        f"{out}.sh",
    )
    assert merged.returncode == 1, merged.stdout + merged.stderr
    document = json.loads(Path(f"{out}.json").read_text())
    assert document["verdict"] == "FAIL"
    assert document["counts"] == {"pass": 2, "fail": 2, "incomplete": 0, "missing": 1}
    status = {node["host"]: node["status"] for node in document["nodes"]}
    assert status == {"node0": "pass", "node1": "fail", "node2": "fail", "node3": "pass", "node4": "missing"}
    first = {node["host"]: node["first_failure"] for node in document["nodes"]}
    assert first["node0"] is None and first["node3"] is None
    assert all(first[host] for host in ("node1", "node2", "node4"))
    assert set(drained(Path(f"{out}.sh"))) == {"node1", "node2", "node4"}
    cases = ET.parse(f"{out}.xml").getroot().iter("testcase")
    failing = {case.get("name", "") for case in cases if case.find("failure") is not None}
    assert all(any(host in name for name in failing) for host in ("node1", "node2", "node4")), failing
    assert not any(host in name for name in failing for host in ("node0", "node3")), failing
    page = Path(f"{out}.html").read_text()
    assert all(host in page for host in status)
    for host in ("node1", "node2", "node4"):
        assert host in merged.stdout  # the terminal table names every node that does not pass


def test_the_sweep_recipe_on_the_cluster_passes_a_healthy_node(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    env = {
        "NVLINK_SUITE": "h100-8gpu",
        "NVLINK_OUT": str(out),
        "NVLINK_PYTHON": sys.executable,
        "NVLINK_PYTEST_ARGS": "--nvlink-replay=h100-8gpu-healthy",
    }
    status, log = sbatch("nvlink-sweep.sbatch", ["--nodes=1"], env, tmp_path)
    assert status == 0, log
    node = json.loads(Path(out / "fleet.json").read_text())["nodes"]
    host = node[0]["host"]  # slurmd's name for the one node, which --expect-nodes also lists
    assert [(n["host"], n["status"]) for n in node] == [(host, "pass")]
    assert sorted(p.name for p in (out / "nodes").iterdir()) == [f"{host}.json", f"{host}.xml"]
    assert load_snapshot(out / "snapshots" / f"{host}.json").gpus
    assert len(list(ET.parse(out / "nodes" / f"{host}.xml").getroot().iter("testcase"))) > 0
    assert drained(out / "drain.sh") == {}
    assert (out / "fleet.html").is_file() and (out / "fleet.xml").is_file()
