"""Outputs are never lost or mixed (issue 24, section 2): one path, one output; every target that cannot
be written is found before anything runs, pytest's own --junitxml and --nvlink-save-dir included.

Device nodes, FIFOs and links are made privately in a temporary folder; no real /dev entry is touched.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from fleet_data import fleet_of, write_fleet
from test_fleet_cli import run as run_console

from pytest_nvlink.core.atomic import folder_problem, same_target, unwritable_problem

HEALTHY = ("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy")


def _usage_error(result: pytest.RunResult, line: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"ERROR: {line}"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert "passed" not in result.stdout.str()  # nothing ran


# --- one path, one output ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--nvlink-json=out.xml", "--junitxml=out.xml"], "--nvlink-json and --junitxml both name out.xml: *"),
        (["--nvlink-json=r.json", "--nvlink-report=./sub/../r.json"], "--nvlink-json and --nvlink-report both name *"),
        (["--nvlink-save=node.json", "--nvlink-report=node.json"], "--nvlink-report and --nvlink-save both name *"),
        # compared after {host} expansion: the replayed node is hgx-h100-01
        (["--nvlink-json={host}.json", "--junitxml=hgx-h100-01.json"], "--nvlink-json and --junitxml both name *"),
    ],
)
def test_two_outputs_on_one_path_are_a_usage_error_before_anything_runs(
    pytester: pytest.Pytester, args: list[str], line: str
) -> None:
    (pytester.path / "sub").mkdir()
    _usage_error(pytester.runpytest(*HEALTHY, *args), line)
    assert not list(pytester.path.glob("*.json")) and not list(pytester.path.glob("*.xml"))


def test_a_symlink_to_another_output_is_the_same_path(pytester: pytest.Pytester) -> None:
    (pytester.path / "link.json").symlink_to(pytester.path / "r.json")
    _usage_error(
        pytester.runpytest(*HEALTHY, "--nvlink-json=r.json", "--nvlink-report=link.json"),
        "--nvlink-json and --nvlink-report both name link.json: give each output its own file",
    )


def test_the_fleet_refuses_two_outputs_on_one_path_before_reading_a_file(tmp_path: Path) -> None:
    folder = write_fleet(tmp_path / "runs", fleet_of(2))
    done = run_console("fleet", str(folder), "--junit", str(tmp_path / "o"), "--drain-script", str(tmp_path / "o"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == (
        f"pytest-nvlink fleet: error: --junit and --drain-script both name {tmp_path / 'o'}: "
        "give each output its own file"
    )
    assert not (tmp_path / "o").exists()
    done = run_console("fleet", str(folder), "--json", str(tmp_path / "f.json"), "--html", str(tmp_path / "f.json"))
    assert "--json and --html both name" in done.stderr and not (tmp_path / "f.json").exists()


# --- unwritable targets, found before the run ------------------------------------------------------------


def test_an_unwritable_junitxml_is_a_usage_error_not_a_traceback_after_the_run(pytester: pytest.Pytester) -> None:
    _usage_error(
        pytester.runpytest(*HEALTHY, "--junitxml=/proc/pytest-nvlink.xml"),
        "--junitxml: cannot write /proc/pytest-nvlink.xml: *",
    )
    (pytester.path / "folder").mkdir()
    (pytester.path / "to-folder.xml").symlink_to(pytester.path / "folder")
    _usage_error(pytester.runpytest(*HEALTHY, "--junitxml=to-folder.xml"), "--junitxml*to-folder.xml*")
    (pytester.path / "file").write_text("x")
    not_a_folder = "--junitxml: cannot create *: * is not a folder"
    _usage_error(pytester.runpytest(*HEALTHY, "--junitxml=file/j.xml"), not_a_folder)


def test_a_junitxml_fifo_stays_allowed(tmp_path: Path) -> None:
    """pytest writes its JUnit by opening the path: a pipe (or /dev/stdout) is a use, not a mistake."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert unwritable_problem(fifo) is None
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_save_dir_that_cannot_be_written_stops_the_run_before_it_starts(pytester: pytest.Pytester) -> None:
    _usage_error(
        pytester.runpytest(*HEALTHY, "--nvlink-save-dir=/proc/pytest-nvlink-runs"),
        "--nvlink-save-dir: cannot write /proc/pytest-nvlink-runs: *; the run would be saved nowhere",
    )
    (pytester.path / "file").write_text("x")
    _usage_error(pytester.runpytest(*HEALTHY, "--nvlink-save-dir=file/runs"), "--nvlink-save-dir: cannot create *")
    assert folder_problem(pytester.path / "new" / "runs") is None  # made at the end, as the writer does


def test_the_fleets_outputs_are_checked_before_any_file_is_read(tmp_path: Path) -> None:
    folder = write_fleet(tmp_path / "runs", fleet_of(2))
    for option in ("--json", "--html", "--junit", "--drain-script"):
        done = run_console("fleet", str(folder), option, "/proc/pytest-nvlink-fleet")
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.startswith(f"pytest-nvlink fleet: error: {option}: cannot write /proc/"), done.stderr
        assert "Traceback" not in done.stderr


def test_same_target_compares_resolved_paths(tmp_path: Path) -> None:
    os.chdir(tmp_path)
    assert same_target([("--a", Path("x.json")), ("--b", tmp_path / "x.json")]) is not None
    assert same_target([("--a", Path("x.json")), ("--b", Path("y.json"))]) is None
