"""pytest glue for a live run's measurements: which campaigns the selected checks need, and the provider
that runs them with progress lines on the terminal. Imported only by a live run (or its xdist controller)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_nvlink.measure.provider import LiveMeasurements
    from pytest_nvlink.record.run import Run

# Check areas whose items make the live provider run a measurement campaign.
_CAMPAIGN_OF_AREA = {"bandwidth": "p2p", "collectives": "collectives", "host_link": "host_link"}


def live_provider(config: pytest.Config, run: Run, items: list[pytest.Item] | None = None) -> LiveMeasurements:
    """The live provider; ``items`` (the selected checks) tell it which campaigns to plan, None: every one."""
    from pytest_nvlink.measure.provider import LiveMeasurements

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def progress(line: str) -> None:
        if reporter is None:
            return
        # Measurements run inside a test, where output is captured; progress must reach the terminal now.
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(f"nvlink: {line}")
        else:
            reporter.write_line(f"nvlink: {line}")

    from pytest_nvlink.plugin.events import campaign_hook

    planned = planned_campaigns(items) if items is not None else frozenset({"p2p", "collectives", "host_link"})
    return LiveMeasurements(
        run.node,
        run.suite,
        run.thresholds,
        progress,
        run.options.backend,
        planned=planned,
        campaign_hook=campaign_hook(config),
    )


def planned_campaigns(items: list[pytest.Item]) -> frozenset[str]:
    """The campaigns the selected items (after -k/-m deselection) will make the live provider run."""
    planned = set()
    for item in items:
        marker = item.get_closest_marker("nvlink")
        names = getattr(item, "fixturenames", ())
        if marker is not None and marker.args and ("nvlink_measurements" in names or "nvlink_check" in names):
            planned.add(_CAMPAIGN_OF_AREA.get(str(marker.args[0]), ""))
    return frozenset(planned - {""})
