"""The sweep pod's script and the fleet merge Job's command from contrib/k8s, run here as written.

Each pretend node replays a shipped snapshot (the only change to the script: the results volume is
a temporary folder and ``--nvlink-replay`` is added); the merge then runs on their results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import k8s_manifests as k8s
import pytest

BIN = str(Path(sys.executable).parent)  # where this environment's pytest and pytest-nvlink live


def _job_container(name: str) -> dict[str, Any]:
    [doc] = [doc for _, doc in k8s.all_documents() if doc["kind"] == "Job" and doc["metadata"]["name"] == name]
    [container] = k8s.containers(doc)
    return container


def _run_sweep_pod(node: str, snapshot: str, results: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = k8s.container_script(_job_container("nvlink-sweep"))
    assert script is not None and "/results/" in script and "--nvlink-suite=auto" in script
    script = script.replace("/results", str(results))
    script = script.replace("--nvlink-suite=auto", f"--nvlink-suite=auto --nvlink-replay={snapshot}")
    env = {**os.environ, "NODE_NAME": node, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        ["sh", "-c", script], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, subprocess.CompletedProcess[str]]]:
    results = tmp_path_factory.mktemp("results")
    pods = {
        "gpu-node-a": _run_sweep_pod("gpu-node-a", "h100-8gpu-healthy", results, tmp_path_factory.mktemp("a")),
        "gpu-node-b": _run_sweep_pod("gpu-node-b", "h100-8gpu-degraded", results, tmp_path_factory.mktemp("b")),
    }
    return results, pods


def test_sweep_pods_write_their_node_files_and_one_summary_line(
    swept: tuple[Path, dict[str, subprocess.CompletedProcess[str]]],
) -> None:
    results, pods = swept
    for node, pod in pods.items():
        assert pod.returncode == 0, pod.stdout + pod.stderr  # a verdict was written, pass or fail
        [line] = pod.stdout.splitlines()
        verdict = "exit 0: " if node.endswith("a") else "exit 1: "
        assert line.startswith(f"pytest-nvlink {node} {verdict}") and " passed" in line
        for path in (f"nodes/{node}.json", f"nodes/{node}.xml", f"nodes/{node}.log", f"snapshots/{node}.json"):
            assert (results / path).is_file(), path
        assert json.loads((results / f"nodes/{node}.json").read_text(encoding="utf-8"))["host"] == node


def test_a_run_without_a_verdict_fails_the_pod(tmp_path: Path) -> None:
    pod = _run_sweep_pod("gpu-node-x", "no-such-snapshot", tmp_path / "results", tmp_path)
    assert pod.returncode != 0
    assert pod.stdout.startswith("pytest-nvlink gpu-node-x exit ")


def test_fleet_merge_job_fails_the_failing_and_the_missing_node(
    swept: tuple[Path, dict[str, subprocess.CompletedProcess[str]]], tmp_path: Path
) -> None:
    results, _ = swept
    expected = tmp_path / "nodes.txt"
    expected.write_text("gpu-node-a\ngpu-node-b\ngpu-node-c\n", encoding="utf-8")
    [argv] = k8s.container_commands(_job_container("nvlink-fleet-merge"))
    argv = [
        token.replace("/etc/pytest-nvlink/nodes.txt", str(expected)).replace("/results", str(results)) for token in argv
    ]
    merge = subprocess.run(
        [str(Path(BIN) / argv[0]), *argv[1:]], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert merge.returncode == 1, merge.stdout + merge.stderr
    fleet = json.loads((results / "fleet.json").read_text(encoding="utf-8"))
    statuses = {node["host"]: node["status"] for node in fleet["nodes"]}
    assert statuses == {"gpu-node-a": "pass", "gpu-node-b": "fail", "gpu-node-c": "missing"}
    assert (results / "fleet.xml").is_file() and (results / "fleet.html").is_file()


def _fake_tools(folder: Path) -> Path:
    """kubectl that records its arguments, and sleep that ends the health loop after one round."""
    folder.mkdir()
    (folder / "kubectl").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$KUBECTL_ARGS"\n', encoding="utf-8")
    (folder / "sleep").write_text('#!/bin/sh\nkill -TERM "$PPID"\n', encoding="utf-8")
    for tool in ("kubectl", "sleep"):
        (folder / tool).chmod(0o755)
    return folder


@pytest.mark.parametrize(("snapshot", "verdict"), [("h100-8gpu-healthy", "pass"), ("h100-8gpu-degraded", "fail")])
def test_health_round_labels_the_node_with_valid_labels(tmp_path: Path, snapshot: str, verdict: str) -> None:
    [doc] = [doc for _, doc in k8s.all_documents() if doc["kind"] == "DaemonSet"]
    [container] = k8s.containers(doc)
    script = k8s.container_script(container)
    assert script is not None and "--nvlink-quick" in script
    script = script.replace("--nvlink-quick", f"--nvlink-quick --nvlink-replay={snapshot}")
    recorded = tmp_path / "kubectl-args"
    path = os.pathsep.join([str(_fake_tools(tmp_path / "bin")), BIN, os.environ.get("PATH", "")])
    interval = k8s.env_of(container)["HEALTH_INTERVAL_S"]["value"]
    env = {**os.environ, "PATH": path, "NODE_NAME": "gpu-node-q", "KUBECTL_ARGS": str(recorded)}
    env["HEALTH_INTERVAL_S"] = interval
    env.pop("PYTEST_ADDOPTS", None)
    pod = subprocess.run(
        ["sh", "-c", script], check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert pod.stdout.splitlines()[-1].startswith(f"pytest-nvlink gpu-node-q: {verdict} at "), pod.stdout + pod.stderr
    argv = recorded.read_text(encoding="utf-8").splitlines()
    assert argv[:4] == ["label", "node", "gpu-node-q", "--overwrite"]
    labels = dict(token.split("=", 1) for token in argv[4:])
    assert labels["pytest-nvlink/verdict"] == verdict
    for key, value in labels.items():
        assert k8s.label_key_problem(key) is None
        assert k8s.label_value_problem(value) is None, value
    if verdict == "fail":
        assert "nvlink FAIL gpu-node-q" in pod.stdout  # the failure lines reach the pod's log


def test_a_crashed_rerun_leaves_no_old_verdict(tmp_path: Path) -> None:
    results = tmp_path / "results"
    first = _run_sweep_pod("gpu-node-r", "h100-8gpu-healthy", results, tmp_path)
    assert first.returncode == 0 and (results / "nodes/gpu-node-r.json").is_file()
    crashed = _run_sweep_pod("gpu-node-r", "no-such-snapshot", results, tmp_path)
    assert crashed.returncode != 0
    assert not (results / "nodes/gpu-node-r.json").exists()  # the merge now finds the node missing
    assert not (results / "snapshots/gpu-node-r.json").exists()
