"""Mutation score of one package: how many single-line changes to the verdict logic the tests notice.

    pip install -e .[mutation]
    python benchmarks/mutation.py outliers                 # fleet/outliers.py, 291 mutants, ~15 min on 2 cores
    python benchmarks/mutation.py judges --modules inventory.py,rack.py --budget 1800
    python benchmarks/mutation.py parsers --survivors      # also print each surviving mutant's diff

mutmut (``[tool.mutmut]`` in pyproject.toml) changes one operator, constant or call at a time and runs
the tests that reach the changed function. This script copies the project (its git-tracked files, as
the working tree has them) to a scratch folder, narrows the mutated files and the test selection to
one package there, runs mutmut for at most ``--budget`` seconds, and prints killed / survived / timeout
and the score, killed + timeout over the mutants tested. A mutant that survives is a change of the
verdict logic the tests let through: kill it with a test, or say in the note why it is equivalent.

It is slow (every mutant reruns tests) and so not part of .ci/run; run it one package at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Package:
    folder: str  # mutated files, relative to the project root
    default_modules: tuple[str, ...]  # files of the folder mutated when --modules is not given
    tests: tuple[str, ...]  # test files (globs under tests/) that exercise it


PACKAGES: dict[str, Package] = {
    "outliers": Package(
        "pytest_nvlink/fleet",
        ("outliers.py",),
        ("test_fleet_outliers.py", "test_fleet_merge.py", "test_fleet_outputs.py", "test_fleet_cli.py"),
    ),
    "judges": Package(
        "pytest_nvlink/judges",
        ("*",),
        (
            "test_judges*.py",
            "test_fail_closed_thresholds.py",
            "test_baseline*.py",
            "test_diagnoses.py",
            "test_evidence_verdicts.py",
            "test_rank_coverage.py",
            "test_nccl_channels_and_warns.py",
            "test_judging_at_scale.py",
            "test_group_quick_pass.py",
        ),
    ),
    "parsers": Package(
        "pytest_nvlink/sources/evidence/parsers",
        ("*",),
        ("test_parse_*.py", "test_evidence*.py", "test_rack_evidence.py", "test_nccl_channels_and_warns.py"),
    ),
}


def scratch_copy(target: Path) -> None:
    """The project's tracked files as the working tree has them (uncommitted edits included)."""
    git = shutil.which("git") or "git"
    listed = subprocess.run([git, "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in listed.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def narrowed_config(text: str, only_mutate: list[str], tests: list[str]) -> str:
    """pyproject.toml with [tool.mutmut] mutating ``only_mutate`` and running ``tests`` only."""
    section = text.index("[tool.mutmut]")
    following = text.find("\n[", section + 1)
    body = text[section : len(text) if following < 0 else following]
    kept = [line for line in body.splitlines() if line.startswith(("source_paths", "also_copy", "pytest_add_cli_args"))]
    narrowed = "\n".join(
        [
            "[tool.mutmut]",
            *kept,
            f"only_mutate = {json.dumps(only_mutate)}",
            f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
        ]
    )
    return text[:section] + narrowed + ("" if following < 0 else text[following:])


def selection(package: Package, modules: list[str]) -> tuple[list[str], list[str]]:
    only = [f"{package.folder}/{module}" for module in modules]
    tests = sorted(
        {path.relative_to(ROOT).as_posix() for glob in package.tests for path in (ROOT / "tests").glob(glob)}
    )
    return only, tests


def run_mutmut(work: Path, budget_s: float, children: int) -> tuple[str, bool]:
    """mutmut's output and whether the budget ran out first (then the counts cover the mutants tested so far)."""
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)]
    with subprocess.Popen(
        command, cwd=work, env=_env(work), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    ) as process:
        try:
            output, _ = process.communicate(timeout=budget_s)
            return output.decode(errors="replace"), False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            output, _ = process.communicate()
            return output.decode(errors="replace"), True


def counts(work: Path) -> dict[str, int]:
    """killed / survived / timeout / ... from mutmut's saved results (those of a cut run too)."""
    _mutmut(work, "export-cicd-stats")
    saved = work / "mutants" / "mutmut-cicd-stats.json"
    return {key: int(value) for key, value in json.loads(saved.read_text()).items()} if saved.exists() else {}


def _mutmut(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mutmut", *args]
    return subprocess.run(command, cwd=work, env=_env(work), capture_output=True, text=True, check=False)


def _env(work: Path) -> dict[str, str]:
    """mutmut puts the mutated copy first on its own path; the tests' child processes (a CLI run, a
    pytester subprocess) import this checkout unmutated: mutated code needs mutmut's configuration,
    which a child started in another folder cannot find. Such tests therefore kill no mutant."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def survivors(work: Path, show_diffs: bool) -> list[str]:
    listed = _mutmut(work, "results")
    names = [line.split(":")[0].strip() for line in listed.stdout.splitlines() if line.strip().endswith("survived")]
    if not show_diffs:
        return names
    shown = []
    for name in names:
        diff = _mutmut(work, "show", name)
        shown.append(f"{name}\n{diff.stdout.strip()}")
    return shown


def score_line(name: str, found: dict[str, int], seconds: float, cut: bool) -> str:
    killed, survived, timeout = found.get("killed", 0), found.get("survived", 0), found.get("timeout", 0)
    tested = killed + survived + timeout + found.get("suspicious", 0)
    score = 100.0 * (killed + timeout) / tested if tested else 0.0
    total = found.get("total", tested)
    left = f", budget ran out after {tested} of {total}" if cut else ""
    return (
        f"{name}: {score:.1f}% ({killed} killed, {survived} survived, {timeout} timeout, "
        f"{found.get('no_tests', 0)} reached by no test; {total} mutants{left}) in {seconds:.0f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package", choices=sorted(PACKAGES))
    parser.add_argument("--modules", help="comma-separated files of the package to mutate (default: all)")
    parser.add_argument("--budget", type=float, default=1800.0, help="seconds before the run is cut (default 1800)")
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once (default 2: this box's cores)")
    parser.add_argument("--survivors", action="store_true", help="print each surviving mutant's diff")
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it (mutmut browse there)")
    args = parser.parse_args(argv)
    package = PACKAGES[args.package]
    modules = args.modules.split(",") if args.modules else list(package.default_modules)
    only, tests = selection(package, modules)
    work = args.keep or Path(tempfile.mkdtemp(prefix="pytest-nvlink-mutation-"))
    try:
        work.mkdir(parents=True, exist_ok=True)
        scratch_copy(work)
        pyproject = work / "pyproject.toml"
        pyproject.write_text(narrowed_config(pyproject.read_text(), only, tests))
        print(f"mutating {', '.join(only)} against {len(tests)} test file(s) in {work}", flush=True)
        started = time.monotonic()
        output, cut = run_mutmut(work, args.budget, args.children)
        seconds = time.monotonic() - started
        found = counts(work)
        if not any(found.get(key) for key in ("killed", "survived", "timeout", "suspicious")):
            print(output.replace("\r", "\n")[-4000:])
            print(f"{args.package}: mutmut produced no results", file=sys.stderr)
            return 2
        print(score_line(args.package, found, seconds, cut))
        for line in survivors(work, args.survivors):
            print(f"  survived: {line}")
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
