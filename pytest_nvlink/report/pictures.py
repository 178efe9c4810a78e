"""What the HTML report draws, as plain numbers: heatmap cells, colour scales, topology cells, sweeps.

The SVG itself is written by the template from these values. A plotting library (matplotlib)
would add tens of MB and a font cache to a plugin that runs on freshly delivered servers, for
pictures that are grids of rectangles and a few polylines; written from the template they are
text, searchable and inline in one file, and print sharply on A4.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_nvlink.config.suites import path_matches
from pytest_nvlink.model import Node, nvlink_count_of_path
from pytest_nvlink.model.figures import worst_measured
from pytest_nvlink.model.host_link import worst_host_links
from pytest_nvlink.record.run import Run

# ColorBrewer YlGn (the scale nvloom's plot_heatmaps.py uses): low = yellow, high = dark green.
YLGN: tuple[tuple[int, int, int], ...] = ((255, 255, 229), (217, 240, 163), (120, 198, 121), (35, 132, 67), (0, 69, 41))
LATENCY_SCALE_FACTOR = 2.0  # the latency scale runs to twice the SKU's maximum, so the limit sits mid-scale


@dataclass(frozen=True)
class Scale:
    """A colour scale fixed by the SKU's threshold file, so two reports of one SKU compare by eye."""

    low: float
    high: float
    limit: float | None  # the floor (bandwidth) or ceiling (latency) from the threshold file
    higher_is_better: bool
    basis: str  # where ``high`` comes from, printed under the picture

    def colour(self, value: float) -> str:
        share = 0.0 if self.high <= self.low else (value - self.low) / (self.high - self.low)
        share = min(max(share, 0.0), 1.0)
        return _ylgn(share if self.higher_is_better else 1.0 - share)

    def position(self, value: float) -> float:
        """0..1 along the legend bar."""
        return 0.0 if self.high <= self.low else min(max((value - self.low) / (self.high - self.low), 0.0), 1.0)


