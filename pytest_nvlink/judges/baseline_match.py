"""The node's own last known good run (``--nvlink-baseline``): finding it, matching GPUs, listing changes.

What is a usage error and what is a failure:

- The option cannot be used as given (no such path, not a snapshot, a schema this plugin does not
  read, a folder without a passing run of this host): :class:`ConfigError`, the run stops.
- The baseline reads but cannot be compared with this node (another host or suite, no GPU that
  matches by UUID or serial): every baseline item fails with that reason (fail closed).
- A GPU without a match (swapped): its items fail with "no baseline for it"; the others compare.

GPUs are matched by UUID, then serial, never by index: NVML's numbering follows PCI order, and a
swapped board keeps the slot but not the identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_nvlink.config.settings import BASELINE_TOLERANCE_KEYS, ConfigError
from pytest_nvlink.model import Environment, Gpu, Node
from pytest_nvlink.model.document import SnapshotError, load_snapshot_document
from pytest_nvlink.record.environment import VERSION_NAMES, current_environment

if TYPE_CHECKING:
    from pytest_nvlink.plugin.run import Run


@dataclass
class Baseline:
    node: Node
    file: Path
    saved_utc: str | None
    schema_migrated: bool  # read from a schema-1 file: no environment or conditions recorded
    gpu_map: dict[int, int] = field(default_factory=dict)  # this run's GPU index -> baseline GPU index
    unmatched: dict[int, str] = field(default_factory=dict)  # this run's GPU index -> why it has no baseline
    problem: str | None = None  # set when nothing can be compared: every baseline item fails with it

    def label(self) -> str:
        """``hgx-h100-01 2026-11-20T10:02Z, driver 550.54.15``: which run the figures come from."""
        when = self.saved_utc or "time not recorded"
        if len(when) == len("2026-11-20T10:02:00Z") and when.endswith("Z"):
            when = when[:16] + "Z"  # minutes are enough to tell runs apart in a sentence
        return f"{self.node.host or 'unknown host'} {when}, driver {self.node.driver_version or 'unknown'}"


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
    created = document.get("created_utc")
    baseline = Baseline(
        node=node,
        file=path,
        saved_utc=node.environment.saved_utc if node.environment else (created if isinstance(created, str) else None),
        schema_migrated=document.get("schema_version") == 1,
    )
    match_gpus(run.node, baseline)
    baseline.problem = _whole_problem(run, baseline)
    run.baseline = baseline


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


def _identity(gpu: Gpu) -> str:
    return f"serial {gpu.serial}" if gpu.serial else f"UUID {gpu.uuid or 'unknown'}"


def match_gpus(node: Node, baseline: Baseline) -> None:
    """Pair this run's GPUs with the baseline's by UUID, then serial; the rest are reported unmatched."""
    for gpu in node.gpus:
        found = next((old for old in baseline.node.gpus if gpu.uuid and old.uuid == gpu.uuid), None)
        found = found or next((old for old in baseline.node.gpus if gpu.serial and old.serial == gpu.serial), None)
        if found is not None:
            baseline.gpu_map[gpu.index] = found.index
            continue
        if not gpu.uuid and not gpu.serial:
            baseline.unmatched[gpu.index] = (
                f"GPU {gpu.index}: this run recorded neither UUID nor serial, so it cannot be matched to the baseline"
            )
            continue
        same_slot = baseline.node.gpu(gpu.index)
        was = f"was {_identity(same_slot)}, " if same_slot is not None else "is new, "
        baseline.unmatched[gpu.index] = (
            f"GPU {gpu.index} {was}now {_identity(gpu)}: no baseline for it (swapped or replaced GPU; "
            "save a new baseline once it is accepted)"
        )


def _whole_problem(run: Run, baseline: Baseline) -> str | None:
    old, new = baseline.node, run.node
    if old.host and new.host and old.host != new.host:
        return f"the baseline {baseline.file} is of host {old.host}, this run is of host {new.host}"
    suite = old.environment.suite if old.environment else None
    if suite is not None and suite != run.suite.name:
        return f"the baseline {baseline.file} was judged against suite {suite}, this run against {run.suite.name}"
    if new.gpus and not baseline.gpu_map:
        return f"no GPU of this run matches a GPU of the baseline {baseline.file} by UUID or serial"
    return None


def environment_changes(run: Run, baseline: Baseline) -> list[str]:
    """``driver 550.54.15 → 560.35.03`` per version or setting that differs; unknown on either side: left out."""
    return [f"{name} {old} → {new}" for name, old, new in changed_settings(run, baseline)]


def changed_settings(run: Run, baseline: Baseline) -> list[tuple[str, str, str]]:
    """(what, baseline value, this run's value) per version or setting that differs, known on both sides."""
    old_env = baseline.node.environment or Environment()
    new_env = current_environment(run)
    pairs: list[tuple[str, str | None, str | None]] = [
        ("driver", baseline.node.driver_version, run.node.driver_version),
        ("CUDA driver", baseline.node.cuda_driver_version, run.node.cuda_driver_version),
    ]
    pairs += [(name, old_env.versions.get(name), new_env.versions.get(name)) for name in VERSION_NAMES]
    for index, old_index in sorted(baseline.gpu_map.items()):
        old_gpu, new_gpu = baseline.node.gpu(old_index), run.node.gpu(index)
        pairs.append((f"GPU {index} VBIOS", old_gpu.vbios if old_gpu else None, new_gpu.vbios if new_gpu else None))
    pairs += [
        ("suite", old_env.suite, new_env.suite),
        ("thresholds", _names(old_env.thresholds), _names(new_env.thresholds)),
    ]
    return [(name, old, new) for name, old, new in pairs if old is not None and new is not None and old != new]


def _names(files: list[str]) -> str | None:
    return ", ".join(Path(f).name for f in files) if files else None


def changes_text(run: Run, baseline: Baseline) -> str:
    changes = environment_changes(run, baseline)
    return "changed since: " + "; ".join(changes) if changes else "no version change recorded"
