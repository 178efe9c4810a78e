"""pytest glue for what a run leaves behind: JUnit suite properties, the summary, snapshots, JSON and HTML.

Registered by the plugin only for a run (``--nvlink-suite``), with the run it reports on; the
rendering itself lives in ``pytest_nvlink.report`` and imports nothing from pytest.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.core.placeholders import PlaceholderError, expand
from pytest_nvlink.core.placeholders import check as check_placeholders

if TYPE_CHECKING:
    from pytest_nvlink.model import Node
    from pytest_nvlink.plugin.scope import ScopeTracker
    from pytest_nvlink.record.audit import AuditTally
    from pytest_nvlink.record.items import ItemLog
    from pytest_nvlink.record.results import ReportSection, Results
    from pytest_nvlink.record.run import Given, Run
    from pytest_nvlink.record.scope import RunScope

TALLY_KEY = pytest.StashKey["AuditTally"]()
ITEM_LOG_KEY = pytest.StashKey["ItemLog"]()
OUTPUTS_KEY = pytest.StashKey[list[tuple[str, Path]]]()  # (format, file) of --nvlink-json/--nvlink-report
WRITTEN_KEY = pytest.StashKey[list[tuple[bool, str]]]()
SAVED_KEY = pytest.StashKey[tuple[bool, str]]()
SECTIONS_KEY = pytest.StashKey[list["ReportSection"]]()  # a site's report sections, from its hooks
REQUESTED_KEY = pytest.StashKey[list[tuple[str, str]]]()  # (what, path) of every output asked for
DONE_KEY = pytest.StashKey[set[str]]()  # the paths of the outputs written so far
WHAT_OF = {"json": "results JSON", "report": "HTML report", "metrics": "Prometheus metrics"}
JUNITXML = "--junitxml"


def check_output_templates(config: pytest.Config, setting: Callable[[str], Given | None]) -> None:
    """A bad ``{placeholder}`` in --nvlink-json, --nvlink-report, --nvlink-metrics or --junitxml stops the run early."""
    given = [(g.value, g.label) for g in (setting("json"), setting("report"), setting("metrics")) if g is not None]
    xmlpath = getattr(config.option, "xmlpath", None)
    for template, label in given + ([(str(xmlpath), JUNITXML)] if xmlpath else []):
        try:
            check_placeholders(template, label)
        except PlaceholderError as exc:
            raise ConfigError(str(exc)) from None


def start_outputs(config: pytest.Config, run: Run, setting: Callable[[str], Given | None]) -> None:
    """Expand the output paths (pytest's --junitxml too, before its plugin opens it) and register the writers."""
    from pytest_nvlink.report.outputs import output_targets

    config.stash[OUTPUTS_KEY] = output_targets(setting, run.placeholders)
    xmlpath = getattr(config.option, "xmlpath", None)
    if xmlpath:
        try:
            config.option.xmlpath = expand(str(xmlpath), run.placeholders, JUNITXML)
        except PlaceholderError as exc:
            raise ConfigError(str(exc)) from None
    _check_targets(config, run, setting)
    _start_tally(config)
    from pytest_nvlink.plugin.scope import TRACKER_KEY, ScopeTracker

    tracker = ScopeTracker()
    config.stash[TRACKER_KEY] = tracker
    config.pluginmanager.register(tracker, "nvlink-scope")
    config.pluginmanager.register(_SessionFinishGuard(tracker), "nvlink-session-finish-guard")
    config.pluginmanager.register(SessionOutputs(run), "nvlink-session-outputs")
    config.pluginmanager.register(_LastOfSessionFinish(), "nvlink-last-of-session-finish")
    if getattr(config.option, "htmlpath", None) and config.pluginmanager.hasplugin("html"):
        from pytest_nvlink.report.pytest_html import PytestHtmlColumns

        config.pluginmanager.register(PytestHtmlColumns(), "nvlink-pytest-html")
        config.pluginmanager.register(_HtmlExtras(run), "nvlink-pytest-html-extras")


def _check_targets(config: pytest.Config, run: Run, setting: Callable[[str], Given | None]) -> None:
    """One path, one output; and pytest's own --junitxml writable, before anything runs (pytest finds out after)."""
    from pytest_nvlink.core.atomic import same_target, unwritable_problem

    named = [(_label(setting, name), path) for name, path in config.stash[OUTPUTS_KEY]]
    if run.options.save is not None:
        named.append((run.options.label("save"), run.options.save))
    xmlpath = getattr(config.option, "xmlpath", None)
    if xmlpath:
        named.append((JUNITXML, Path(xmlpath)))
        problem = unwritable_problem(Path(xmlpath))
        if problem is not None:
            raise ConfigError(f"{JUNITXML}: {problem}")
    problem = same_target(named)
    if problem is not None:
        raise ConfigError(problem)


def _label(setting: Callable[[str], Given | None], name: str) -> str:
    given = setting(name)
    return given.label if given is not None else f"--nvlink-{name}"


class _AuditRecorder:
    """Feeds every test report to the run's tally and results record (on an xdist controller too)."""

    def __init__(self, tally: AuditTally, log: ItemLog) -> None:
        self.tally = tally
        self.log = log

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":  # neither reads a teardown: one call fewer each per item
            return
        self.tally.add(report)
        self.log.add(report)


def _start_tally(config: pytest.Config) -> None:
    from pytest_nvlink.record.audit import AuditTally
    from pytest_nvlink.record.items import ItemLog

    tally, log = AuditTally(), ItemLog()
    config.stash[TALLY_KEY] = tally
    config.stash[ITEM_LOG_KEY] = log
    config.pluginmanager.register(_AuditRecorder(tally, log), "nvlink-audit-tally")


class HoldsRunWeakly:
    """A plugin object that reads the run without keeping it alive.

    pluggy keeps every registered plugin for the life of its plugin manager (in the call history of
    ``pytest_plugin_registered``); the session's stash alone owns the run, so that the node (~400,000
    objects at 72 GPUs) can be let go when the session ends.
    """

    def __init__(self, run: Run) -> None:
        self._run = weakref.ref(run)

    @property
    def run(self) -> Run:
        run = self._run()
        if run is None:
            raise RuntimeError("pytest-nvlink: the run was let go when its session ended")
        return run


class SessionOutputs(HoldsRunWeakly):
    """The run's session hooks: JUnit properties at the start; verdict fixes, saves and reports at the end."""

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # The JUnit <testsuite> properties go straight to pytest's LogXML (what record_testsuite_property
        # does): it lives in the controller under pytest-xdist, and no autouse fixture taxes every test.
        from _pytest.junitxml import xml_key

        xml = session.config.stash.get(xml_key, None)
        if xml is not None:
            from pytest_nvlink.report import suite_properties

            for name, value in suite_properties(self.run):
                xml.add_global_property(name, value)

    @pytest.hookimpl(tryfirst=True)  # before pytest's JUnit writer: the run's scope goes into its properties
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        run = self.run
        reason = run.gate_only()
        if reason is not None and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            # "-k topology" on a node that could not be probed selects nothing; that must not read as "no tests".
            if not run.options.quick:  # the quick summary line says it
                session.config.get_terminal_writer().line(f"pytest-nvlink: {reason}", red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        _refuse_empty_audit(session)
        scope = _record_scope(session)
        targets = [run.options.save] if run.options.save is not None else []
        if run.options.save_dir is not None:
            from pytest_nvlink.record.baseline import saved_run_path

            targets.append(saved_run_path(run.options.save_dir, run.node.host))
        session.config.stash[REQUESTED_KEY] = requested_outputs(session.config, targets)
        if targets:
            from pytest_nvlink.record.environment import stamp_environment

            # The outcome is recorded so that a --nvlink-baseline folder offers only complete runs that passed.
            node = stamp_environment(run, _saved_outcome(session, scope))
            for path in targets:
                _save(session, node, path)
        _write_outputs(session, run, scope)

    @pytest.hookimpl(wrapper=True)
    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
    ) -> Generator[None, None, None]:
        yield
        if _lists_only(config) or self.run.options.quick:  # quick mode prints its own lines
            return
        try:
            from pytest_nvlink.report import summary_lines

            terminalreporter.section("pytest-nvlink summary")
            log = config.stash.get(ITEM_LOG_KEY, None)
            items = log.results() if log is not None else None  # the record as fed, not rebuilt from the stats
            for line in summary_lines(self.run, terminalreporter.stats, config.stash.get(TALLY_KEY, None), items):
                terminalreporter.write_line(line)
        except Exception as exc:
            terminalreporter.write_line(f"pytest-nvlink: summary could not be rendered ({exc!r})")
        for section in config.stash.get(SECTIONS_KEY, []):
            terminalreporter.section(section.title, sep="-")
            for line in section.lines:
                terminalreporter.write_line(line)
        _write_scope_line(terminalreporter, config)
        # Last, right above the outcome counts, where a failed save cannot be missed.
        for ok, line in written_lines(config):
            terminalreporter.write_line(line, green=ok, red=not ok)


class _SessionFinishGuard:
    """The outermost ``pytest_sessionfinish`` wrapper: a Ctrl-C (or SIGTERM) while the outputs are written ends
    the run with one line naming the outputs not written, never a traceback; the SIGTERM handler is put back."""

    def __init__(self, tracker: ScopeTracker) -> None:
        self.tracker = tracker

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        try:
            return (yield)
        except KeyboardInterrupt:
            left = unwritten_outputs(session.config)
            shown = "; not written (each is as it was before this run, or incomplete): " + ", ".join(left)
            raise pytest.exit.Exception(
                "pytest-nvlink: interrupted while the outputs were written" + (shown if left else ""),
                returncode=pytest.ExitCode.INTERRUPTED,
            ) from None
        finally:
            self.tracker.restore_signals()


class _LastOfSessionFinish:
    """Runs after every other ``pytest_sessionfinish`` implementation: pytest's JUnit file is written by then."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        xmlpath = getattr(session.config.option, "xmlpath", None)
        if xmlpath:
            session.config.stash.setdefault(DONE_KEY, set()).add(str(xmlpath))


def requested_outputs(config: pytest.Config, saves: list[Path]) -> list[tuple[str, str]]:
    """(what, path) of every output this run was asked for: snapshots, results JSON, HTML report, JUnit."""
    requested = [("snapshot", str(path)) for path in saves]
    requested += [(WHAT_OF[name], str(path)) for name, path in config.stash.get(OUTPUTS_KEY, [])]
    xmlpath = getattr(config.option, "xmlpath", None)
    if xmlpath and not hasattr(config, "workerinput"):
        requested.append(("JUnit XML", str(xmlpath)))
    return requested


def unwritten_outputs(config: pytest.Config) -> list[str]:
    """The outputs asked for and not (yet) written by this run, as "path (what)"."""
    requested = config.stash.get(REQUESTED_KEY, None)
    if requested is None:
        requested = requested_outputs(config, [])
    done = config.stash.get(DONE_KEY, set())
    return [f"{path} ({what})" for what, path in requested if path not in done]


def mark_written(config: pytest.Config, path: Path) -> None:
    config.stash.setdefault(DONE_KEY, set()).add(str(path))


def _record_scope(session: pytest.Session) -> RunScope | None:
    """The run's scope from the tracker, stashed for the quick line and the summary; None under an xdist worker."""
    from pytest_nvlink.plugin.scope import SCOPE_KEY, TRACKER_KEY

    config = session.config
    tracker, tally = config.stash.get(TRACKER_KEY, None), config.stash.get(TALLY_KEY, None)
    if tracker is None or tally is None or hasattr(config, "workerinput"):
        return None
    scope = tracker.scope(session, set(tally.outcomes))
    config.stash[SCOPE_KEY] = scope
    if not scope.complete:
        from _pytest.junitxml import xml_key

        xml = config.stash.get(xml_key, None)
        if xml is not None:
            xml.add_global_property("nvlink_verdict", str(scope.verdict))
            xml.add_global_property("nvlink_left_out", scope.line())
    return scope


def _saved_outcome(session: pytest.Session, scope: RunScope | None) -> str:
    """How the run ended, as its saved snapshot records it: only a complete run that passed says "passed"."""
    if scope is not None and scope.interrupted is not None:
        return "interrupted"
    if session.exitstatus != pytest.ExitCode.OK:
        return "failed"
    return "partial" if scope is not None and not scope.complete else "passed"


def _write_scope_line(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """A run of part of the suite says so where the eye lands, above the outcome counts."""
    from pytest_nvlink.plugin.scope import SCOPE_KEY

    scope = config.stash.get(SCOPE_KEY, None)
    if scope is not None and not scope.complete:
        terminalreporter.write_line(
            f"pytest-nvlink: {scope.line()} (no output of this run says PASS)", yellow=True, bold=True
        )


def written_lines(config: pytest.Config) -> list[tuple[bool, str]]:
    """(ok, line) for every snapshot saved and report written, or not."""
    saved = config.stash.get(SAVED_KEY, None)
    return [*([saved] if saved is not None else []), *config.stash.get(WRITTEN_KEY, [])]


def _lists_only(config: pytest.Config) -> bool:
    """--co, --fixtures and --fixtures-per-test judge nothing: no verdict tables."""
    option = config.option
    return bool(
        getattr(option, "collectonly", False)
        or getattr(option, "showfixtures", False)
        or getattr(option, "show_fixtures_per_test", False)
    )


def _write_outputs(session: pytest.Session, run: Run, scope: RunScope | None = None) -> None:
    """A site's report sections, then the JSON results and the HTML report, all from the one results record."""
    config = session.config
    log, tally = config.stash.get(ITEM_LOG_KEY, None), config.stash.get(TALLY_KEY, None)
    if log is None or tally is None or hasattr(config, "workerinput"):
        return
    from pytest_nvlink.record.results import Results

    results = Results(run, log.results(), tally.line(), tally.counts(), scope=scope)
    written = _add_sections(session, results)
    wanted = config.stash.get(OUTPUTS_KEY, [])
    if wanted:
        from pytest_nvlink.report.outputs import write_outputs

        written += write_outputs(results, wanted, lambda path: mark_written(config, path))
    config.stash[WRITTEN_KEY] = written
    if not all(ok for ok, _ in written):
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


def _add_sections(session: pytest.Session, results: Results) -> list[tuple[bool, str]]:
    """The sections of every ``pytest_nvlink_report_sections`` implementation, onto the record and for the summary.

    Only the sections are stashed, not the record: the stash outlives the session, the run must not.
    """
    hook = session.config.hook.pytest_nvlink_report_sections
    if not hook.get_hookimpls():
        return []
    from pytest_nvlink.record.results import report_sections

    try:
        results.sections = report_sections(hook(results=results))
    except Exception as exc:  # a site's hook must not cost the verdicts and reports
        return [
            (
                False,
                f"pytest-nvlink: could not add the report sections of a pytest_nvlink_report_sections hook: {exc!r}",
            )
        ]
    session.config.stash[SECTIONS_KEY] = results.sections
    return []


def _refuse_empty_audit(session: pytest.Session) -> None:
    """A run whose nvlink checks all went unjudged (no evidence, nothing applies) must not exit 0."""
    tally = session.config.stash.get(TALLY_KEY, None)
    if tally is None or hasattr(session.config, "workerinput"):  # an xdist worker: the controller decides
        return
    # The terminal summary says why (report.audit_lines).
    if tally.judged_nothing() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _save(session: pytest.Session, node: Node, path: Path) -> None:
    from pytest_nvlink.model.document import save_snapshot

    earlier = session.config.stash.get(SAVED_KEY, None)
    try:
        save_snapshot(node, path)
    except OSError as exc:
        line = (False, f"pytest-nvlink: could not save snapshot {path}: {exc}")
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    else:
        mark_written(session.config, path)
        line = (True, f"pytest-nvlink: snapshot saved to {path}")
    # With --nvlink-save and --nvlink-save-dir both lines are shown; a failure keeps the line red.
    if earlier is not None:
        line = (earlier[0] and line[0], f"{earlier[1]}\n{line[1]}")
    session.config.stash[SAVED_KEY] = line


class _HtmlExtras(HoldsRunWeakly):
    """pytest-html: the picture a failing row is about (heatmap or topology) as an extra on that row."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if report.when != "call" or not report.failed or item.get_closest_marker("nvlink") is None:
            return report
        from pytest_nvlink.record.items import item_result
        from pytest_nvlink.report.html import picture_html
        from pytest_nvlink.report.pytest_html import html_extra

        # Marked with the verdicts recorded so far and this row's own: the pairs judged after it are not known yet.
        log = item.config.stash.get(ITEM_LOG_KEY, None)
        judged = [*(log.results() if log is not None else []), item_result(report)]
        picture = picture_html(self.run, item.name.split("[")[0], judged)
        if picture is not None:
            report.extras = [*getattr(report, "extras", []), html_extra(picture)]
        return report
