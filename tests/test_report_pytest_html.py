"""pytest-html (--html): measured/expected/key columns and the explaining picture on failing rows."""

from __future__ import annotations

import html

import pytest

pytest.importorskip("pytest_html")


def _page(pytester: pytest.Pytester, *args: str) -> str:
    path = pytester.path / "page.html"
    pytester.runpytest("-p", "no:cacheprovider", f"--html={path}", "--self-contained-html", *args)
    # pytest-html 4 keeps the rows as JSON in an attribute: unescape once to read the cells.
    return html.unescape(path.read_text(encoding="utf-8"))


def test_failing_row_has_figures_key_and_heatmap(pytester: pytest.Pytester) -> None:
    page = _page(
        pytester, "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-degraded", "-k", "test_p2p_unidirectional"
    )
    assert "<th>measured</th>" in page and "<th>expected</th>" in page and "<th>key</th>" in page
    cells = '<td>37.2 GB/s</td>", "<td>&gt;= 335.0 GB/s</td>", "<td>h100-sxm.toml:p2p.unidirectional_min_gbps</td>'
    assert cells in page
    # The two failing rows each carry the heatmap; passing rows carry none.
    assert page.count("P2P unidirectional heatmap") == 2


def test_without_a_suite_pytest_html_is_left_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    page = _page(pytester)
    assert "<th>measured</th>" not in page
