"""Reading ``--nvlink-baseline``: a snapshot file, or the newest passing run of this host in a folder.

The option cannot be used as given (no such path, not a snapshot, a schema this plugin does not read,
a folder without a passing run of this host, a tolerance key neither set nor waived): a
:class:`ConfigError`, and the run stops before anything is judged.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pytest_nvlink.config.thresholds import BASELINE_TOLERANCE_KEYS
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.judges.baseline_match import Baseline, match_gpus, whole_problem
from pytest_nvlink.model.document import SnapshotError
from pytest_nvlink.record.environment import current_environment
from pytest_nvlink.record.run import Run, RunOptions
from pytest_nvlink.sources.snapshot.file import load_snapshot_document


def attach_baseline(run: Run) -> None:
    """Read ``--nvlink-baseline`` (a file, or the newest passing run of this host in a folder)."""
    options = run.options
    assert options.baseline is not None
    label = options.label("baseline")
    missing = [
        key for key in BASELINE_TOLERANCE_KEYS if run.thresholds.get(key) is None and not run.thresholds.waiver(key)
    ]
    if missing:
        raise ConfigError(
            f"{run.thresholds.files[-1]}:{missing[0]}: required key missing ({label} compares figures with a "
            f"tolerance; threshold set {run.thresholds.describe()} neither sets nor waives "
            f"{', '.join(missing)})"
        )
    path = _baseline_file(options.baseline, run.node.host, label)
    try:
        node, document = load_snapshot_document(path)
    except SnapshotError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    if path == options.baseline:  # a file given as such: a folder offers only complete passing runs already
        _refuse_unproven(node.environment.outcome if node.environment else None, path, options)
    created = document.get("created_utc")
    baseline = Baseline(
        node=node,
        file=path,
        saved_utc=node.environment.saved_utc if node.environment else (created if isinstance(created, str) else None),
        schema_migrated=document.get("schema_version") == 1,
    )
    baseline.environment_now = functools.partial(current_environment, run)
    match_gpus(run.node, baseline)
    baseline.problem = whole_problem(run.node, run.suite.name, baseline)
    run.baseline = baseline


def _refuse_unproven(outcome: str | None, path: Path, options: RunOptions) -> None:
    """A snapshot saved by a run that failed, was partial or interrupted is no known good, unless the user opts in.

    A file that records no outcome (schema 1, a shipped example, ``--nvlink-save`` of old) is taken as given."""
    if outcome in (None, "passed") or options.baseline_any:
        return
    raise ConfigError(
        f"{options.label('baseline')}: {path} was saved by a run that {_ENDED.get(outcome, f'ended {outcome!r}')}, "
        "so it is no last known good; give a complete passing run's snapshot, or add --nvlink-baseline-any "
        "to compare with it anyway"
    )


_ENDED = {"failed": "failed", "partial": "ran only part of its suite", "interrupted": "was interrupted"}


def _baseline_file(given: Path, host: str | None, label: str) -> Path:
    if given.is_file():
        return given
    if not given.exists():
        raise ConfigError(f"{label}: {given}: not found (expected a snapshot or a --nvlink-save-dir folder)")
    if not given.is_dir():
        raise ConfigError(f"{label}: {given} is not a regular file or folder")
    if host is None:
        raise ConfigError(f"{label}: {given} is a folder, but this run's host name is unknown; give the snapshot file")
    return newest_passing_run(given / host, label)


def newest_passing_run(folder: Path, label: str) -> Path:
    """The newest snapshot under ``folder`` saved by a run that passed (schema 2 records the outcome)."""
    candidates: list[tuple[str, Path]] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            node, document = load_snapshot_document(path)
        except SnapshotError as exc:
            raise ConfigError(f"{label}: {exc} (leave only saved runs in the folder)") from None
        environment = node.environment
        if environment is not None and environment.outcome == "passed":
            candidates.append((environment.saved_utc or str(document.get("created_utc", "")), path))
    if not candidates:
        raise ConfigError(
            f"{label}: {folder} holds no snapshot of a passing run (saved with --nvlink-save-dir); "
            "save a run that passes first, or give a snapshot file"
        )
    return max(candidates)[1]
