"""Writing the files a run asked for (``--nvlink-json``, ``--nvlink-report``, ``--nvlink-metrics``) from one record."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.core.placeholders import PlaceholderError, expand
from pytest_nvlink.record.results import Results
from pytest_nvlink.record.run import Given

WHAT = {"json": "results JSON", "report": "HTML report", "metrics": "Prometheus metrics"}


def write_outputs(
    results: Results, wanted: list[tuple[str, Path]], written: Callable[[Path], None] = lambda path: None
) -> list[tuple[bool, str]]:
    """(written?, line for the terminal) per file; one that fails does not stop the others; ``written`` hears
    of each file as soon as it is whole."""
    from pytest_nvlink.report.html import write_html_report
    from pytest_nvlink.report.json_results import write_results_json

    writers: dict[str, Callable[[Results, Path], None]] = {"json": write_results_json, "report": write_html_report}
    lines = []
    for name, path in wanted:
        if name == "metrics":
            from pytest_nvlink.report.metrics import write_metrics  # prometheus-client only when asked for

            writers["metrics"] = write_metrics
        writer = writers[name]
        try:
            writer(results, path)
        except Exception as exc:  # a report that cannot be written must not hide the verdicts above it
            lines.append((False, f"pytest-nvlink: could not write {WHAT[name]} {path}: {exc!r}"))
        else:
            written(path)
            lines.append((True, f"pytest-nvlink: {WHAT[name]} written to {path}"))
    return lines


def output_targets(setting: Callable[[str], Given | None], values: Mapping[str, str]) -> list[tuple[str, Path]]:
    """(format, file) for ``--nvlink-json``, ``--nvlink-report`` and ``--nvlink-metrics``, ``{host}``/``{date}``
    expanded, checked before anything runs."""
    from pytest_nvlink.model.document import SnapshotError, check_writable

    wanted = []
    for name in WHAT:
        given = setting(name)
        if given is None:
            continue
        if not given.value:
            raise ConfigError(f"{given.label}: empty; give a file name")
        try:
            path = Path(expand(given.value, values, given.label))
        except PlaceholderError as exc:
            raise ConfigError(str(exc)) from None
        try:
            check_writable(path)
        except SnapshotError as exc:
            raise ConfigError(f"{given.label}: {exc}") from None
        wanted.append((name, path))
    return wanted
