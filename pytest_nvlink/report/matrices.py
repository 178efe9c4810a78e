"""The terminal's pair matrices: path classes (``nvidia-smi topo -m``) and P2P GB/s per ordered pair.

Up to 16 GPUs they print as full matrices, as the tools people know print them. Above that a
matrix is wider than any terminal (a 72-GPU row is ~600 characters), so the terminal prints one
row per GPU that names what differs and the worst peer; the full per-pair matrices stay in the
JSON and HTML reports, which are the record a sign-off reads.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from tabulate import tabulate

from pytest_nvlink.config.suites import path_matches
from pytest_nvlink.model import Node, P2PMeasurement
from pytest_nvlink.model.figures import worst_measured
from pytest_nvlink.record.items import ItemResult, pair_outcomes
from pytest_nvlink.record.run import Run

FULL_MATRIX_UP_TO_GPUS = 16  # as one test item per pair: above it, per-GPU rows
CELLS_NAMED = 4  # differing cells spelled out per GPU row; the rest are counted


def _gpu_count(run: Run) -> int:
    return max(run.suite.gpu_count, len(run.node.gpus))


def topology_lines(run: Run) -> list[str]:
    """The path classes: the full matrix, or above 16 GPUs a count per class and the GPUs whose cells differ."""
    if _gpu_count(run) <= FULL_MATRIX_UP_TO_GPUS:
        head = "topology (nvidia-smi topo -m layout; 'A!B' = measured A where the suite expects B):"
        return [head, *topology_matrix(run).splitlines(), ""]
    return [*topology_summary(run), ""]


def topology_matrix(run: Run) -> str:
    """The pair matrix as ``nvidia-smi topo -m`` prints it; a cell that differs from the suite is ``!``-marked."""
    node, count = run.node, _gpu_count(run)
    header = [""] + [f"GPU{i}" for i in range(count)]
    rows = []
    for a in range(count):
        row = [f"GPU{a}"]
        for b in range(count):
            row.append("X" if a == b else _cell(node, run, a, b))
        rows.append(row)
    return tabulate(rows, headers=header, tablefmt="plain", stralign="center")


def topology_summary(run: Run) -> list[str]:
    """Pairs per path class over the domain, then one row for each GPU with a cell that differs from the suite."""
    node, count = run.node, _gpu_count(run)
    # A cell reads the same from either GPU: each pair is worked out once, for both rows.
    upper = {(a, b): _cell(node, run, a, b) for a in range(count) for b in range(a + 1, count)}
    classes = Counter(upper.values())
    rows = []
    for a in range(count):
        cells = [(b, upper[(a, b) if a < b else (b, a)]) for b in range(count) if b != a]
        differing = [f"GPU{b} {cell}" for b, cell in cells if "!" in cell]
        if differing:
            rows.append([f"GPU{a}", len(differing), _first_of(differing)])
    head = (
        f"topology of {count} GPUs, pairs per path class ('A!B' = measured A where the suite expects B, '-' = "
        f"another host, '?' = not reported; the full matrix is in the JSON and HTML reports): {_counted(classes)}"
    )
    if not rows:
        return [head, "every reported pair has the path class the suite expects"]
    table = tabulate(rows, headers=["GPU", "differing peers", "cells"], tablefmt="simple", disable_numparse=True)
    return [head, *table.splitlines()]


def _cell(node: Node, run: Run, a: int, b: int) -> str:
    actual = node.path(a, b)
    if actual is None and run.suite.crosses_hosts(a, b):
        return "-"  # GPUs on different hosts of a rack: no NVML path class; send/recv judges the pair
    if actual is None:
        return "?"
    if a >= run.suite.gpu_count or b >= run.suite.gpu_count:
        return actual
    expected = run.suite.expected_path(a, b)
    return actual if path_matches(expected, actual) else f"{actual}!{expected}"


def _counted(classes: Counter[str]) -> str:
    return ", ".join(f"{name} x{count}" for name, count in sorted(classes.items())) or "none"


def _first_of(named: list[str]) -> str:
    if len(named) <= CELLS_NAMED:
        return ", ".join(named)
    return f"{', '.join(named[:CELLS_NAMED])} and {len(named) - CELLS_NAMED} more"


def p2p_lines(run: Run, items: Sequence[ItemResult], kind: str = "unidirectional") -> list[str]:
    """The P2P figures: the full matrix, or above 16 GPUs the spread and the source GPUs with a failing pair or a
    failed measurement; then the worst pair. Which pair fails is its verdict's, read from the record's ``items``."""
    if _gpu_count(run) <= FULL_MATRIX_UP_TO_GPUS:
        lines = [f"P2P {kind} GB/s ('!' = the pair fails its check):", *p2p_matrix(run, items, kind).splitlines()]
    else:
        lines = p2p_summary(run, items, kind)
    worst = worst_pair(run, kind)
    return [*lines, worst, ""] if worst else [*lines, ""]


def p2p_matrix(run: Run, items: Sequence[ItemResult], kind: str = "unidirectional") -> str:
    """GB/s per ordered pair (row = source), as p2pBandwidthLatencyTest prints; a pair whose verdict failed
    (below the floor, beyond what its links carry, on a path that is not NVLink) is '!'-marked."""
    figures = _figures(run, kind)
    failing = _failing_pairs(items, kind)
    count = _gpu_count(run)
    rows = []
    for src in range(count):
        row = [f"GPU{src}"]
        for dst in range(count):
            m = figures.get((src, dst))
            if src == dst or m is None:
                row.append("-" if src == dst else "")
            elif m.value is None:
                row.append("err")
            else:
                row.append(f"{m.value:.1f}{'!' if (src, dst) in failing else ''}")
        rows.append(row)
    return tabulate(rows, headers=["src\\dst", *[f"GPU{i}" for i in range(count)]], tablefmt="plain")


def p2p_summary(run: Run, items: Sequence[ItemResult], kind: str = "unidirectional") -> list[str]:
    """The spread over every ordered pair, then one row per source GPU with a pair whose verdict failed or a
    failed measurement: how many, and the lowest failing figure and its peer."""
    by_source: dict[int, list[P2PMeasurement]] = defaultdict(list)
    for (src, dst), m in _figures(run, kind).items():
        if src != dst:
            by_source[src].append(m)
    floor = run.thresholds.value(f"p2p.{kind}_min_gbps")
    failing = _failing_pairs(items, kind)
    rows = []
    for src in range(_gpu_count(run)):
        mine = by_source.get(src, [])
        below = [m for m in mine if m.value is not None and (m.src, m.dst) in failing]
        failed = [m for m in mine if m.value is None]
        if below or failed:
            low = min(below, key=lambda m: m.value or 0.0) if below else None
            lowest = f"{low.value:.1f} (GPU{low.dst})" if low is not None else ""
            rows.append([f"GPU{src}", len(mine), len(below), len(failed), lowest])
    lines = [_spread(run, kind, [m.value for ms in by_source.values() for m in ms if m.value is not None], floor)]
    if not rows:
        return [*lines, "no source GPU has a failing pair or a failed measurement"]
    headers = ["src", "peers measured", "failing", "failed", "lowest (peer)"]
    return [*lines, *tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True).splitlines()]


def _spread(run: Run, kind: str, values: list[float], floor: float | None) -> str:
    where = "the full matrix is in the JSON and HTML reports"
    if not values:
        return f"P2P {kind}: no figure over {_gpu_count(run)} GPUs ({where})"
    import statistics  # only a domain above 16 GPUs prints a spread; statistics imports fractions and decimal

    shown_floor = f", floor {floor:g} GB/s" if floor is not None else ""
    return (
        f"P2P {kind} GB/s over {len(values)} ordered pairs of {_gpu_count(run)} GPUs: lowest {min(values):.1f}, "
        f"median {statistics.median(values):.1f}, highest {max(values):.1f}{shown_floor} ({where}):"
    )


def _figures(run: Run, kind: str) -> dict[tuple[int, int], P2PMeasurement]:
    return {(m.src, m.dst): m for m in run.node.measurements.p2p if m.kind == kind}


def _failing_pairs(items: Sequence[ItemResult], kind: str) -> set[tuple[int, int]]:
    """The ordered pairs whose ``test_p2p_<kind>`` verdict failed, as the results record holds them."""
    return {pair for pair, outcome in pair_outcomes(items, f"test_p2p_{kind}").items() if outcome == "fail"}


def worst_pair(run: Run, kind: str = "unidirectional") -> str | None:
    worst = worst_measured(run.node.measurements.p2p, kind)
    if worst is None:
        return None
    return f"worst {kind} pair: GPU {worst.src} -> GPU {worst.dst} at {worst.value:.1f} GB/s"
