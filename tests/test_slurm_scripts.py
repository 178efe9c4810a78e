"""contrib/slurm/nvlink-prolog.sh with a stand-in Python and scontrol: what it logs, exits and drains.

The prolog with the real plugin runs in tests/test_slurm.py; here a script in
place of Python prints or hangs, so the shell logic is pinned down on any machine with bash.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import SNAPSHOTS
from launch_procs import base_env

PROLOG = Path(__file__).resolve().parents[1] / "contrib" / "slurm" / "nvlink-prolog.sh"


def stand_in(folder: Path, name: str, body: str) -> Path:
    """An executable ``folder/name`` running ``body`` (bash) that records its arguments."""
    path = folder / name
    path.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" >>"{folder}/{name}.args"\n{body}\n')
    path.chmod(0o755)
    return path


def prolog(tmp_path: Path, python_body: str | None, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The prolog on node gpu017 with a stand-in scontrol, and a stand-in Python unless ``python_body`` is None."""
    python = sys.executable if python_body is None else str(stand_in(tmp_path, "python", python_body))
    stand_in(tmp_path, "scontrol", "exit 0")
    environment = {
        **base_env(),
        "PATH": f"{tmp_path}:{os.environ['PATH']}",
        "NVLINK_PYTHON": python,
        "NVLINK_SUITE": "h100-8gpu",
        "SLURMD_NODENAME": "gpu017",
        **env,
    }
    return subprocess.run(
        ["bash", str(PROLOG), *args], env=environment, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_healthy_node_exits_0_silently(tmp_path: Path) -> None:
    done = prolog(tmp_path, "exit 0", NVLINK_PYTEST_ARGS="--nvlink-thresholds=/site.toml")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert (tmp_path / "python.args").read_text().split("\n")[:-1] == [
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--nvlink-quick",
        "--nvlink-suite=h100-8gpu",
        "--nvlink-host=gpu017",
        "--nvlink-thresholds=/site.toml",
    ]
    assert not (tmp_path / "scontrol.args").exists()


def test_each_failure_line_is_logged_and_drain_names_the_first(tmp_path: Path) -> None:
    body = 'echo "gpu2->gpu6: path NV16, expected NV18"; echo; echo "gpu3: 17 of 18 NVLinks active"; exit 1'
    done = prolog(tmp_path, body, "--drain")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "pytest-nvlink: gpu017: gpu2->gpu6: path NV16, expected NV18",
        "pytest-nvlink: gpu017: gpu3: 17 of 18 NVLinks active",
    ]
    assert (tmp_path / "scontrol.args").read_text().splitlines() == [
        "update",
        "NodeName=gpu017",
        "State=DRAIN",
        "Reason=pytest-nvlink: gpu2->gpu6: path NV16, expected NV18",
    ]


def test_without_drain_a_failure_only_exits_1(tmp_path: Path) -> None:
    done = prolog(tmp_path, "exit 3")
    assert done.returncode == 1
    assert done.stderr == "pytest-nvlink: gpu017: quick check failed with exit status 3 and printed nothing\n"
    assert not (tmp_path / "scontrol.args").exists()


def test_a_check_past_its_time_limit_fails_and_drains(tmp_path: Path) -> None:
    done = prolog(tmp_path, "exec sleep 30", "--drain", NVLINK_QUICK_TIMEOUT_S="1")
    assert done.returncode == 1
    assert done.stderr == "pytest-nvlink: gpu017: quick check did not finish within 1 s\n"
    reason = (tmp_path / "scontrol.args").read_text().splitlines()[-1]
    assert reason == "Reason=pytest-nvlink: quick check did not finish within 1 s"


def test_an_unknown_argument_is_a_usage_error(tmp_path: Path) -> None:
    done = prolog(tmp_path, "exit 0", "--drian")
    assert done.returncode == 2
    assert "usage:" in done.stderr
    assert not (tmp_path / "python.args").exists()


def test_the_real_quick_check_of_a_healthy_node_passes_silently(tmp_path: Path) -> None:
    healthy = f"--nvlink-replay={SNAPSHOTS / 'h100-8gpu-healthy.json'}"
    # The 10 s limit is for a node; this machine's test load must not make the check flaky.
    done = prolog(tmp_path, None, "--drain", NVLINK_PYTEST_ARGS=healthy, NVLINK_QUICK_TIMEOUT_S="120")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not (tmp_path / "scontrol.args").exists()


def test_the_real_quick_check_of_a_degraded_node_logs_its_failures_and_drains(tmp_path: Path) -> None:
    degraded = f"--nvlink-replay={SNAPSHOTS / 'h100-8gpu-degraded.json'}"
    done = prolog(tmp_path, None, "--drain", NVLINK_PYTEST_ARGS=degraded, NVLINK_QUICK_TIMEOUT_S="120")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0].startswith(
        "pytest-nvlink: gpu017: nvlink FAIL gpu017 test_nvlink_active_links[gpu3]: GPU 3: 16 of 18"
    )
    assert lines[-1].startswith("pytest-nvlink: gpu017: nvlink FAIL gpu017: ")
    assert all(line.startswith("pytest-nvlink: gpu017: nvlink FAIL gpu017 ") for line in lines[:-1])
    assert any("test_p2p_status[gpu2-gpu6]" in line for line in lines)
    assert not any("bandwidth" in line for line in lines)  # quick: nothing measured is judged
    reason = (tmp_path / "scontrol.args").read_text().splitlines()[-1]
    assert reason.startswith("Reason=pytest-nvlink: nvlink FAIL gpu017 test_nvlink_active_links[gpu3]: GPU 3: 16 of 18")
    assert len(reason) <= len("Reason=pytest-nvlink: ") + 200


def test_the_real_quick_check_writes_the_metrics_file_node_exporter_reads(tmp_path: Path) -> None:
    textfile = tmp_path / "textfile_collector"
    textfile.mkdir()
    degraded = f"--nvlink-replay={SNAPSHOTS / 'h100-8gpu-degraded.json'}"
    done = prolog(
        tmp_path, None, NVLINK_PYTEST_ARGS=degraded, NVLINK_METRICS_DIR=str(textfile), NVLINK_QUICK_TIMEOUT_S="120"
    )
    assert done.returncode == 1, done.stderr
    assert [path.name for path in textfile.iterdir()] == ["pytest-nvlink.prom"]  # whole: no temporary left
    text = (textfile / "pytest-nvlink.prom").read_text()
    assert 'pytest_nvlink_verdict{host="gpu017",suite="h100-8gpu",verdict="FAIL"} 1.0' in text
