"""``python -m pytest_nvlink.launch``: one rank of a job that srun or torchrun started on many GPUs.

    srun --ntasks-per-node=4 python -m pytest_nvlink.launch collectives --suite S --backend nccl --out F
    srun --ntasks-per-node=4 python -m pytest_nvlink.launch rack --suite S --backend nccl --out-dir D [-- PYTEST ARGS]

Exit status: 0 passed, 1 a failure (rank 0: the verdict; other ranks: their own part), 2 a usage,
configuration or launcher-environment error (one line on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.measure.launch_run import RACK_SNAPSHOT, Settings, run_collectives_command, run_rack_command
from pytest_nvlink.measure.ranks import RankEnvError, rank_info
from pytest_nvlink.measure.sendrecv import DEFAULT_CROSS_PEERS
from pytest_nvlink.model.document import SnapshotError, check_writable

PROG = "python -m pytest_nvlink.launch"


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _peers(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more peers, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=PROG, description="Run pytest-nvlink measurements over launched ranks.")
    commands = top.add_subparsers(dest="command", required=True)
    both = argparse.ArgumentParser(add_help=False)
    both.add_argument("--suite", required=True, help="a shipped suite name or a path to a suite .toml")
    both.add_argument("--thresholds", type=Path, help="site threshold .toml laid over the suite's set")
    both.add_argument("--backend", choices=("nccl", "gloo"), default="nccl", help="nccl (GPUs) or gloo (CPU)")
    both.add_argument(
        "--timeout-s",
        type=_positive,
        help="how long a rank waits on the others in one step before it fails (default: the suite's timeout_s)",
    )
    collectives = commands.add_parser("collectives", parents=[both], help="the suite's collectives over all ranks")
    collectives.add_argument("--out", type=Path, required=True, help="JSON file rank 0 writes")
    rack = commands.add_parser("rack", parents=[both], help="a rack's facts and figures, judged as one node")
    rack.add_argument("--out-dir", type=Path, required=True, help="where rank 0 writes the snapshot and verdict")
    rack.add_argument("--tray-snapshot", help="replay this tray snapshot instead of probing ({host} expands)")
    rack.add_argument(
        "--cross-peers", type=_peers, default=DEFAULT_CROSS_PEERS, help="peers in other trays per GPU (send/recv)"
    )
    rack.add_argument("--rack-name", help="the rack node's host name (default: rack-<first tray's host>)")
    rack.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: options for the judging pytest")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        suite = load_suite(args.suite)
        thresholds = load_thresholds(suite.thresholds_ref, args.thresholds)
        info = rank_info(os.environ)
        if info.rank == 0:  # refuse an unwritable target now, not after the whole job has run
            check_writable(args.out if args.command == "collectives" else args.out_dir / RACK_SNAPSHOT)
    except (ConfigError, RankEnvError, SnapshotError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    os.environ.update(info.rendezvous_env())
    settings = Settings(
        suite=suite,
        thresholds=thresholds,
        backend=args.backend,
        site_thresholds=args.thresholds,
        op_timeout_s=args.timeout_s,
    )
    if args.command == "collectives":
        return run_collectives_command(info, settings, args.out)
    extra = list(args.pytest_args)
    settings = dataclasses.replace(
        settings,
        tray_snapshot=args.tray_snapshot,
        cross_peers=args.cross_peers,
        rack_name=args.rack_name,
        pytest_args=tuple(extra[1:] if extra[:1] == ["--"] else extra),
    )
    return run_rack_command(info, settings, args.out_dir)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # A process group broken by a lost rank can block interpreter teardown; the verdict is already written.
    os._exit(code)
