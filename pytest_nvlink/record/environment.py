"""What a run was made with: versions, suite, thresholds, outcome, and the conditions of each measurement.

Snapshot schema 2 records these so that a later run can be compared with this one
(``--nvlink-baseline``). Only a live run can tell the versions and conditions of its own
measurements; a replay keeps what its file recorded, evidence records none.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from pytest_nvlink.model import Environment, Node
from pytest_nvlink.sources.live.versions import live_versions

if TYPE_CHECKING:
    from pytest_nvlink.record.run import Run


def p2p_conditions(run: Run, kind: str) -> dict[str, str]:
    measure = run.suite.measure
    if kind == "latency":
        return {"iterations": str(measure.latency_iterations), "pair_mode": measure.pair_mode}
    return {
        "size_mib": str(measure.p2p_size_mib),
        "iterations": str(measure.p2p_iterations),
        "warmup": str(measure.p2p_warmup),
        "pair_mode": measure.pair_mode,
    }


def collective_conditions(run: Run, backend: str | None) -> dict[str, str]:
    measure = run.suite.measure
    found = {"iterations": str(measure.collective_iterations), "warmup": str(measure.collective_warmup)}
    chosen = backend or run.options.backend
    return found | ({"backend": chosen} if chosen else {})


def stamp_conditions(run: Run) -> None:
    """Record the conditions of the live run's own measurements (a replay keeps what its file says)."""
    if run.node.source != "live":
        return
    for p2p in run.node.measurements.p2p:
        if p2p.conditions is None:
            p2p.conditions = p2p_conditions(run, p2p.kind)
    for collective in run.node.measurements.collectives:
        if collective.conditions is None:
            collective.conditions = collective_conditions(run, collective.backend)


def current_environment(run: Run) -> Environment:
    """The environment of this run as far as it is known now (versions grow once torch is loaded)."""
    recorded = run.node.environment
    versions = dict(recorded.versions) if recorded is not None else {}
    if run.node.source == "live":
        versions |= live_versions()
    return Environment(
        versions=versions,
        suite=run.suite.name,
        suite_file=str(run.suite.file),
        thresholds=[str(path) for path in run.thresholds.files],
        outcome=recorded.outcome if recorded is not None else None,
        saved_utc=recorded.saved_utc if recorded is not None else None,
    )


def stamp_environment(run: Run, outcome: str) -> Node:
    """The node as it is saved: environment and measurement conditions recorded, the outcome set
    ("passed" only for a complete run that passed; else "failed", "partial" or "interrupted")."""
    stamp_conditions(run)
    environment = current_environment(run)
    environment.outcome = outcome
    environment.saved_utc = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    run.node.environment = environment
    return run.node
