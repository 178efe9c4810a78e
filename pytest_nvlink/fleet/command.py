"""``pytest-nvlink fleet``: the options, and the run from files to verdict and outputs."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pytest_nvlink.core.atomic import UnwritableTarget
from pytest_nvlink.core.hostlist import HostlistError, expand
from pytest_nvlink.fleet.load import FleetInputError
from pytest_nvlink.fleet.merge import Fleet, merge_paths
from pytest_nvlink.fleet.outliers import OutlierSettings
from pytest_nvlink.fleet.terminal import render_terminal

if TYPE_CHECKING:
    from argparse import _SubParsersAction

INPUT_ERROR = 2
DEFAULTS = OutlierSettings()
DEFAULT_JOBS = 8  # reading is CPU-bound; beyond ~8 the disk and the merge's serial part dominate


def add_fleet_parser(commands: _SubParsersAction[argparse.ArgumentParser]) -> None:
    fleet = commands.add_parser(
        "fleet",
        help="merge per-node --nvlink-json results into one fleet verdict",
        description=(
            "Merge per-node results (files written by --nvlink-json, and folders searched recursively for *.json) "
            "into one verdict. Exit status: 0 all nodes pass; 1 a node fails, is incomplete or missing "
            "(or has an outlier with --fail-on-outliers); 2 a usage or input error."
        ),
    )
    fleet.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="results files or folders of them")
    fleet.add_argument(
        "--expect-nodes",
        metavar="HOSTLIST|FILE",
        help="the nodes that must have results: a Slurm hostlist (gpu[001-064,070]) or a file of names "
        "(one hostlist or name per line, # comments); absent ones fail as missing",
    )
    fleet.add_argument("--fail-on-outliers", action="store_true", help="outliers make the exit status 1")
    outlier_options = (
        ("--outlier-z", "Z", _positive, DEFAULTS.z_threshold, "flag a modified z-score this far on the bad side"),
        (
            "--outlier-warn-percent",
            "PCT",
            _positive,
            DEFAULTS.warn_percent,
            "flag a node this many %% worse than the median",
        ),
        (
            "--outlier-replace-percent",
            "PCT",
            _positive,
            DEFAULTS.replace_percent,
            "call for replacement this many %% worse",
        ),
        ("--outlier-min-nodes", "N", _at_least_three, DEFAULTS.min_nodes, "nodes needed to judge outliers in a figure"),
    )
    for option, metavar, kind, default, text in outlier_options:
        fleet.add_argument(option, type=kind, default=default, metavar=metavar, help=f"{text} (default %(default)s)")
    fleet.add_argument(
        "--jobs",
        type=_at_least_one,
        default=min(DEFAULT_JOBS, os.cpu_count() or 1),
        metavar="N",
        help="processes reading the files (default %(default)s: the CPUs, at most 8; used from 64 files)",
    )
    fleet.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML: one testcase per node and outlier")
    fleet.add_argument("--json", type=Path, metavar="FILE", help="write the fleet verdict as JSON (fleet.schema.json)")
    fleet.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML fleet page")
    fleet.add_argument(
        "--drain-script",
        type=Path,
        metavar="FILE",
        help="write (never run) a shell script of scontrol DRAIN lines for the nodes not passing",
    )


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number above 0")
    return value


def _whole_number(minimum: int, why: str = "") -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}{why}")
        return value

    return parse


_at_least_one = _whole_number(1)
# A median and MAD of fewer than three values cannot single out one node.
_at_least_three = _whole_number(3, "; a median of fewer nodes singles out none")


# What a file of node names is called; no host name ends so (no such top-level domain), and none holds a "/".
_FILE_SUFFIXES = frozenset({".txt", ".lst", ".list", ".csv", ".hosts", ".nodes", ".conf", ".cfg", ".json", ".yaml"})


def expected_nodes(value: str) -> list[str]:
    """A file of names (one hostlist or name per line) when ``value`` is a file, else a hostlist.

    A value that names a file (a path, or a name such as nodes.txt) but is none is a usage error: read as
    a hostlist it would expect one node called "nodes.txt" and call every real node unexpected.
    """
    path = Path(value)
    if not path.is_file():
        if path.exists():
            raise FleetInputError(f"--expect-nodes: {value}: not a regular file (expected a file of node names)")
        if "/" in value or path.suffix.lower() in _FILE_SUFFIXES:
            raise FleetInputError(
                f"--expect-nodes: {value}: file not found; give a file of node names (one per line) or a Slurm "
                "hostlist such as gpu[001-064]"
            )
        return _unique_hosts(expand(value))
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise FleetInputError(f"{path}: cannot read the expected nodes ({exc})") from None
    hosts: list[str] = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            hosts.extend(expand(text))
        except HostlistError as exc:
            raise FleetInputError(f"{path}:{number}: {exc}") from None
    if not hosts:
        raise FleetInputError(f"{path}: names no node")
    return _unique_hosts(hosts)


def _unique_hosts(hosts: list[str]) -> list[str]:
    """Each host once; host names compare without regard to case (DNS), so GPU001 and gpu001 are one."""
    return list({host.lower(): host for host in reversed(hosts)}.values())[::-1]


def settings_of(args: argparse.Namespace) -> OutlierSettings:
    return OutlierSettings(
        args.outlier_z, args.outlier_warn_percent, args.outlier_replace_percent, args.outlier_min_nodes
    )


def run_fleet(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        settings = settings_of(args)
        if settings.replace_percent < settings.warn_percent:
            raise FleetInputError("--outlier-replace-percent is below --outlier-warn-percent")
        check_output_targets(args)
        expected = expected_nodes(args.expect_nodes) if args.expect_nodes is not None else None
        fleet = merge_paths(args.paths, expected, settings, args.jobs)
        write_outputs(fleet, args)
    except (FleetInputError, HostlistError) as exc:
        err.write(f"pytest-nvlink fleet: error: {exc}\n")
        return INPUT_ERROR
    except OSError as exc:
        err.write(f"pytest-nvlink fleet: error: cannot write {exc.filename}: {exc.strerror or exc}\n")
        return INPUT_ERROR
    out.write(render_terminal(fleet, args.fail_on_outliers))
    return fleet.exit_status(args.fail_on_outliers)


def check_output_targets(args: argparse.Namespace) -> None:
    """One path, one output, and every output writable, before any file is read (a big fleet takes a while)."""
    from pytest_nvlink.core.atomic import same_target, unwritable_problem

    named = [
        (f"--{name.replace('_', '-')}", getattr(args, name))
        for name in ("junit", "json", "html", "drain_script")
        if getattr(args, name) is not None
    ]
    problem = same_target(named)
    for label, path in named:
        problem = problem or (f"{label}: {found}" if (found := unwritable_problem(path)) else None)
    if problem is not None:
        raise FleetInputError(problem)


def write_outputs(fleet: Fleet, args: argparse.Namespace) -> None:
    """Each requested file. One that cannot be written is named by its option and the path given, not by the
    temporary file beside it."""
    requested = (
        ("--junit", args.junit),
        ("--json", args.json),
        ("--html", args.html),
        ("--drain-script", args.drain_script),
    )
    for option, path in requested:
        if path is None:
            continue
        try:
            _writer(option)(fleet, path, args.fail_on_outliers)
        except UnwritableTarget as exc:
            raise FleetInputError(f"{option}: {exc}") from None
        except OSError as exc:
            raise FleetInputError(f"{option}: cannot write {path}: {exc.strerror or exc}") from None


def _writer(option: str) -> Callable[[Fleet, Path, bool], None]:
    """The writer of one output; imports only what the requested outputs need."""
    if option == "--html":
        from pytest_nvlink.fleet.html import write_html

        return write_html
    from pytest_nvlink.fleet.outputs import write_drain_script, write_json, write_junit

    if option == "--drain-script":
        return lambda fleet, path, _fail_on_outliers: write_drain_script(fleet, path)
    return write_junit if option == "--junit" else write_json
