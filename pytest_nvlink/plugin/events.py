"""pytest glue for a live run's Xid listening: start it when the run is built, stop it when the session ends.

Only a live run listens (a replay or evidence run reads the events its source recorded), and only the process
that probed the node: under pytest-xdist the controller, whose node the workers are handed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_nvlink.record.run import Run
    from pytest_nvlink.sources.live.events import XidListener  # noqa: F401  (named in the stash key's string)

LISTENER_KEY = pytest.StashKey["XidListener"]()


def start_listening(config: pytest.Config, run: Run) -> None:
    """Listen from now (the node was just probed) to the session's end, for a live run that will judge GPUs."""
    if run.node.source != "live" or run.options.quick or run.gate_only() is not None:
        return
    if hasattr(config, "workerinput"):  # a pytest-xdist worker judges the controller's node
        return
    from pytest_nvlink.sources.live.events import XidListener

    listener = XidListener(run.node)
    listener.start()
    config.stash[LISTENER_KEY] = listener
    config.pluginmanager.register(_StopListening(config), "nvlink-xid-listener")
    config.add_cleanup(lambda: stop_listening(config))


def stop_listening(config: pytest.Config) -> None:
    """Close the window; idempotent (the session's end and the config's cleanup both call it)."""
    listener = config.stash.get(LISTENER_KEY, None)
    if listener is not None:
        del config.stash[LISTENER_KEY]  # the listener holds the node, which must be let go with the run
        listener.stop()


def campaign_hook(config: pytest.Config) -> Callable[[str, float, float], None] | None:
    """Where a live provider notes its campaigns' times, so an Xid can be placed relative to them."""
    listener = config.stash.get(LISTENER_KEY, None)
    return None if listener is None else listener.campaign


class _StopListening:
    """Stops listening first thing at the session's end, before the snapshot and the reports are written."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        stop_listening(self._config)
