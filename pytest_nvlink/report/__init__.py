"""Every output of a run, each rendered from one results record (``record.py``).

One module per format: ``terminal`` (header, JUnit suite properties, summary tables),
``json_results`` (``--nvlink-json``), ``html`` (``--nvlink-report``) and ``pytest_html``
(columns and extras when pytest-html is active). The names below are the terminal renderer's,
kept importable from ``pytest_nvlink.report`` for the plugin and for callers of the old module.
"""

from __future__ import annotations

from pytest_nvlink.report.matrices import topology_matrix
from pytest_nvlink.report.terminal import (
    check_table,
    collective_table,
    evidence_coverage,
    header_lines,
    suite_properties,
    summary_lines,
)

__all__ = [
    "check_table",
    "collective_table",
    "evidence_coverage",
    "header_lines",
    "suite_properties",
    "summary_lines",
    "topology_matrix",
]
