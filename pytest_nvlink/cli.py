"""``pytest-nvlink``: the package's command line, apart from the pytest plugin itself.

Subcommands:

- ``fleet PATH...``: merge the per-node ``--nvlink-json`` files (and folders of them) into one
  fleet verdict. Exit status 0 when every node passes, 1 when any node fails, is incomplete or
  missing (or has an outlier with ``--fail-on-outliers``), 2 for a usage or input error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pytest_nvlink import __version__

USAGE_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pytest-nvlink", description="pytest-nvlink tools outside a pytest run.")
    parser.add_argument("--version", action="version", version=f"pytest-nvlink {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from pytest_nvlink.fleet.command import add_fleet_parser

    add_fleet_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from pytest_nvlink.fleet.command import run_fleet

    if args.command == "fleet":
        return run_fleet(args, sys.stdout, sys.stderr)
    parser.error(f"unknown command {args.command}")  # argparse exits 2; kept for new subcommands
    return USAGE_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
