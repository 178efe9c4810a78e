"""The installed ``pytest-nvlink`` console script: exit codes 0 / 1 / 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fleet_data import failing, fleet_of, write_fleet


def console_script() -> str:
    # The script next to this interpreter is the one the package installed (venv or CI).
    candidate = Path(sys.executable).with_name("pytest-nvlink")
    found = str(candidate) if candidate.is_file() else shutil.which("pytest-nvlink")
    assert found, "the pytest-nvlink console script is not installed (pip install -e .)"
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([console_script(), *args], capture_output=True, text=True, timeout=300, check=False)


def test_exit_0_when_every_node_passes(tmp_path: Path) -> None:
    write_fleet(tmp_path, fleet_of(2))
    done = run("fleet", str(tmp_path), "--expect-nodes", "gpu[001-002]")
    assert done.returncode == 0, done.stderr
    assert "pytest-nvlink fleet: PASS: 2 node(s): 2 pass, 0 fail, 0 incomplete, 0 missing" in done.stdout


def test_exit_1_when_a_node_fails_or_is_missing(tmp_path: Path) -> None:
    nodes = fleet_of(
        2, change=lambda host, d: failing(d, "test_fabric", "fabric not trained") if host == "gpu002" else d
    )
    write_fleet(tmp_path, nodes)
    done = run("fleet", str(tmp_path), "--expect-nodes", "gpu[001-003]")
    assert done.returncode == 1, done.stderr
    assert "1 pass, 1 fail, 0 incomplete, 1 missing" in done.stdout


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["fleet"],
        ["fleet", "nowhere"],
        ["fleet", ".", "--outlier-z", "nan"],
        ["fleet", ".", "--outlier-min-nodes", "2"],
        ["unknown-command"],
    ],
)
def test_exit_2_for_usage_and_input_errors(args: list[str]) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert done.stderr.strip()


def test_version_and_help() -> None:
    assert run("--version").stdout.startswith("pytest-nvlink ")
    assert "--expect-nodes" in run("fleet", "--help").stdout
