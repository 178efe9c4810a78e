"""The results record's baseline section; its text for header, summary, JSON and JUnit; where runs are saved.

Kept apart from ``report.py`` so that each of its renderers calls one function here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_nvlink.record.items import ItemResult
    from pytest_nvlink.record.run import Run

NOT_COMPARED_PROPERTY = "baseline_not_compared"  # judges.baseline: facts the baseline did not record


def saved_run_path(folder: Path, host: str | None) -> Path:
    """``DIR/<host>/<UTC timestamp>.json``; the timestamp sorts as text and has no ':' (Windows shares)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return folder / (host or "unknown-host") / f"{stamp}.json"


def baseline_header_lines(run: Run) -> list[str]:
    """The header's lines on a run's baseline (terminal.header_lines says when there is none)."""
    baseline = run.baseline
    if baseline is None:
        return []
    lines = [f"nvlink baseline: {baseline.file} ({baseline.label()})"]
    if baseline.schema_migrated:
        lines.append("nvlink baseline: schema-1 file (migrated): no versions or measurement conditions recorded")
    if run.options.baseline_any:
        outcome = baseline.node.environment.outcome if baseline.node.environment else None
        lines.append(
            f"nvlink baseline: {run.options.label('baseline-any')}: taken whatever the outcome of the run that "
            f"saved it (recorded: {outcome or 'none'})"
        )
    if baseline.problem:
        lines.append(f"nvlink baseline: cannot compare, every baseline check fails: {baseline.problem}")
    lines += [f"nvlink baseline: {reason}" for _, reason in sorted(baseline.unmatched.items())]
    from pytest_nvlink.judges.baseline_match import environment_changes  # a run without a baseline never needs it

    changes = environment_changes(run.node, baseline)
    lines.append("nvlink changed since the baseline: " + ("; ".join(changes) if changes else "nothing recorded"))
    return lines


@dataclass(frozen=True)
class EnvironmentChange:
    what: str  # "driver", "GPU 3 VBIOS", "nccl", ...
    baseline: str
    now: str

    @property
    def text(self) -> str:
        return f"{self.what} {self.baseline} → {self.now}"


@dataclass(frozen=True)
class BaselineSection:
    """The results record's comparison with ``--nvlink-baseline``: what every renderer says about it."""

    file: str
    host: str | None
    saved_utc: str | None
    driver_version: str | None
    label: str  # "hgx-h100-01 2026-11-20T10:02Z, driver 550.54.15"
    schema_migrated: bool
    problem: str | None  # nothing could be compared: every baseline item failed with it
    unmatched: dict[int, str]  # this run's GPU index -> why it has no baseline (swapped or replaced)
    changes: list[EnvironmentChange]
    improvements: list[tuple[str, str]]  # (node id, "improved: ...") of baseline items that passed better
    not_compared: dict[str, int]  # fact not recorded in the baseline -> GPUs it was not compared on
    failed: list[str]  # node ids of the baseline items that failed (their messages are the deltas)


def baseline_section(run: Run, items: Sequence[ItemResult]) -> BaselineSection | None:
    """Built from the run's baseline and the items' recorded verdicts; None without a baseline."""
    baseline = run.baseline
    if baseline is None:
        return None
    from pytest_nvlink.judges.baseline_match import changed_settings

    not_compared = Counter(
        item.properties[NOT_COMPARED_PROPERTY] for item in items if NOT_COMPARED_PROPERTY in item.properties
    )
    return BaselineSection(
        file=str(baseline.file),
        host=baseline.node.host,
        saved_utc=baseline.saved_utc,
        driver_version=baseline.node.driver_version,
        label=baseline.label(),
        schema_migrated=baseline.schema_migrated,
        problem=baseline.problem,
        unmatched=dict(sorted(baseline.unmatched.items())),
        # Read now, not at start: a campaign has loaded NCCL and torch, whose versions then count.
        changes=[EnvironmentChange(*change) for change in changed_settings(run.node, baseline)],
        improvements=[(item.nodeid, note) for item in items for note in item.improvements],
        not_compared=dict(sorted(not_compared.items())),
        failed=[item.nodeid for item in items if item.area == "baseline" and item.failed],
    )


def baseline_summary_lines(section: BaselineSection | None) -> list[str]:
    if section is None:
        return []
    lines = ["", f"baseline: {section.file} ({section.label})"]
    if section.problem:
        lines.append(f"  not comparable: {section.problem}")
    lines += [f"  {reason}" for reason in section.unmatched.values()]
    changes = "; ".join(change.text for change in section.changes)
    lines.append("  changed since the baseline: " + (changes or "nothing recorded"))
    lines += [
        f"  not recorded in the baseline, so not compared: {what} ({count} GPU(s))"
        for what, count in section.not_compared.items()
    ]
    return lines + [f"  {note}" for _, note in section.improvements]


def baseline_document(section: BaselineSection | None) -> dict[str, Any] | None:
    """The ``baseline`` member of the results JSON (``results.schema.json``)."""
    if section is None:
        return None
    return {
        "file": section.file,
        "host": section.host,
        "saved_utc": section.saved_utc,
        "driver_version": section.driver_version,
        "label": section.label,
        "schema_migrated": section.schema_migrated,
        "problem": section.problem,
        "unmatched_gpus": [{"gpu": index, "reason": reason} for index, reason in section.unmatched.items()],
        "environment_changes": [
            {"what": c.what, "baseline": c.baseline, "now": c.now, "text": c.text} for c in section.changes
        ],
        "improvements": [{"nodeid": nodeid, "text": note} for nodeid, note in section.improvements],
        "not_compared": dict(section.not_compared),
        "failed": list(section.failed),
    }


def baseline_suite_properties(run: Run) -> list[tuple[str, str]]:
    baseline = run.baseline
    if baseline is None:
        return []
    props = [
        ("baseline_file", str(baseline.file)),
        ("baseline_host", baseline.node.host or "unknown"),
        ("baseline_saved_utc", baseline.saved_utc or "unknown"),
        ("baseline_driver_version", baseline.node.driver_version or "unknown"),
    ]
    props += [(f"baseline_unmatched_gpu{index}", reason) for index, reason in sorted(baseline.unmatched.items())]
    if baseline.problem:
        props.append(("baseline_problem", baseline.problem))
    from pytest_nvlink.judges.baseline_match import changed_settings

    changes = [EnvironmentChange(*change) for change in changed_settings(run.node, baseline)]
    return props + [(f"changed_{_name(change.what)}", change.text) for change in changes]


def _name(what: str) -> str:
    """``GPU 3 VBIOS`` -> ``gpu_3_vbios``: the property's name from what changed, never from its values."""
    return "_".join(what.split()).lower()
