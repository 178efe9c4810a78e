"""pytest glue of ``--nvlink-quick``: collect only the fact checks and print one line per failure.

pytest's own terminal output is turned down to nothing through its public options (no header,
no progress letters, no summary sections); its error channels (usage errors, internal errors,
an interrupted session) stay as they are. What is kept and how lines read is ``pytest_nvlink.plugin.quick_rules``.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_nvlink.plugin.outputs import ITEM_LOG_KEY, HoldsRunWeakly, written_lines
from pytest_nvlink.plugin.quick_rules import QUICK_MODULES, failure_line, keeps, summary_line
from pytest_nvlink.plugin.scope import SCOPE_KEY, deselect_own
from pytest_nvlink.record.items import item_result
from pytest_nvlink.record.results import FAIL, PASS, run_verdict
from pytest_nvlink.record.run import Run


def start_quick(config: pytest.Config, run: Run, checks_dir: Path) -> None:
    """Called from the plugin's tryfirst pytest_configure: pytest's reporter, made after it, reads these."""
    config.option.verbose = -2
    config.option.no_header = True
    config.option.no_summary = True
    config.pluginmanager.register(QuickMode(run, checks_dir), "nvlink-quick")


def _kept(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("nvlink")
    if marker is None:
        return True  # the user's own tests in the same session are theirs to choose
    area = str(marker.args[0]) if marker.args else None
    return keeps(area, getattr(item, "originalname", item.name))


class QuickMode(HoldsRunWeakly):
    """Collection limited to the fact checks, and the terminal lines of a health check."""

    def __init__(self, run: Run, checks_dir: Path) -> None:
        super().__init__(run)
        self.checks_dir = checks_dir
        self.failures: list[str] = []
        self.session: pytest.Session | None = None

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        # A measuring check module is never imported (nor torch with it), even when named on the command line.
        name = collection_path.name
        if collection_path.parent == self.checks_dir and name.startswith("test_") and name not in QUICK_MODULES:
            return True
        return None

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        kept = [item for item in items if _kept(item)]
        if len(kept) < len(items):
            ids = {id(item) for item in kept}
            # The quick checks are the quick run's full set: what is left out here is not missing from it.
            deselect_own(config, [item for item in items if id(item) not in ids])
            items[:] = kept

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Generator[None, Any, Any]:
        result = yield
        # No progress letters or words: the failure lines and the summary line are the whole output.
        return (result[0], "", "") if result else result

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self._fail(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._fail(report)

    def _fail(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        name = report.nodeid.rsplit("::", 1)[-1] or "collection"
        self.failures.append(failure_line(self.run.host, name, item_result(report).message))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
        for line in self.lines(config):
            terminalreporter.write_line(line)

    def lines(self, config: pytest.Config) -> list[str]:
        """One line per failure (checks, then files not written) and the summary line."""
        host = self.run.host
        unwritten = [
            failure_line(host, "output", text.removeprefix("pytest-nvlink: "))
            for ok, joined in written_lines(config)
            if not ok
            for text in joined.splitlines()
            if text.startswith("pytest-nvlink: could not")
        ]
        log = config.stash.get(ITEM_LOG_KEY, None)
        items = log.results() if log is not None else []
        scope = config.stash.get(SCOPE_KEY, None)
        verdict = run_verdict(items, scope)
        status = self.session.exitstatus if self.session is not None else pytest.ExitCode.OK
        if verdict == PASS and status != pytest.ExitCode.OK:
            verdict = FAIL  # a failure outside the nvlink checks, or a file not written
        failed = sum(1 for item in items if item.failed)
        line = summary_line(host, verdict, failed, len(items), self.run.suite.name)
        if scope is not None and not scope.complete:
            line += f"; {scope.line()}"  # a quick run of part of the quick checks names what it left out
        return [*self.failures, *unwritten, line]
