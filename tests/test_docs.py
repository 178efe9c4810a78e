"""README.md and the MkDocs pages under docs/: short README, a site that builds, links and shown output that hold.

The project's rule: every command the README shows is run by a test. The demo's replays and the
one command on a server run here, literally as the README prints them, and the output the README
and docs/demo.md show must be what those runs print; the commands this module cannot run (a fresh
virtual environment, the whole test suite) are listed with the CI script that runs them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import REPO
from report_outputs import DEMOS

README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 300
# README commands run by .ci/run rather than here: command -> (file, a line of it that runs the command)
RUN_ELSEWHERE = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install .": (".ci/run", 'python3 -m venv "$work/venv"'),
    'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e ".[dev]"': (
        ".ci/run",
        "pip_quiet torch==2.13.0",
    ),
    "pytest": (".ci/run", "pytest"),
}
# The live commands: run here without a GPU, where they must fail the inventory and still write their files.
LIVE_COMMANDS = [
    "pytest --nvlink-suite=h100-8gpu",
    "pytest --nvlink-suite=auto --junitxml=acceptance.xml --nvlink-save=node.json",
]
REPLAY = re.compile(r"pytest --nvlink-suite=h100-8gpu --nvlink-replay=(\S+)$")
SUMMARY = re.compile(r"^(\d+) failed, (\d+) passed in [\d.]+s$")
HAS_GPU = Path("/dev/nvidiactl").exists()


def _fenced(path: Path, language: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def _commands(path: Path) -> list[tuple[str, str]]:
    """Each command line of the page's bash blocks (continuations joined) with its trailing comment."""
    commands = []
    for block in _fenced(path, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            command, _, comment = line.partition("  #")
            if command.strip() and not command.lstrip().startswith("#"):
                commands.append((" ".join(command.split()), comment.strip().lstrip("#").strip()))
    return commands


def _pytest(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    assert argv[0] == "pytest", command
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """The README's replay command of a demo snapshot, run once from an empty folder; its stdout."""
    printed: dict[str, str] = {}

    def run(snapshot: str) -> str:
        if snapshot not in printed:
            done = _pytest(
                f"pytest --nvlink-suite=h100-8gpu --nvlink-replay={snapshot}", tmp_path_factory.mktemp(snapshot)
            )
            assert done.returncode == (0 if DEMOS[snapshot][1] == 0 else 1), done.stdout + done.stderr
            printed[snapshot] = done.stdout
        return printed[snapshot]

    return run


def test_readme_is_at_most_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_every_readme_command_is_run_by_a_test() -> None:
    commands = [command for command, _ in _commands(README)]
    assert set(LIVE_COMMANDS) <= set(commands)
    replays = [command for command in commands if REPLAY.match(command)]
    assert replays
    for command in set(commands) - {*LIVE_COMMANDS, *replays}:
        assert command in RUN_ELSEWHERE, f"README.md shows `{command}` but no test runs it"
        where, line = RUN_ELSEWHERE[command]
        lines = [text.strip() for text in (REPO / where).read_text(encoding="utf-8").splitlines()]
        assert line in lines, f"{where} no longer runs `{command}` (its line `{line}` is gone)"


@pytest.mark.parametrize("page", [README, DOCS / "demo.md"], ids=lambda path: path.name)
def test_demo_replays_are_green_and_red_as_the_page_says(page: Path, replay: Callable[[str], str]) -> None:
    shown = {}
    for command, comment in _commands(page):
        match = REPLAY.match(command)
        if match:
            shown[match.group(1)] = comment
    assert set(shown) == set(DEMOS)
    for snapshot, comment in shown.items():
        assert comment == ("green" if DEMOS[snapshot][0] == "PASS" else "red"), snapshot
        replay(snapshot)  # exits 0 for green, 1 for red


@pytest.mark.parametrize("page", [README, DOCS / "demo.md"], ids=lambda path: path.name)
def test_demo_output_shown_is_what_the_replay_prints(page: Path, replay: Callable[[str], str]) -> None:
    """Every line a page shows of a demo run is a line that run prints; its summary counts are that run's."""
    checked = 0
    for block in _fenced(page, "text"):
        shown = block.splitlines()
        summary = SUMMARY.match(shown[-1])
        if summary is None:
            continue
        failed = int(summary.group(1))
        snapshot = next((name for name, (_, count) in DEMOS.items() if count == failed), None)
        assert snapshot is not None, f"{page.name} shows a demo run with {failed} failed, which no demo fails"
        printed = replay(snapshot).splitlines()
        assert any(
            line.strip("= ").startswith(f"{summary.group(1)} failed, {summary.group(2)} passed in") for line in printed
        )
        for line in shown[:-1]:
            assert line == "..." or line in printed, f"{page.name}: the {snapshot} replay does not print {line!r}"
        checked += 1
    assert checked, f"{page.name} shows no demo output"


@pytest.mark.skipif(HAS_GPU, reason="on a GPU server these commands measure for minutes; the device check covers them")
@pytest.mark.parametrize("command", LIVE_COMMANDS)
def test_the_live_commands_without_a_gpu_fail_the_inventory_and_still_write_their_files(
    command: str, tmp_path: Path
) -> None:
    done = _pytest(command, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED nvlink/test_inventory.py::test_gpu_count" in done.stdout
    for option in shlex.split(command):
        if option.startswith(("--junitxml=", "--nvlink-save=")):
            assert (tmp_path / option.partition("=")[2]).is_file(), option


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc (MkDocs) and GitHub give a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "").strip().lower())
    return re.sub(r"\s+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return {_slug(match) for match in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def test_every_relative_link_in_the_readme_points_to_a_file() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        parts = urlsplit(link)
        if parts.scheme or link.startswith("//"):
            continue
        target = (README.parent / unquote(parts.path)).resolve() if parts.path else README
        assert target.exists(), f"README.md links to {link}, which is not in the repository"
        if parts.fragment and target.suffix == ".md":
            assert parts.fragment in _anchors(target), f"README.md links to {link}: no such heading"


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda path: path.name)
def test_repository_paths_named_in_the_docs_exist(page: Path) -> None:
    """A path in backticks (`pytest_nvlink/config/required_keys.py`) must still be there after a refactoring."""
    roots = ("pytest_nvlink/", "tests/", "benchmarks/", "contrib/", "suites/", "thresholds/", "snapshots/", "docs/")
    for path in re.findall(r"`([\w./-]+)`", page.read_text(encoding="utf-8")):
        if path.startswith(roots) and "*" not in path:
            assert (REPO / path).exists(), f"{page.name} names {path}, which is not in the repository"


MKDOCS = importlib.util.find_spec("mkdocs") is not None


@pytest.mark.skipif(not MKDOCS and not os.environ.get("CI"), reason="mkdocs is not installed (the dev extra has it)")
def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    assert MKDOCS, 'CI is set but mkdocs is not installed: pip install -e ".[dev]" must bring it'
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(REPO / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "degraded-report.png").is_file()
