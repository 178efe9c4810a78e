"""pytest glue of a run's scope (``record.scope``): the nvlink checks collected, deselected, never run; interruptions.

The full set is every nvlink check collected for this run (the quick checks in ``--nvlink-quick``),
less only what the plugin itself leaves out on purpose; whatever a user's selection deselects
(``pytest_deselected``: ``-k``, ``-m``, ``--deselect``, ``--lf``), whatever never ran after ``-x``,
``--maxfail`` or an interruption, is left out of it, and the record says PARTIAL or INTERRUPTED.

SIGTERM (Slurm's time limit, ``kubectl delete``) is taken like Ctrl-C while the session runs, so the
record of a killed run says so; the handler is installed only in the main thread, and put back
when the session ends.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import pytest

from pytest_nvlink.record.scope import Interruption, RunScope

SCOPE_KEY = pytest.StashKey[RunScope]()
TRACKER_KEY = pytest.StashKey["ScopeTracker"]()
OWN_DESELECTION_KEY = pytest.StashKey[bool]()  # on an item the plugin itself left out (quick mode, gate only)
WORKEROUTPUT_KEY = "nvlink_selection"  # a pytest-xdist worker's selection, for the controller


def deselect_own(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect ``items`` for the plugin's own reasons: they are not part of the run's full set."""
    for item in items:
        item.stash[OWN_DESELECTION_KEY] = True
    config.hook.pytest_deselected(items=items)


def _is_check(item: pytest.Item) -> bool:
    return "nvlink" in item.keywords


class ScopeTracker:
    """Feeds the run's scope: its selection at collection, the check running, and how the session ended."""

    def __init__(self) -> None:
        self.selected: list[str] = []
        self.deselected: list[str] = []
        self.running: str | None = None
        self.stop_message: str | None = None  # a session stopped by pytest itself (-x under pytest-xdist)
        self.stopped_by: str | None = None  # "SIGTERM" once our handler has run
        self._previous: Any = None
        self._installed = False

    # --- selection -------------------------------------------------------------------------------

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        own = OWN_DESELECTION_KEY
        self.deselected += [item.nodeid for item in items if _is_check(item) and not item.stash.get(own, False)]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected = [item.nodeid for item in session.items if _is_check(item)]
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[WORKEROUTPUT_KEY] = {
                "selected": self.selected,
                "deselected": self.deselected,
                "modules_skipped": _modules_skipped_by_lf(session.config),
            }

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """pytest-xdist controller: it collects nothing; every worker collected the same selection."""
        sent = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY)
        if sent and not self.selected:
            self.selected, self.deselected = list(sent["selected"]), list(sent["deselected"])
            self._worker_skipped = int(sent["modules_skipped"])

    # --- where the run is ------------------------------------------------------------------------

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.running = nodeid

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if self.running == nodeid:
            self.running = None

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        if type(excinfo.value).__name__ == "Interrupted" and self.stopped_by is None:
            # Not a signal: pytest's and pytest-xdist's own Interrupted (a controller ends a -x/--maxfail session so).
            self.stop_message = str(excinfo.value)
            return
        if self.stopped_by is None:
            self.stopped_by = "SIGINT (Ctrl-C)" if excinfo.errisinstance(KeyboardInterrupt) else "pytest.exit"

    # --- SIGTERM as Ctrl-C -----------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._installed = True

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.stopped_by = "SIGTERM"
        raise KeyboardInterrupt("SIGTERM")

    def restore_signals(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def pytest_unconfigure(self) -> None:
        self.restore_signals()  # a session that never finished (a usage error in collection) puts it back too

    # --- the end ---------------------------------------------------------------------------------

    def scope(self, session: pytest.Session, ran: set[str]) -> RunScope:
        interrupted = None
        if session.exitstatus == pytest.ExitCode.INTERRUPTED and not (self.stop_message and self.stopped_by is None):
            interrupted = Interruption(self.stopped_by or "SIGINT (Ctrl-C)", self.running)
        selected = dict.fromkeys(self.selected)
        skipped = getattr(self, "_worker_skipped", 0) or _modules_skipped_by_lf(session.config)
        stop = session.shouldfail or session.shouldstop or self.stop_message
        return RunScope(
            full=len(selected) + len(self.deselected),
            deselected=list(self.deselected),
            not_run=[nodeid for nodeid in selected if nodeid not in ran],
            stopped_by=stop if isinstance(stop, str) else None,
            modules_skipped=skipped,
            interrupted=interrupted,
        )


def _modules_skipped_by_lf(config: pytest.Config) -> int:
    """Test files ``--lf`` did not collect at all (pytest counts them only on its last-failed plugin)."""
    plugin = config.pluginmanager.get_plugin("lfplugin")
    if plugin is None or not getattr(plugin, "active", False):
        return 0
    return int(getattr(plugin, "_skipped_files", 0) or 0)
