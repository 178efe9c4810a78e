"""The hooks pytest-nvlink calls, for a site's conftest.py or plugin: its own checks and report fields.

Registered by ``pytest_addhooks`` on every run, so a conftest that implements them also loads in a
run without ``--nvlink-suite`` (where none is ever called). Implement them like pytest's own hooks,
by name, in a ``conftest.py`` or a plugin; nothing from pytest-nvlink needs to be imported. This
module imports pytest only: it is loaded by every pytest run that has the plugin installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_nvlink.record.results import Results
    from pytest_nvlink.verdict import Verdict

hookspec = pytest.hookspec


@hookspec
def pytest_nvlink_verdict(item: pytest.Item, verdict: Verdict) -> None:
    """Called once for each verdict an nvlink check hands to ``nvlink_judge``, right after it is recorded.

    Called inside the check's own call (in the pytest-xdist worker that runs it), after the verdict's
    outcome, message and properties are on ``item.user_properties`` and before the item passes, fails
    or is skipped by it. ``verdict`` is a ``pytest_nvlink.verdict.Verdict``: ``outcome`` (an ``Outcome``
    whose ``value`` is "pass", "fail", "no_evidence" or "not_applicable"), ``message``, ``properties``
    (the JUnit (name, value) pairs: measured, expected, unit, threshold key and file) and ``ok``.

    A site adds its own check here: calling ``pytest.fail("why")`` fails the item even when the verdict
    passed (its message replaces the verdict's in pytest's report; the results record keeps the
    verdict's own outcome and message, and the run's verdict is FAIL). Appending ``(name, value)`` to
    ``item.user_properties`` adds a JUnit property, also kept in the item's ``properties`` of the
    results JSON. The return value is ignored.
    """


@hookspec
def pytest_nvlink_report_sections(results: Results) -> list[tuple[str, list[str]]] | None:
    """Called once per run, when the session finishes, for extra sections of the run's reports.

    Called in the process that writes the reports (the pytest-xdist controller, never a worker),
    after every item has reported and before the terminal summary, ``--nvlink-json`` and
    ``--nvlink-report`` are written; also with ``--nvlink-quick``, whose terminal output prints no
    section. ``results`` is the results record every report is rendered from: ``results.verdict``
    ("PASS", "FAIL" or "INCOMPLETE"), ``results.items`` (each item's ``nodeid``, ``check``, ``area``,
    ``outcome``, ``pytest_outcome``, ``message`` and ``properties``), ``results.run.node`` (the probed
    node and its measurements), ``results.run.suite`` and ``results.run.thresholds``.

    Return a list of ``(title, lines)`` sections (a title string and a list of line strings), or None
    for none. Every implementation's sections are kept, in pytest's hook order: each is printed under
    its title at the end of the pytest-nvlink summary, listed under ``"sections"`` in the results JSON
    (a key present only when some section is) and shown in the HTML report. A hook that raises, or
    returns anything else, is reported in red at the end of the summary and makes the run exit 3
    (internal error); the reports are written without its sections.
    """
