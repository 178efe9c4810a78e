"""Baseline text for the header, the summary and the JUnit suite properties, and where runs are saved.

Kept apart from ``report.py`` so that each of its renderers calls one function here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_nvlink.baseline import environment_changes

if TYPE_CHECKING:
    from pytest_nvlink.run import Run

NOT_COLLECTED = "baseline checks (test_baseline_*): no --nvlink-baseline given"


def baseline_not_collected(run: Run) -> dict[str, str]:
    """The baseline checks exist only when a baseline is given (keyed as run.not_collected keys them)."""
    return {} if run.options.baseline is not None else {"area:baseline": NOT_COLLECTED}


def saved_run_path(folder: Path, host: str | None) -> Path:
    """``DIR/<host>/<UTC timestamp>.json``; the timestamp sorts as text and has no ':' (Windows shares)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return folder / (host or "unknown-host") / f"{stamp}.json"


def baseline_header_lines(run: Run) -> list[str]:
    baseline = run.baseline
    if baseline is None:
        return [f"nvlink: not collected: {NOT_COLLECTED}"]
    lines = [f"nvlink baseline: {baseline.file} ({baseline.label()})"]
    if baseline.schema_migrated:
        lines.append("nvlink baseline: schema-1 file (migrated): no versions or measurement conditions recorded")
    if baseline.problem:
        lines.append(f"nvlink baseline: cannot compare, every baseline check fails: {baseline.problem}")
    lines += [f"nvlink baseline: {reason}" for _, reason in sorted(baseline.unmatched.items())]
    changes = environment_changes(run, baseline)
    lines.append("nvlink changed since the baseline: " + ("; ".join(changes) if changes else "nothing recorded"))
    return lines


def baseline_summary_lines(run: Run, stats: Mapping[str, Sequence[Any]]) -> list[str]:
    baseline = run.baseline
    if baseline is None:
        return []
    improved = _property_values(stats, "baseline_improved")
    not_compared = Counter(_property_values(stats, "baseline_not_compared"))
    changes = environment_changes(run, baseline)  # now with NCCL/torch, which a campaign loads
    lines = ["", f"baseline: {baseline.file} ({baseline.label()})"]
    if baseline.problem:
        lines.append(f"  not comparable: {baseline.problem}")
    lines += [f"  {reason}" for _, reason in sorted(baseline.unmatched.items())]
    lines.append("  changed since the baseline: " + ("; ".join(changes) if changes else "nothing recorded"))
    lines += [
        f"  not recorded in the baseline, so not compared: {what} ({count} GPU(s))"
        for what, count in sorted(not_compared.items())
    ]
    return lines + [f"  {line}" for line in improved]


def _property_values(stats: Mapping[str, Sequence[Any]], wanted: str) -> list[str]:
    return [
        str(value)
        for reports in stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, value in getattr(report, "user_properties", [])
        if name == wanted
    ]


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
    return props + [(f"changed_{_name(change)}", change) for change in environment_changes(run, baseline)]


def _name(change: str) -> str:
    """``GPU 3 VBIOS 96.00.5E.00.01 → …`` -> ``gpu_3_vbios``: the words before the old value."""
    words = change.split(" → ", maxsplit=1)[0].split(" ")[:-1]
    return "_".join(words).lower()
