"""The Slurm recipes for real: jobs on a one-host Slurm cluster (``.ci/slurm-up``) run by ``srun``.

Skipped only where no Slurm cluster answers and ``CI`` is unset; ``.ci/run`` starts one, and in CI a
missing cluster fails. Every task runs this interpreter (``sys.executable``), so the tests exercise
whichever install of pytest-nvlink runs them (the wheel, in CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from launch_procs import base_env, write_suite

from pytest_nvlink.model import Measurements
from pytest_nvlink.snapshot import from_json

SRUN = shutil.which("srun")
SINFO = shutil.which("sinfo")


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
        {"rank": 0, "host": host, "local_rank": 0},
        {"rank": 1, "host": host, "local_rank": 1},
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
