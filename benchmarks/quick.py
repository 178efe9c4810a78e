"""How long ``--nvlink-quick`` takes on a node (a script, not a test); the target is < 10 s per node.

    python benchmarks/quick.py               # 5 alternated runs of each pair
    python benchmarks/quick.py --repeats 9

Pairs, each run A/B alternated so that drift on a shared machine hits both alike, medians and ratio:

* per shipped snapshot: a quick replay against the full replay of the same snapshot;
* a live quick run against fake NVML (``tests/fake_pynvml.py`` serving the healthy H100 snapshot as
  this machine) against ``pytest --version``, the start-up a node pays whatever it runs.

As on an installed node, bytecode and pytest's assertion-rewrite cache are written (the children
run without ``PYTHONDONTWRITEBYTECODE``; one untimed warm-up run of each command fills them), and
hypothesis' pytest plugin, a dev extra whose terminal summary imports hypothesis, is disabled.

On a GPU node, time the real thing with ``time pytest --nvlink-suite=auto --nvlink-quick``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_nvlink.model.document import save_snapshot  # noqa: E402
from pytest_nvlink.sources.snapshot.file import load_snapshot  # noqa: E402

TARGET_S = 10.0
QUIET = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest"]
FAKE_NVML_PLUGIN = """
import sys
from pathlib import Path
from fake_pynvml import make_fake_pynvml
from pytest_nvlink.sources.snapshot.file import load_snapshot  # noqa: E402
sys.modules["pynvml"] = make_fake_pynvml(load_snapshot(Path({path!r})))
"""


@dataclasses.dataclass
class Timing:
    seconds: list[float] = dataclasses.field(default_factory=list)
    exit_codes: set[int] = dataclasses.field(default_factory=set)


def _pytest(args: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, capture_output=True, timeout=600, check=False
    )
    return time.perf_counter() - started, done.returncode


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def ab(a: Sequence[str], b: Sequence[str], repeats: int, cwd: Path, env: dict[str, str]) -> tuple[Timing, Timing]:
    """One warm-up run of each, then ``repeats`` runs of each, alternated A, B, A, B, ..."""
    for args in (a, b):
        _pytest(args, cwd, env)
    first, second = Timing(), Timing()
    for _ in range(repeats):
        for timing, args in ((first, a), (second, b)):
            seconds, code = _pytest(args, cwd, env)
            timing.seconds.append(seconds)
            timing.exit_codes.add(code)
    return first, second


def _live_folder(folder: Path) -> dict[str, str]:
    """A fake NVML serving the healthy H100 snapshot as this machine; the environment that loads it."""
    node = dataclasses.replace(load_snapshot(REPO / "snapshots" / "h100-8gpu-healthy.json"), source="live")
    save_snapshot(node, folder / "node.json")
    (folder / "fake_nvml_plugin.py").write_text(FAKE_NVML_PLUGIN.format(path=str(folder / "node.json")))
    return {**_node_environment(), "PYTHONPATH": f"{folder}{os.pathsep}{REPO / 'tests'}"}


def _node_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _row(name: str, a: Timing, b: Timing) -> tuple[str, str, str, str]:
    median_a, median_b = _median(a.seconds), _median(b.seconds)
    codes = f"{sorted(a.exit_codes)}/{sorted(b.exit_codes)}"
    return name, f"{median_a:.2f} s", f"{median_b:.2f} s", f"{median_a / median_b:.2f}  exit {codes}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    worst_quick = 0.0
    with tempfile.TemporaryDirectory() as empty:
        cwd = Path(empty)
        env = _node_environment()
        for snapshot in sorted((REPO / "snapshots").glob("*.json")):
            replay = ["--nvlink-suite=h100-8gpu", f"--nvlink-replay={snapshot}", *QUIET]
            quick, full = ab([*replay, "--nvlink-quick"], [*replay, "-q"], args.repeats, cwd, env)
            worst_quick = max(worst_quick, _median(quick.seconds))
            rows.append(_row(f"{snapshot.stem}: quick vs full replay", quick, full))
        live_env = _live_folder(cwd)
        live = ["--nvlink-suite=h100-8gpu", "--nvlink-quick", "-p", "fake_nvml_plugin", *QUIET]
        quick, bare = ab(live, ["--version", *QUIET], args.repeats, cwd, live_env)
        worst_quick = max(worst_quick, _median(quick.seconds))
        rows.append(_row("live quick (fake NVML, 8 GPUs) vs pytest --version", quick, bare))
    header = ("pair (A vs B)", "A median", "B median", "A/B")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    print(f"pytest wall time, {args.repeats} alternated runs each, medians")
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    verdict = "met" if worst_quick < TARGET_S else "NOT met"
    print(f"slowest quick run (median): {worst_quick:.2f} s; target < {TARGET_S:.0f} s per node: {verdict}")


if __name__ == "__main__":
    main()
