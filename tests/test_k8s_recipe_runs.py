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
