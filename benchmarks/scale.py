"""How replay time grows with the domain: synthetic healthy 8/16/32/72-GPU nodes against pytest itself.

    python benchmarks/scale.py                      # 8, 16, 32, 72 GPUs, 3 A/B rounds, per-pair 72 once
    python benchmarks/scale.py --sizes 8 72 --rounds 5 --pair-rounds 0

For every size it writes a synthetic node, suite and threshold file (tests/synthetic_node.py), counts
the items the replay collects, and writes a file of that many trivial parametrized ``def test_x(i):
pass`` items. Then it alternates (a) the replay and (b) the trivial file, so that drift on a shared
machine hits both alike, and prints the medians (wall clock and the child's CPU time) and their ratio,
and the median of each round's own CPU ratio ("paired": drift between rounds cancels out there, where
it can move the two medians apart). A run of one trivial test is pytest's start-up. Targets: replay /
trivial <= 1.5 at every size, and the 72-GPU replay <= 5 s over pytest's start-up. ``--pair-rounds``
adds the 72-GPU replay with ``[suite] pair_items = "pair"`` (one item per pair, 28,628 items) for
comparison.

The children write bytecode, as Python does by default, under a cache folder in the temporary
directory (never the checkout's, whose files may be stale), warmed by the untimed runs that count the
items. A machine that cannot keep bytecode (PYTHONDONTWRITEBYTECODE=1 and none written before) pays
more: pytest then parses and assertion-rewrites every module of a pytest11 plugin on every run.

``--instructions`` also counts each side's instructions once under valgrind (minutes per size): unlike
times, the count is the same on every run, so it shows a change's effect on a noisy machine.

``--other-plugins``: ``off`` (the default) runs both sides with every other installed pytest11
plugin disabled (``-p no:NAME``): the comparison is pytest alone against pytest with this plugin,
as after ``pip install pytest-nvlink``. A development venv's hypothesis plugin alone imports
hypothesis at every session's end (~0.3 s here), which would pad both sides; ``on`` keeps them.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from synthetic_node import synthetic_node, write_synthetic  # noqa: E402

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
OWN_PACKAGE = "pytest_nvlink."
TARGET_OVER_STARTUP_S = 5.0
TARGET_RATIO = 1.5  # the replay against pytest alone running as many trivial items, at every size


CHILD_ENV: dict[str, str] = dict(os.environ)


def _child_env(folder: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    return env


def _other_plugins_off() -> list[str]:
    """``-p no:NAME`` for every installed pytest11 plugin but this one."""
    names = sorted(ep.name for ep in entry_points(group="pytest11") if not ep.value.startswith(OWN_PACKAGE))
    return [arg for name in names for arg in ("-p", f"no:{name}")]


def _timed(args: Sequence[str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one pytest run; its output goes nowhere (a terminal would add to both)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [*PYTEST, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, env=CHILD_ENV
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"pytest {' '.join(args)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _instructions(args: Sequence[str], cwd: Path) -> int:
    """Instructions one pytest run executes (valgrind's cachegrind): the same on every run, unlike times."""
    env = {**CHILD_ENV, "PYTHONHASHSEED": "0"}  # str hashing, and with it set and dict layouts, as every run
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *PYTEST, *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, env=env)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind {' '.join(args)}: no instruction count: {done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def _count_items(args: Sequence[str], cwd: Path) -> int:
    done = subprocess.run([*PYTEST, "--co", *args], cwd=cwd, capture_output=True, text=True, check=False, env=CHILD_ENV)
    return sum(1 for line in done.stdout.splitlines() if "::" in line)


def _trivial_file(folder: Path, count: int) -> Path:
    path = folder / f"test_trivial_{count}.py"
    path.write_text(f"import pytest\n\n\n@pytest.mark.parametrize('i', range({count}))\ndef test_x(i):\n    pass\n")
    return path


def _replay_args(folder: Path, count: int, pair_items: str | None = None) -> list[str]:
    node = synthetic_node(count)
    files = write_synthetic(folder / f"{count}-{pair_items or 'auto'}", count, pair_items=pair_items, node=node)
    return [f"--nvlink-suite={files.suite}", f"--nvlink-replay={files.snapshot}"]


def _median(runs: list[tuple[float, float]], which: int) -> float:
    return statistics.median(run[which] for run in runs)


WIDTHS = (22, 6, 8, 8, 6, 8, 8, 6, 7)


def _paired(replay: list[tuple[float, float]], trivial: list[tuple[float, float]]) -> float:
    """The median of each round's CPU ratio: a round's two runs are adjacent in time, so drift on a shared
    machine between rounds cancels out, where it moves the two medians apart."""
    return statistics.median(r[1] / t[1] for r, t in zip(replay, trivial, strict=True))


def _row(label: str, items: int, replay: list[tuple[float, float]], trivial: list[tuple[float, float]]) -> str:
    cells = [label, str(items)]
    for which in (0, 1):
        a, b = _median(replay, which), _median(trivial, which)
        cells += [f"{a:.2f}", f"{b:.2f}", f"{a / b:.2f}"]
    cells.append(f"{_paired(replay, trivial):.2f}")
    return "  ".join(cell.rjust(width) for cell, width in zip(cells, WIDTHS, strict=True))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 72])
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds per size (medians over these)")
    parser.add_argument("--pair-rounds", type=int, default=1, help="rounds of the per-pair 72-GPU replay (0: none)")
    parser.add_argument(
        "--other-plugins", choices=("off", "on"), default="off", help="other pytest11 plugins disabled (default)"
    )
    parser.add_argument(
        "--instructions", action="store_true", help="also count each side's instructions once (needs valgrind)"
    )
    args = parser.parse_args(argv)
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind on PATH")
    disabled = _other_plugins_off() if args.other_plugins == "off" else []
    PYTEST.extend(disabled)
    with tempfile.TemporaryDirectory(prefix="nvlink-scale-") as temporary:
        folder = Path(temporary)
        CHILD_ENV.clear()
        CHILD_ENV.update(_child_env(folder))
        off = " ".join(disabled[1::2]) or "none disabled"
        print(f"other pytest plugins: {args.other_plugins} ({off})")
        _timed([str(_trivial_file(folder, 1))], folder)  # warm-up: pytest's own modules
        startup = [_timed([str(_trivial_file(folder, 1))], folder) for _ in range(args.rounds)]
        print(f"pytest start-up (1 trivial item): wall {_median(startup, 0):.2f} s, CPU {_median(startup, 1):.2f} s")
        header = ("", "items", "replay", "trivial", "ratio", "replay", "trivial", "ratio", "paired")
        print("  ".join(h.rjust(w) for h, w in zip(header, WIDTHS, strict=True)))
        print(" " * 32 + "--- wall s (median) ---   ---- CPU s (median) ----  CPU ratio")
        cases: list[tuple[str, int, str | None, int]] = [(f"{n} GPUs", n, None, args.rounds) for n in args.sizes]
        if args.pair_rounds and 72 in args.sizes:
            cases.append(("72 GPUs pair_items=pair", 72, "pair", args.pair_rounds))
        results: dict[str, tuple[float, float]] = {}
        paired: dict[str, float] = {}
        for label, count, pair_items, rounds in cases:
            replay_args = _replay_args(folder, count, pair_items)
            items = _count_items(replay_args, folder)  # also the warm-up: it imports every module
            trivial_args = [str(_trivial_file(folder, items))]
            replay, trivial = [], []
            for _ in range(rounds):  # alternated, so load on a shared machine hits both alike
                replay.append(_timed(replay_args, folder))
                trivial.append(_timed(trivial_args, folder))
            print(_row(label, items, replay, trivial), flush=True)
            results[label] = (_median(replay, 0), _median(replay, 1))
            paired[label] = _paired(replay, trivial)
            if args.instructions:
                ours, theirs = _instructions(replay_args, folder), _instructions(trivial_args, folder)
                print(
                    f"{'':>22}  instructions: replay {ours / 1e9:.2f} G, trivial {theirs / 1e9:.2f} G, "
                    f"ratio {ours / theirs:.2f}",
                    flush=True,
                )
        over_ratio = [label for label, ratio in paired.items() if ratio > TARGET_RATIO and "pair_items" not in label]
        verdict = f"NOT met at {', '.join(over_ratio)}" if over_ratio else "met at every size"
        print(f"replay / trivial <= {TARGET_RATIO} (CPU, paired median): {verdict}")
        if "72 GPUs" in results:
            for which, what in ((0, "wall"), (1, "CPU")):
                over = results["72 GPUs"][which] - _median(startup, which)
                verdict = "met" if over <= TARGET_OVER_STARTUP_S else "NOT met"
                print(f"72-GPU replay: {over:.2f} s {what} over pytest's start-up (target <= 5 s: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
