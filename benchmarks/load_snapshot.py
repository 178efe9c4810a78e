"""How long reading a large snapshot takes (a script, not a test), split into its steps.

    python benchmarks/load_snapshot.py                      # a synthetic 72-GPU node
    python benchmarks/load_snapshot.py --gpus 16 --runs 15
    python benchmarks/load_snapshot.py --against /tmp/old   # A/B against another checkout of the project

The node is tests/synthetic_node.py's (every ordered pair measured; ~350,000 values at 72 GPUs),
written once to a temporary folder. Every variant runs in its own fresh process, and the variants
take turns for ``--rounds`` rounds so that drift in the machine's load hits them alike: this tree
with the decoder it picks (orjson with the ``fleet`` extra), this tree as a plain install (orjson
hidden), and with ``--against`` the same two for the other tree. A round's figure is the median of
``--runs`` calls, with the cyclic collector enabled as in a real run (the loader pauses it itself);
the table shows, in ms, the median over rounds and the least of all calls. Times are CPU time, not
wall time: on a shared machine the wall clock mostly measures the neighbours.

- total: ``load_snapshot(path)``, what a replay pays;
- json: decoding the file's text with the decoder the loader picks;
- build: ``node_from_document`` (conversion, duplicate and numbering checks, impossible values),
  split into convert (``from_json(Node, ...)`` alone) and check (build less convert);
- walk: a full ``value_problems`` pass over the node, for scale (build skips it while conversion
  saw only possible numbers).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIGURES = ("total", "json", "build", "convert", "walk")


def _times_ms(call: Callable[[], object], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.process_time()
        result = call()
        times.append(time.process_time() - start)
        del result  # freed outside the timed span: a run keeps its node to the end
    return [t * 1000 for t in times]


def _paused(call: Callable[[], object]) -> Callable[[], object]:
    """``call`` with the collector off, as the loader runs its steps."""

    def run() -> object:
        gc.disable()
        try:
            return call()
        finally:
            gc.enable()

    return run


def measure(tree: Path, path: Path, runs: int, plain: bool) -> dict[str, Any]:
    """The figures of one variant, in this process: ``tree``'s loader reading ``path``."""
    if plain:
        sys.modules["orjson"] = None  # type: ignore[assignment]  # import orjson now raises ImportError
    sys.path.insert(0, str(tree))
    from pytest_nvlink.core.textfile import read_text_file
    from pytest_nvlink.core.values import value_problems
    from pytest_nvlink.model import Node
    from pytest_nvlink.model import document as snapshot
    from pytest_nvlink.model import records as json_records
    from pytest_nvlink.sources.snapshot import file as snapshot_file

    text = read_text_file(path, snapshot_file.SNAPSHOT_MAX_BYTES)
    fast = getattr(snapshot_file, "_fast_decoder", lambda: None)()  # a tree without it decodes with json
    decode: Callable[[str], Any] = fast or json.loads
    document = decode(text)
    node = json_records.from_json(Node, document["node"], "node")
    return {
        "decoder": f"{decode.__module__}.{decode.__name__}",
        "total": _times_ms(lambda: snapshot_file.load_snapshot(path), runs),
        "json": _times_ms(_paused(lambda: decode(text)), runs),
        "build": _times_ms(_paused(lambda: snapshot.node_from_document(document, str(path))), runs),
        "convert": _times_ms(_paused(lambda: json_records.from_json(Node, document["node"], "node")), runs),
        "walk": _times_ms(_paused(lambda: value_problems(node, "node")), runs),
    }


def _variant(tree: Path, path: Path, runs: int, plain: bool) -> dict[str, Any]:
    command = [sys.executable, __file__, "--measure", str(path), "--tree", str(tree), f"--runs={runs}"]
    output = subprocess.run([*command, "--plain"] if plain else command, check=True, capture_output=True, text=True)
    figures: dict[str, Any] = json.loads(output.stdout)
    return figures


def report(label: str, rounds: list[dict[str, Any]], base: list[dict[str, Any]] | None) -> str:
    """Per step: the median over rounds of each round's median, and the least of all calls."""

    def figures(runs: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
        return {
            name: (statistics.median(statistics.median(r[name]) for r in runs), min(min(r[name]) for r in runs))
            for name in FIGURES
        }

    now = figures(rounds)
    now["check"] = (now["build"][0] - now["convert"][0], now["build"][1] - now["convert"][1])
    was = figures(base) if base else {}
    if was:
        was["check"] = (was["build"][0] - was["convert"][0], was["build"][1] - was["convert"][1])
    notes = {
        "total": "load_snapshot(path)",
        "json": "decoding the text",
        "build": "node_from_document",
        "convert": "  from_json(Node, ...)",
        "check": "  build less convert: duplicates, numbering, impossible values",
        "walk": "a full value_problems pass, for scale",
    }
    lines = [
        f"{label}: decoder {rounds[0]['decoder']}",
        "  step      median     min" + ("   was median    min" if was else ""),
    ]
    for name, note in notes.items():
        line = f"  {name:8s} {now[name][0]:7.1f} {now[name][1]:7.1f}"
        if was:
            line += f"   {was[name][0]:7.1f} {was[name][1]:7.1f}  ({now[name][0] / was[name][0]:4.2f} x median)"
        lines.append(f"{line}   {note}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpus", type=int, default=72)
    parser.add_argument("--runs", type=int, default=7, help="calls per figure in one round (median)")
    parser.add_argument("--rounds", type=int, default=3, help="turns every variant takes (median)")
    parser.add_argument("--against", type=Path, help="another checkout of the project to compare with")
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)  # orjson hidden
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # one variant, figures as JSON
    parser.add_argument("--tree", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.tree, args.measure, args.runs, args.plain)))
        return
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tests"))
    from synthetic_node import synthetic_node, write_synthetic

    trees = [("this tree", REPO)] + ([("against", args.against.resolve())] if args.against else [])
    variants = [(name, tree, plain) for name, tree in trees for plain in (False, True)]
    with tempfile.TemporaryDirectory(prefix="load-snapshot-") as folder:
        write_synthetic(Path(folder), args.gpus, node=synthetic_node(args.gpus))
        path = Path(folder) / f"node-{args.gpus}gpu.json"
        print(
            f"{args.gpus} GPUs, {path.stat().st_size / 1e6:.1f} MB; median of {args.runs} calls, {args.rounds} rounds"
        )
        figures: dict[tuple[str, bool], list[dict[str, Any]]] = {(n, p): [] for n, _, p in variants}
        for _ in range(args.rounds):
            for name, tree, plain in variants:
                figures[name, plain].append(_variant(tree, path, args.runs, plain))
    for name, _, plain in variants:
        base = figures.get(("against", plain)) if name != "against" else None
        label = f"{name}, {'plain install (orjson hidden)' if plain else 'as installed'}"
        print(report(label, figures[name, plain], base))


if __name__ == "__main__":
    main()
