"""What each item of a replay costs per pytest phase, against the same number of trivial items.

    python benchmarks/item_phases.py                 # 72-GPU synthetic replay, 7 alternated rounds
    python benchmarks/item_phases.py --gpus 16 --rounds 5

benchmarks/scale.py times whole runs; this one says where an item's time goes. A small plugin,
loaded with ``-p``, wraps collection and each run-test hook (setup, call, teardown, makereport,
logreport, the whole protocol) and prints their totals; the replay of a synthetic node
(tests/synthetic_node.py) and a file of as many trivial ``def test_x(i): pass`` items are run
alternately, so that drift on a shared machine hits both alike. Printed: the medians in seconds
and each phase's ratio to the trivial items'. The call phase is the checks' judging; the others
are what the plugin's fixtures and hooks add to pytest's own cost of an item.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from synthetic_node import synthetic_node, write_synthetic  # noqa: E402

PHASES = ("collection", "runtest_setup", "runtest_call", "runtest_teardown", "runtest_makereport", "runtest_logreport")
PROTOCOL = "runtest_protocol"
# The timing plugin: outermost wrappers (tryfirst) around each hook, totals printed to stderr at the end.
TIMER = f"""
import sys, time
import pytest

TOTALS = {{}}


def _timed(name):
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def hook(*args, **kwargs):
        started = time.perf_counter()
        try:
            return (yield)
        finally:
            TOTALS[name] = TOTALS.get(name, 0.0) + time.perf_counter() - started

    return hook


for _name in {[*PHASES, PROTOCOL]!r}:
    globals()["pytest_" + _name] = _timed(_name)


def pytest_unconfigure(config):
    sys.stderr.write("PHASES " + " ".join(f"{{k}}={{v:.6f}}" for k, v in TOTALS.items()) + "\\n")
"""


def _phases(args: Sequence[str], folder: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "nvlink_phase_timer", *args]
    done = subprocess.run(
        command, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False
    )
    line = next((ln for ln in done.stderr.splitlines() if ln.startswith("PHASES ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"pytest {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return {name: float(value) for name, value in re.findall(r"(\w+)=([\d.]+)", line)}


def _count_items(args: Sequence[str], folder: Path) -> int:
    command = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    return sum(1 for line in done.stdout.splitlines() if "::" in line)


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(run.get(name, 0.0) for run in runs) for name in (*PHASES, PROTOCOL)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=72, help="GPUs of the synthetic node (default 72)")
    parser.add_argument("--rounds", type=int, default=7, help="alternated rounds (medians over these)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nvlink-phases-") as temporary:
        folder = Path(temporary)
        (folder / "nvlink_phase_timer.py").write_text(TIMER)
        files = write_synthetic(folder / "node", args.gpus, node=synthetic_node(args.gpus))
        replay = [f"--nvlink-suite={files.suite}", f"--nvlink-replay={files.snapshot}"]
        items = _count_items(replay, folder)
        trivial_file = folder / "test_trivial.py"
        trivial = f"import pytest\n\n\n@pytest.mark.parametrize('i', range({items}))\ndef test_x(i):\n    pass\n"
        trivial_file.write_text(trivial)
        runs: dict[str, list[dict[str, float]]] = {"replay": [], "trivial": []}
        for _ in range(args.rounds):  # alternated, so load on a shared machine hits both alike
            runs["replay"].append(_phases(replay, folder))
            runs["trivial"].append(_phases([str(trivial_file)], folder))
    replay_s, trivial_s = _medians(runs["replay"]), _medians(runs["trivial"])
    names = [name.removeprefix("runtest_") for name in (*PHASES, PROTOCOL)]
    print(f"{args.gpus}-GPU replay, {items} items, medians of {args.rounds} alternated rounds (s, whole run)")
    print(f"{'':10}" + "".join(f"{name:>12}" for name in names))
    for label, medians in (("replay", replay_s), ("trivial", trivial_s)):
        print(f"{label:10}" + "".join(f"{medians[name]:12.3f}" for name in (*PHASES, PROTOCOL)))
    ratios = [replay_s[name] / trivial_s[name] if trivial_s[name] else float("nan") for name in (*PHASES, PROTOCOL)]
    print(f"{'ratio':10}" + "".join(f"{ratio:12.2f}" for ratio in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
