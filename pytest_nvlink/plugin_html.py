"""pytest-html glue: the picture a failing row is about (heatmap or topology) as an extra on that row.

Registered only for a run written with ``--html`` and pytest-html installed.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_nvlink.run import Run


class HtmlExtras:
    """Renders each check's picture once and attaches it to that check's failing rows."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.rendered: dict[str, str | None] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if report.when != "call" or not report.failed or item.get_closest_marker("nvlink") is None:
            return report
        from pytest_nvlink.report.pytest_html import html_extra

        check = item.name.split("[")[0]
        if check not in self.rendered:
            from pytest_nvlink.report.html import picture_html

            self.rendered[check] = picture_html(self.run, check)
        picture = self.rendered[check]
        if picture is not None:
            report.extras = [*getattr(report, "extras", []), html_extra(picture)]
        return report
