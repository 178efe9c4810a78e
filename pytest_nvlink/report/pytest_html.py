"""pytest-html (``--html``): measured, expected and the threshold or suite key as result-table columns.

Registered by the plugin only when pytest-html is loaded, through its documented hooks
``pytest_html_results_table_header`` and ``pytest_html_results_table_row``
(https://pytest-html.readthedocs.io/en/latest/user_guide.html#modifying-the-results-table).
Cells are HTML strings there, so every value is escaped. A failing row also gets the picture it
is about (heatmap or topology table, inline SVG/HTML) as an ``html`` extra.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from pytest_nvlink.record.items import item_result

COLUMNS: tuple[str, ...] = ("measured", "expected", "key")


class PytestHtmlColumns:
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells[2:2] = [f"<th>{name}</th>" for name in COLUMNS]

    def pytest_html_results_table_row(self, report: Any, cells: list[str]) -> None:
        cells[2:2] = [f"<td>{escape(value)}</td>" for value in row_values(report)]


def row_values(report: Any) -> tuple[str, str, str]:
    """measured (with unit), expected, and ``file:key`` of the expectation; empty for a non-nvlink test."""
    props = item_result(report).properties
    unit = props.get("unit", "")
    measured = props.get("measured", "")
    key = ""
    if "threshold_key" in props:
        key = f"{Path(props.get('threshold_file', '')).name}:{props['threshold_key']}"
    elif "suite_key" in props:
        key = f"{Path(props.get('suite_file', '')).name}:{props['suite_key']}"
    expected = props.get("expected", "")
    return (f"{measured} {unit}".strip(), f"{expected} {unit}".strip() if expected else "", key)


def html_extra(content: str) -> dict[str, Any]:
    """What ``pytest_html.extras.html(content)`` returns, built here so pytest-html stays optional."""
    return {"name": "HTML", "format_type": "html", "content": content, "mime_type": None, "extension": None}