def _ylgn(share: float) -> str:
    steps = len(YLGN) - 1
    index = min(int(share * steps), steps - 1)
    within = share * steps - index
    low, high = YLGN[index], YLGN[index + 1]
    r, g, b = (round(a + (c - a) * within) for a, c in zip(low, high, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def text_colour(fill: str) -> str:
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#fff"


def p2p_scale(run: Run, kind: str) -> Scale | None:
    """0 .. line rate (active_links x link_speed_min_gbps per direction; twice that bidirectional)."""
    thresholds = run.thresholds
    if kind == "latency":
        limit = thresholds.value("p2p.latency_max_us")
        if limit is None:
            return None
        return Scale(0.0, float(limit) * LATENCY_SCALE_FACTOR, float(limit), False, "2 x p2p.latency_max_us")
    links, speed = thresholds.value("nvlink.active_links"), thresholds.value("nvlink.link_speed_min_gbps")
    floor = thresholds.value(f"p2p.{kind}_min_gbps")
    if not links or not speed:
        return None
    directions = 2 if kind == "bidirectional" else 1
    high = float(links) * float(speed) * directions
    basis = f"{directions} x " if directions > 1 else ""
    return Scale(0.0, high, None if floor is None else float(floor), True, basis + "active_links x link_speed_min_gbps")


@dataclass(frozen=True)
class Cell:
    row: int
    col: int
    text: str
    fill: str
    ink: str
    flagged: bool  # the pair's verdict failed, or it was not measured
    title: str


UNIT = {"unidirectional": "GB/s", "bidirectional": "GB/s", "latency": "us"}


def heatmap(run: Run, kind: str, scale: Scale, failing: set[tuple[int, int]]) -> list[Cell]:
    """One cell per measured ordered pair; ``failing`` (the pairs whose verdict failed, from the record) are flagged."""
    figures = {(m.src, m.dst): m for m in run.node.measurements.p2p if m.kind == kind}
    cells = []
    for (src, dst), m in sorted(figures.items()):
        if m.value is None:
            title = f"GPU {src} -> GPU {dst}: not measured ({m.error or 'no figure'})"
            cells.append(Cell(src, dst, "err", "#d62728", "#fff", True, title))
            continue
        fill = scale.colour(m.value)
        flagged = (src, dst) in failing
        title = f"GPU {src} -> GPU {dst}: {m.value:.1f} {UNIT[kind]}"
        cells.append(Cell(src, dst, f"{m.value:.1f}{'!' if flagged else ''}", fill, text_colour(fill), flagged, title))
    return cells


def worst(run: Run, kind: str) -> str | None:
    m = worst_measured(run.node.measurements.p2p, kind)
    return None if m is None else f"worst pair: GPU {m.src} -> GPU {m.dst} at {m.value:.1f} {UNIT[kind]}"


# Path classes from best to worst, coloured as a traffic light (NV# green .. SYS red).
PATH_FILL = {"NV": "#a1d99b", "PIX": "#fff7bc", "PXB": "#fee391", "PHB": "#fdae6b", "NODE": "#fd8d3c", "SYS": "#fb6a4a"}


@dataclass(frozen=True)
class TopoCell:
    text: str
    fill: str
    mismatch: bool
    title: str


def topology_rows(run: Run) -> list[tuple[str, list[TopoCell]]]:
    node, suite = run.node, run.suite
    count = max(suite.gpu_count, len(node.gpus))
    return [(f"GPU{a}", [_topo_cell(node, run, a, b) for b in range(count)]) for a in range(count)]


def _topo_cell(node: Node, run: Run, a: int, b: int) -> TopoCell:
    if a == b:
        return TopoCell("X", "#eeeeee", False, f"GPU {a}")
    actual = node.path(a, b)
    if actual is None and run.suite.crosses_hosts(a, b):
        return TopoCell("-", "#f6f6f6", False, f"GPU {a} <-> GPU {b}: different hosts, judged by send/recv")
    if actual is None:
        return TopoCell("?", "#ffffff", True, f"GPU {a} <-> GPU {b}: path unknown")
    fill = PATH_FILL["NV"] if nvlink_count_of_path(actual) else PATH_FILL.get(actual, "#ffffff")
    if a >= run.suite.gpu_count or b >= run.suite.gpu_count:
        return TopoCell(actual, fill, True, f"GPU {a} <-> GPU {b}: {actual}, not in the suite")
    expected = run.suite.expected_path(a, b)
    if path_matches(expected, actual):
        return TopoCell(actual, fill, False, f"GPU {a} <-> GPU {b}: {actual}")
    return TopoCell(f"{actual}≠{expected}", fill, True, f"GPU {a} <-> GPU {b}: {actual}, suite expects {expected}")


@dataclass(frozen=True)
class Sweep:
    """busbw against message size for one collective measured at several sizes (log2 x axis)."""

    op: str
    points: list[tuple[float, float]]  # (size MiB, busbw GB/s)
    floor: float | None


def sweeps(run: Run) -> list[Sweep]:
    by_op: dict[str, list[tuple[float, float]]] = {}
    for m in run.node.measurements.collectives:
        if m.busbw_gbps is not None and m.error is None:
            by_op.setdefault(m.op, []).append((m.size_bytes / (1 << 20), m.busbw_gbps))
    return [
        Sweep(op, sorted(points), run.thresholds.value(f"collectives.{op}.busbw_min_gbps"))
        for op, points in sorted(by_op.items())
        if len(points) > 1
    ]


# Nominal payload rate of one PCIe lane per direction, GB/s: the transfer rate (2.5/5/8/16/32/64 GT/s, PCI-SIG's
# PCI Express Base Specification) after line encoding (8b/10b to Gen2, 128b/130b from Gen3, FLIT at Gen6).
PCIE_LANE_GBPS: dict[int, float] = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# NVLink-C2C between Grace and the GPU: 900 GB/s both directions together, 450 each way (NVIDIA GB200 NVL72 page).
C2C_NOMINAL_GBPS = 450.0
HOST_LINK_CHART_DIRECTIONS: tuple[tuple[str, str, str], ...] = (
    ("h2d", "H2D", "host_link.h2d_min_gbps"),
    ("d2h", "D2H", "host_link.d2h_min_gbps"),
    ("bidir_h2d", "bi H2D", "host_link.bidir_min_gbps"),
    ("bidir_d2h", "bi D2H", "host_link.bidir_min_gbps"),
)


def host_link_scale(run: Run) -> Scale | None:
    """0 .. the SKU's nominal host link per direction: NVLink-C2C on Grace, else PCIe of pcie.generation_min x
    pcie.width_min; None when the threshold set names neither."""
    thresholds = run.thresholds
    floor = thresholds.value("host_link.h2d_min_gbps")
    limit = None if floor is None else float(floor)
    if thresholds.value("c2c.required") is True:
        return Scale(0.0, C2C_NOMINAL_GBPS, limit, True, "NVLink-C2C, 450 GB/s each way")
    gen, width = thresholds.value("pcie.generation_min"), thresholds.value("pcie.width_min")
    if gen not in PCIE_LANE_GBPS or not width:
        return None
    return Scale(0.0, PCIE_LANE_GBPS[gen] * width, limit, True, f"PCIe Gen{gen} x{width} per direction")


@dataclass(frozen=True)
class HostLinkBar:
    """One GPU's figure in one direction, drawn against the scale: ``length`` and ``floor`` are 0..1 of it."""

    gpu: int
    label: str
    length: float
    floor: float | None
    text: str
    fill: str
    flagged: bool  # below its floor, or the GPU's host-link verdict failed, or not measured
    title: str


def host_link_bars(run: Run, scale: Scale, failing: set[int]) -> list[HostLinkBar]:
    """Each GPU's host-link figures (the one judged per direction), GPU by GPU; ``failing``: GPUs whose verdict
    failed."""
    figures = {
        key: None if m.error is not None else m.value
        for key, m in worst_host_links(run.node.measurements.host_link).items()
    }
    gpus = sorted({gpu for gpu, _ in figures})
    bars = []
    for gpu in gpus:
        for direction, label, key in HOST_LINK_CHART_DIRECTIONS:
            if (gpu, direction) not in figures:
                continue
            floor = run.thresholds.value(key)
            bar = _host_link_bar(scale, gpu, label, figures[gpu, direction], (key, floor), failed=gpu in failing)
            bars.append(bar)
    return bars


def _host_link_bar(
    scale: Scale, gpu: int, label: str, value: float | None, floor_of: tuple[str, float | None], *, failed: bool
) -> HostLinkBar:
    key, floor = floor_of
    floor_at = None if floor is None else scale.position(float(floor))
    if value is None:
        return HostLinkBar(gpu, label, 0.0, floor_at, "err", "#d62728", True, f"GPU {gpu} {label}: not measured")
    below = floor is not None and value < float(floor)
    beyond = " (beyond the scale)" if value > scale.high else ""
    title = f"GPU {gpu} {label}: {value:.1f} GB/s{beyond}" + (f", floor {float(floor):g} GB/s ({key})" if floor else "")
    fill = scale.colour(value)
    return HostLinkBar(gpu, label, scale.position(value), floor_at, f"{value:.1f}", fill, below or failed, title)
