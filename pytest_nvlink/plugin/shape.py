"""pytest glue for the suite's shape: which shipped checks exist for a run, and their parameters.

Registered only for a run (``--nvlink-suite``). A check that does not exist for the suite's shape
(rack checks on one host, baseline checks without ``--nvlink-baseline``, pair checks on one GPU) is
not collected; the header names what was left out and why. Every other check is parametrized by the
suite's expectation (a missing GPU must fail, not vanish).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_nvlink.plugin.kit import CHECKS_DIR, run_of, unknown_is
from pytest_nvlink.record.run import Run, baseline_not_collected, mig_not_collected, not_collected

# Shipped check modules whose checks all carry one area (their pytestmark): absent, the module is not collected.
WHOLE_MODULE_AREAS: dict[str, str] = {
    "test_baseline.py": "baseline",
    "test_collectives.py": "collectives",
    "test_rack.py": "rack",
}


class _AbsentChecks(pytest.File):
    """A shipped check module none of whose checks exist for this run (the header says why): collects nothing."""

    def collect(self) -> list[pytest.Item]:
        return []


class ShapeFilter:
    """Collection hooks registered only for a run, so that the inert plugin adds no hook call per test."""

    def __init__(self) -> None:
        self._absent: dict[str, str] | None = None

    def absent(self, run: Run) -> dict[str, str]:
        """The checks this suite and run leave out, keyed by fixture name or ``area:<marker area>``."""
        if self._absent is None:
            self._absent = not_collected(run.suite) | baseline_not_collected(run) | mig_not_collected(run)
        return self._absent

    def pytest_pycollect_makemodule(self, module_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        # Stable node ids ("nvlink/test_topology.py::...") whatever the venv or checkout location. The module
        # hangs from the session, not from the directories pytest walked down to reach site-packages (a dozen
        # in a venv): every item's set-up, markers, keywords and reports walk its chain of parents again.
        if module_path.parent != CHECKS_DIR:
            return None
        kind: type[pytest.File] = pytest.Module
        area = WHOLE_MODULE_AREAS.get(module_path.name)
        run = run_of(parent.config)
        if area is not None and run is not None and f"area:{area}" in self.absent(run):
            kind = _AbsentChecks  # every check of it would be dropped: neither it nor its judges are imported
        return kind.from_parent(
            parent.session, path=module_path, nodeid=f"nvlink/{module_path.name}", name=module_path.name
        )

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        run = run_of(metafunc.config)
        # A check makeitem will drop is left as one item, not one per GPU or pair made only to be dropped.
        if run is not None and not _belongs_to(metafunc.definition, self.absent(run)):
            _parametrize(metafunc, run)

    @pytest.hookimpl(wrapper=True)
    def pytest_pycollect_makeitem(self, collector: pytest.Collector) -> Generator[None, Any, Any]:
        result = yield
        run = run_of(collector.config)
        if run is None or not isinstance(result, list):
            return result
        # A one-GPU suite has no pairs and an empty collective list has no collectives: those checks do not
        # exist for this suite (the header says so), rather than appearing as skips or errors.
        absent = self.absent(run)
        return [item for item in result if not _belongs_to(item, absent)]


def _parametrize(metafunc: pytest.Metafunc, run: Run) -> None:
    from pytest_nvlink.plugin.pairs import PAIR_FIXTURES

    for name in ("nvlink_gpu_index", *PAIR_FIXTURES, "nvlink_collective", "nvlink_tray"):
        if name not in metafunc.fixturenames:
            continue  # each set is worked out only for the checks that take it
        values, ids = _param_values(run, name)
        # An empty set (one GPU: no pairs; no collectives listed) is left alone: makeitem drops the item.
        if values:
            metafunc.parametrize(name, values, ids=ids)


def _param_values(run: Run, name: str) -> tuple[list[Any], list[str]]:
    """Values and ids of a fixture the run parametrizes, by the suite's expectation, not by what was found:
    a missing GPU must fail, not vanish."""
    from pytest_nvlink.model import gpu_id
    from pytest_nvlink.plugin.pairs import PAIR_FIXTURES, pair_params

    count = run.suite.gpu_count
    if name == "nvlink_gpu_index":
        return list(range(count)), [gpu_id(i) for i in range(count)]
    if name in PAIR_FIXTURES:
        return pair_params(run.suite, name, unknown_is(run.node.source))
    if name == "nvlink_collective":
        return list(run.suite.measure.collectives), list(run.suite.measure.collectives)
    if name != "nvlink_tray":
        raise ValueError(f"{name} is not a fixture the run parametrizes")
    trays = count // run.suite.gpus_per_host if run.suite.gpus_per_host else 0  # hosts of a rack suite
    return list(range(trays)), [f"tray{t}" for t in range(trays)]


def _belongs_to(item: object, absent: dict[str, str]) -> bool:
    if not isinstance(item, pytest.Function):
        return False
    marker = item.get_closest_marker("nvlink")
    area = f"area:{marker.args[0]}" if marker is not None and marker.args else None
    return any(name in absent for name in (*item.fixturenames, area))
