"""``--nvlink-report=FILE.html``: one self-contained page (inline CSS and SVG, no scripts, no requests).

Rendered by Jinja2 with autoescaping on, so a message, host name or file path can never become
markup. It opens offline from a ticket attachment and prints on A4.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_nvlink.core.atomic import write_text_atomically
from pytest_nvlink.model import CollectiveMeasurement, Gpu
from pytest_nvlink.record.coverage import coverage_rows, file_coverage
from pytest_nvlink.record.items import ItemResult, collective_outcomes, pair_outcomes
from pytest_nvlink.record.results import Results, source_text
from pytest_nvlink.record.run import Run
from pytest_nvlink.record.unknowns import recorded_unknowns
from pytest_nvlink.report import pictures
from pytest_nvlink.report.terminal import NCCL_ENV_VARS

if TYPE_CHECKING:
    import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"
P2P_KINDS = ("unidirectional", "bidirectional", "latency")


@dataclass(frozen=True)
class Heatmap:
    kind: str
    unit: str
    size: int
    cells: list[pictures.Cell]
    scale: pictures.Scale | None
    worst: str | None


@dataclass(frozen=True)
class HostLinkChart:
    """Every GPU's host-link figures as bars on the SKU's fixed scale."""

    bars: list[pictures.HostLinkBar]
    scale: pictures.Scale
    gpus: int


@dataclass(frozen=True)
class GpuRow:
    index: int
    name: str
    serial: str
    links: str
    speed: str
    errors_run: str
    errors_total: str
    fabric: str
    pcie: str


def environment() -> jinja2.Environment:
    """The Jinja environment of every page (node report, fleet page): autoescaping, strict undefined."""
    import jinja2  # only a run that writes a report pays for the import

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["filename"] = lambda path: Path(str(path)).name
    return env


def render_html(results: Results) -> str:
    return environment().get_template("report.html.j2").render(**report_context(results))


# The picture that explains a failing check's row in pytest-html.
CHECK_PICTURES: dict[str, str] = {
    "test_p2p_unidirectional": "unidirectional",
    "test_p2p_bidirectional": "bidirectional",
    "test_p2p_latency": "latency",
    "test_p2p_path_proof": "unidirectional",
    "test_path": "topology",
    "test_p2p_status": "topology",
    "test_nvlink_active_links": "topology",
    "test_host_link": "host_link",
}


def picture_html(run: Run, check: str, items: Sequence[ItemResult]) -> str | None:
    """The topology table or the heatmap (inline SVG) for ``check``; None when it has none or nothing was measured.

    A heatmap marks the pairs whose verdicts in ``items`` failed."""
    picture = CHECK_PICTURES.get(check)
    if picture is None:
        return None
    macros = environment().get_template("pictures.html.j2").module
    if picture == "topology":
        return str(macros.topology_table(pictures.topology_rows(run))) if run.node.gpus else None  # type: ignore[attr-defined]
    if picture == "host_link":
        chart = host_link_chart(run, items)
        return None if chart is None else str(macros.host_link_chart(chart))  # type: ignore[attr-defined]
    heatmap = _heatmap(run, picture, items)
    return None if heatmap is None else str(macros.heatmap(heatmap))  # type: ignore[attr-defined]


def write_html_report(results: Results, path: Path) -> None:
    write_text_atomically(path, render_html(results))


def report_context(results: Results) -> dict[str, object]:
    run = results.run
    node = run.node
    return {
        "results": results,
        "sections": results.sections,
        "baseline": results.baseline,
        "verdict": results.verdict,
        "suite": run.suite,
        "thresholds": run.thresholds,
        "node": node,
        "host": run.host,
        "source": source_text(run),
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "models": sorted({gpu.name or "unknown model" for gpu in node.gpus}),
        "gpus": [_gpu_row(gpu) for gpu in node.gpus],
        "topology": pictures.topology_rows(run) if node.gpus else [],
        "heatmaps": [h for h in (_heatmap(run, kind, results.items) for kind in P2P_KINDS) if h is not None],
        "host_link_chart": host_link_chart(run, results.items),
        "collectives": collective_rows(node.measurements.collectives, results.items),
        "floors": {
            op: run.thresholds.value(f"collectives.{op}.busbw_min_gbps")
            for op in {m.op for m in node.measurements.collectives}
        },
        "sweeps": pictures.sweeps(run),
        "unknowns": recorded_unknowns(node, run.thresholds),
        "environment": [f"{name}={os.environ[name]}" for name in NCCL_ENV_VARS if name in os.environ],
        "coverage": coverage_rows(node) if node.source == "evidence" else [],
        "evidence_files": file_coverage(node) if node.source == "evidence" else [],
    }


def collective_rows(
    measurements: list[CollectiveMeasurement], items: Sequence[ItemResult]
) -> list[tuple[CollectiveMeasurement, bool]]:
    """Each row, by operation and size, and whether the verdict that judged it failed (as the record says)."""
    judged = collective_outcomes(measurements, items)
    ordered = sorted(measurements, key=lambda m: (m.op, m.size_bytes))
    return [(m, judged.get(id(m)) == "fail") for m in ordered]


def _heatmap(run: Run, kind: str, items: Sequence[ItemResult]) -> Heatmap | None:
    if not any(m.kind == kind for m in run.node.measurements.p2p):
        return None
    scale = pictures.p2p_scale(run, kind)
    if scale is None:  # no line rate in the threshold file: scale to the figures, and say so
        values = [m.value for m in run.node.measurements.p2p if m.kind == kind and m.value is not None]
        scale = pictures.Scale(0.0, max(values, default=1.0), None, kind != "latency", "largest figure (no SKU scale)")
    size = max(run.suite.gpu_count, len(run.node.gpus))
    failing = {pair for pair, outcome in pair_outcomes(items, f"test_p2p_{kind}").items() if outcome == "fail"}
    cells = pictures.heatmap(run, kind, scale, failing)
    return Heatmap(kind, pictures.UNIT[kind], size, cells, scale, pictures.worst(run, kind))


def host_link_chart(run: Run, items: Sequence[ItemResult]) -> HostLinkChart | None:
    """The bar chart of the host-link figures; None when none was recorded."""
    if not run.node.measurements.host_link:
        return None
    scale = pictures.host_link_scale(run)
    if scale is None:  # no nominal in the threshold file: scale to the figures, and say so
        values = [m.value for m in run.node.measurements.host_link if m.value is not None]
        scale = pictures.Scale(0.0, max(values, default=1.0), None, True, "largest figure (no SKU scale)")
    failing = {
        int(item.properties["gpu_index"])
        for item in items
        if item.check == "test_host_link" and item.outcome == "fail" and "gpu_index" in item.properties
    }
    bars = pictures.host_link_bars(run, scale, failing)
    return HostLinkChart(bars, scale, len({bar.gpu for bar in bars}))


def _gpu_row(gpu: Gpu) -> GpuRow:
    links = gpu.nvlinks
    active = "unknown" if links is None else f"{sum(1 for link in links if link.active)} of {len(links)}"
    speeds = sorted({link.speed_gbps for link in links or [] if link.active and link.speed_gbps is not None})
    speed = ", ".join(f"{s:g}" for s in speeds) or "unknown"
    fabric = "n/a" if gpu.fabric is None else f"{gpu.fabric.state}/{gpu.fabric.status or '-'}"
    pcie = f"gen {gpu.pcie_gen_loaded or gpu.pcie_gen_current or '?'} x{gpu.pcie_width_current or '?'}"
    return GpuRow(
        gpu.index,
        gpu.name or "unknown",
        gpu.serial or "unknown",
        active,
        speed,
        _counter_sum(gpu, "errors_run"),
        _counter_sum(gpu, "errors"),
        fabric,
        pcie,
    )


def _counter_sum(gpu: Gpu, attribute: str) -> str:
    """Non-zero counters summed over the GPU's links; "not read" when no link has them."""
    totals: dict[str, int] = {}
    seen = False
    for link in gpu.nvlinks or []:
        counters: dict[str, int] | None = getattr(link, attribute)
        if counters is None:
            continue
        seen = True
        for name, value in counters.items():
            totals[name] = totals.get(name, 0) + value
    if not seen:
        return "not read"
    return ", ".join(f"{name} {value}" for name, value in sorted(totals.items()) if value) or "0"
