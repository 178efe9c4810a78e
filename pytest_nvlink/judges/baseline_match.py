"""The node's own last known good run (``--nvlink-baseline``): matching its GPUs, listing what changed.

The plugin reads the baseline (:mod:`pytest_nvlink.plugin.baseline`); what follows is judged here:

- The baseline reads but cannot be compared with this node (another host or suite, no GPU that
  matches by UUID or serial): every baseline item fails with that reason (fail closed).
- A GPU without a match (swapped): its items fail with "no baseline for it"; the others compare.

GPUs are matched by UUID, then serial, never by index: NVML's numbering follows PCI order, and a
swapped board keeps the slot but not the identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_nvlink.model import VERSION_NAMES, Environment, Gpu, Node


@dataclass
class Baseline:
    """The baseline's node and file, and how this run's GPUs match its GPUs."""

    node: Node
    file: Path
    saved_utc: str | None
    schema_migrated: bool  # read from a schema-1 file: no environment or conditions recorded
    gpu_map: dict[int, int] = field(default_factory=dict)  # this run's GPU index -> baseline GPU index
    unmatched: dict[int, str] = field(default_factory=dict)  # this run's GPU index -> why it has no baseline
    problem: str | None = None  # set when nothing can be compared: every baseline item fails with it
    # This run's environment as known when asked: its versions grow once a campaign has loaded torch.
    environment_now: Callable[[], Environment] = Environment

    def label(self) -> str:
        """``hgx-h100-01 2026-11-20T10:02Z, driver 550.54.15``: which run the figures come from."""
        when = self.saved_utc or "time not recorded"
        if len(when) == len("2026-11-20T10:02:00Z") and when.endswith("Z"):
            when = when[:16] + "Z"  # minutes are enough to tell runs apart in a sentence
        return f"{self.node.host or 'unknown host'} {when}, driver {self.node.driver_version or 'unknown'}"


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


def whole_problem(new: Node, suite: str, baseline: Baseline) -> str | None:
    """Why nothing of ``new`` (judged against ``suite``) can be compared with the baseline; None if it can."""
    old = baseline.node
    if old.host and new.host and old.host != new.host:
        return f"the baseline {baseline.file} is of host {old.host}, this run is of host {new.host}"
    then = old.environment.suite if old.environment else None
    if then is not None and then != suite:
        return f"the baseline {baseline.file} was judged against suite {then}, this run against {suite}"
    if new.gpus and not baseline.gpu_map:
        return f"no GPU of this run matches a GPU of the baseline {baseline.file} by UUID or serial"
    return None


def environment_changes(node: Node, baseline: Baseline) -> list[str]:
    """``driver 550.54.15 → 560.35.03`` per version or setting that differs; unknown on either side: left out."""
    return [f"{name} {old} → {new}" for name, old, new in changed_settings(node, baseline)]


def changed_settings(node: Node, baseline: Baseline) -> list[tuple[str, str, str]]:
    """(what, baseline value, this run's value) per version or setting that differs, known on both sides."""
    old_env = baseline.node.environment or Environment()
    new_env = baseline.environment_now()
    pairs: list[tuple[str, str | None, str | None]] = [
        ("driver", baseline.node.driver_version, node.driver_version),
        ("CUDA driver", baseline.node.cuda_driver_version, node.cuda_driver_version),
    ]
    pairs += [(name, old_env.versions.get(name), new_env.versions.get(name)) for name in VERSION_NAMES]
    for index, old_index in sorted(baseline.gpu_map.items()):
        old_gpu, new_gpu = baseline.node.gpu(old_index), node.gpu(index)
        pairs.append((f"GPU {index} VBIOS", old_gpu.vbios if old_gpu else None, new_gpu.vbios if new_gpu else None))
    pairs += [
        ("suite", old_env.suite, new_env.suite),
        ("thresholds", _names(old_env.thresholds), _names(new_env.thresholds)),
    ]
    return [(name, old, new) for name, old, new in pairs if old is not None and new is not None and old != new]


def _names(files: list[str]) -> str | None:
    return ", ".join(Path(f).name for f in files) if files else None


def changes_text(node: Node, baseline: Baseline) -> str:
    changes = environment_changes(node, baseline)
    return "changed since: " + "; ".join(changes) if changes else "no version change recorded"
