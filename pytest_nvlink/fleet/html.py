"""``pytest-nvlink fleet --html FILE``: one self-contained fleet page (inline CSS, no scripts).

Rendered with the node report's Jinja environment and CSS, so both pages look alike and escape
alike. The heatmap is a table of nodes x figure families: each cell the node's worst figure,
coloured on a scale fixed around the fleet median (twice the replace percentage either side), so
a slow node stands out however large the fleet; outliers have a red border.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pytest_nvlink.core.atomic import write_text_atomically
from pytest_nvlink.fleet.merge import FAIL, INCOMPLETE, MISSING, PASS, Fleet
from pytest_nvlink.fleet.outliers import Family
from pytest_nvlink.report.html import environment
from pytest_nvlink.report.pictures import Scale, text_colour

NO_FIGURE_FILL = "#eeeeee"


@dataclass(frozen=True)
class HeatCell:
    text: str
    fill: str
    ink: str
    title: str
    flagged: bool


@dataclass(frozen=True)
class HeatRow:
    host: str
    status: str
    cells: list[HeatCell]


def render_fleet_html(fleet: Fleet, fail_on_outliers: bool) -> str:
    template = environment().get_template("fleet.html.j2")
    return template.render(
        fleet=fleet,
        verdict="FAIL" if fleet.exit_status(fail_on_outliers) else "PASS",
        counts=[(status, fleet.count(status)) for status in (PASS, FAIL, INCOMPLETE, MISSING)],
        fail_on_outliers=fail_on_outliers,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        failing_checks=[tally for tally in fleet.checks if tally.failed or tally.errored],
        heatmap=heatmap_rows(fleet),
        scales=[(family, _scale(family, fleet.settings.replace_percent)) for family in fleet.families],
    )


def write_html(fleet: Fleet, path: Path, fail_on_outliers: bool) -> None:
    write_text_atomically(path, render_fleet_html(fleet, fail_on_outliers))


def _scale(family: Family, replace_percent: float) -> Scale:
    values = [figure.value for figure in family.figures.values()]
    reference = family.median if family.median is not None else max(values, default=1.0)
    span = reference * 2 * replace_percent / 100
    if family.higher_is_better:
        return Scale(reference - span, reference, None, True, "fleet median - 2 x replace %")
    return Scale(reference, reference + span, None, False, "fleet median + 2 x replace %")


def heatmap_rows(fleet: Fleet) -> list[HeatRow]:
    flagged = {(outlier.host, outlier.family) for outlier in fleet.outliers}
    scales = {family.name: _scale(family, fleet.settings.replace_percent) for family in fleet.families}
    rows = []
    for node in sorted(fleet.nodes, key=lambda n: n.host):
        cells = []
        for family in fleet.families:
            figure = family.figures.get(node.host)
            if figure is None:
                cells.append(HeatCell("-", NO_FIGURE_FILL, "#000", f"{node.host}: no {family.name} figure", False))
                continue
            fill = scales[family.name].colour(figure.value)
            title = f"{node.host}: {family.name} {figure.value:g} {family.unit} at {figure.where}"
            cells.append(
                HeatCell(f"{figure.value:g}", fill, text_colour(fill), title, (node.host, family.name) in flagged)
            )
        rows.append(HeatRow(node.host, node.status, cells))
    return rows
