"""How long ``pytest-nvlink fleet`` takes over 1,000 nodes (a script, not a test). Target: <= 5 s.

    python benchmarks/fleet_merge.py                 # 1,000 nodes, 3 rounds of the A/B below
    python benchmarks/fleet_merge.py --nodes 200 --rounds 5

The nodes are copies of a real ``--nvlink-json`` file (a replay of the shipped h100-8gpu-healthy
snapshot: 8 GPUs, 56 pairs x 3 P2P figures, 5 collectives, 372 checks), each with its own host
and every figure jittered by up to +-1 %, written as the plugin writes them (indented JSON). One
node is 10 % slower on one pair and one fails a check, so every code path runs. Each round times
the whole merge in-process (find, read, validate, merge, outliers, terminal table), alternating
A = with the ``fleet`` extra (orjson, jsonschema-rs) over all nodes and B = the plain install
(standard json, the jsonschema package) over the first ``--b-nodes`` of them, so drift hits both
alike, and prints wall and CPU medians, per node, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from fleet_data import failing, real_results, slower_pair, with_host  # noqa: E402

from pytest_nvlink.fleet import load  # noqa: E402
from pytest_nvlink.fleet.merge import Fleet, merge_paths  # noqa: E402
from pytest_nvlink.fleet.outliers import OutlierSettings  # noqa: E402
from pytest_nvlink.fleet.terminal import render_terminal  # noqa: E402

TARGET_S = 5.0
JITTER = 0.01


def jittered(document: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    for entry in document["node"]["measurements"]["p2p"]:
        if entry["value"] is not None:
            entry["value"] = round(entry["value"] * rng.uniform(1 - JITTER, 1 + JITTER), 2)
    for entry in document["node"]["measurements"]["collectives"]:
        if entry["busbw_gbps"] is not None:
            entry["busbw_gbps"] = round(entry["busbw_gbps"] * rng.uniform(1 - JITTER, 1 + JITTER), 2)
    return document


def write_nodes(folder: Path, count: int) -> int:
    base = real_results()
    rng = random.Random(13)  # noqa: S311 - reproducible jitter, not secrets
    total = 0
    for number in range(1, count + 1):
        host = f"gpu{number:04d}"
        document = jittered(with_host(base, host), rng)
        if number == 7:
            document = slower_pair(document, 2, 5, "unidirectional", 0.9)
        if number == 11:
            document = failing(document, "test_fabric", "GPU 1: fabric state In Progress, expected Completed")
        text = json.dumps(document, indent=1) + "\n"
        (folder / f"{host}.json").write_text(text, encoding="utf-8")
        total += len(text)
    return total


def merge_once(folder: Path) -> tuple[float, float, Fleet]:
    wall, cpu = time.perf_counter(), time.process_time()
    fleet = merge_paths([folder], None, OutlierSettings())
    render_terminal(fleet, fail_on_outliers=False)
    return time.perf_counter() - wall, time.process_time() - cpu, fleet


ORIGINAL = (load._json_loader, load._compiled_validator)


def use_fleet_extra(enabled: bool) -> None:
    """A: orjson + jsonschema-rs (the ``fleet`` extra); B: the standard library's json + the jsonschema package."""
    if enabled:
        load._json_loader, load._compiled_validator = ORIGINAL
    else:
        load._json_loader = lambda: load._stdlib_loads
        load._compiled_validator = lambda schema: None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--b-nodes", type=int, default=100, help="nodes for B (the plain install is ~30x slower)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as name:
        folder = Path(name)
        size = write_nodes(folder, args.nodes)
        print(f"{args.nodes} result files, {size / 2**20:.0f} MiB in all ({size / args.nodes / 1024:.0f} KiB each)")
        subset = Path(name) / "subset"
        subset.mkdir()
        for path in sorted(folder.glob("*.json"))[: args.b_nodes]:
            (subset / path.name).symlink_to(path)
        runs = {"A extra": (True, folder, args.nodes), "B plain": (False, subset, args.b_nodes)}
        timings: dict[str, list[tuple[float, float]]] = {label: [] for label in runs}
        fleet = None
        assert load.ResultsReader().fast, "the fleet extra (orjson, jsonschema-rs) is not installed"
        for _ in range(args.rounds):
            for label, (fast, where, _count) in runs.items():
                use_fleet_extra(fast)
                wall, cpu, merged = merge_once(where)
                fleet = merged if fast else fleet
                timings[label].append((wall, cpu))
        assert fleet is not None
        print(f"verdict {fleet.verdict}: {fleet.count('pass')} pass, {fleet.count('fail')} fail;", end=" ")
        print("outliers:", "; ".join(o.sentence() for o in fleet.outliers) or "none")
        header = (
            f"{'run':<9}{'nodes':>6}{'wall median s':>15}{'CPU median s':>14}{'wall ms/node':>14}   rounds (wall s)"
        )
        print("\n" + header)
        per_node = {}
        for label, samples in timings.items():
            count = runs[label][2]
            wall = statistics.median(w for w, _ in samples)
            cpu = statistics.median(c for _, c in samples)
            per_node[label] = wall / count
            rounds = ", ".join(f"{w:.2f}" for w, _ in samples)
            print(f"{label:<9}{count:>6}{wall:>15.2f}{cpu:>14.2f}{wall / count * 1000:>14.2f}   {rounds}")
        full = statistics.median(w for w, _ in timings["A extra"])
        print(f"B/A per-node wall ratio {per_node['B plain'] / per_node['A extra']:.1f}")
        met = "met" if full <= TARGET_S else "MISSED"
        print(f"{args.nodes} nodes with the fleet extra: {full:.2f} s (target <= {TARGET_S:g} s: {met})")


if __name__ == "__main__":
    main()
