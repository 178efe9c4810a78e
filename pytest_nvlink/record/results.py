"""The results record: every item's verdict as data, taken from the verdicts themselves.

The plugin copies each verdict (outcome, message, measured, expected, unit, threshold or suite
key and file) into the item's ``user_properties``; pytest hands those to every reporter and
pytest-xdist carries them from the workers to the controller. This module reads them from the
test reports (plain objects: no pytest import) and never parses pytest's own text, except to say
why an item that recorded no verdict failed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_nvlink.model import NcclAudit
from pytest_nvlink.record.audit import UNJUDGED, AuditCounts
from pytest_nvlink.record.items import ItemResult
from pytest_nvlink.record.run import Run
from pytest_nvlink.record.scope import RunScope, scope_verdict
from pytest_nvlink.verdict import Outcome

if TYPE_CHECKING:
    from pytest_nvlink.record.baseline import BaselineSection


# The run's verdict: any failure fails it; checks left without evidence leave it incomplete; a run of part
# of the suite is PARTIAL, one stopped from outside INTERRUPTED (record.scope).
PASS, FAIL, INCOMPLETE = "PASS", "FAIL", "INCOMPLETE"


def run_verdict(items: Iterable[ItemResult], scope: RunScope | None = None) -> str:
    return scope_verdict(_checks_verdict(list(items)), scope)


def _checks_verdict(results: list[ItemResult]) -> str:
    counts = Counter(item.outcome for item in results)
    if counts[Outcome.FAIL.value] or counts[UNJUDGED]:
        return FAIL
    judged = counts[Outcome.PASS.value]
    # Items that failed only for want of evidence say the audit is incomplete, not that the node is bad.
    if counts[Outcome.NO_EVIDENCE.value] or judged == 0:
        return INCOMPLETE
    return FAIL if any(item.failed for item in results) else PASS


FAILURES_SHOWN = 3


@dataclass(frozen=True)
class FailureGroup:
    """One check's failures for the summary: the first few shown, the others named by parameter."""

    check: str
    shown: list[ItemResult]
    others: list[str]  # the parameters ("gpu4", "gpu2-gpu6") of the failures not shown


def _param(item: ItemResult) -> str:
    return item.nodeid.rsplit("[", 1)[-1].rstrip("]") if "[" in item.nodeid else item.nodeid


@dataclass(frozen=True)
class ReportSection:
    """A site's own part of the reports, from a ``pytest_nvlink_report_sections`` hook: a title and its lines."""

    title: str
    lines: list[str]


def report_sections(returned: Iterable[Any]) -> list[ReportSection]:
    """The sections each hook implementation returned (a list of (title, lines), or None); TypeError for others."""
    sections: list[ReportSection] = []
    for value in returned:
        if value is None:
            continue
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise TypeError(f"expected a list of (title, lines) sections, got {value!r}")
        sections += [_section(section) for section in value]
    return sections


def _section(section: Any) -> ReportSection:
    shape = f"a section is (title, list of lines), both text; got {section!r}"
    if not isinstance(section, (tuple, list)) or len(section) != 2:
        raise TypeError(shape)
    title, lines = section
    if not isinstance(title, str) or isinstance(lines, (str, bytes)) or not isinstance(lines, Iterable):
        raise TypeError(shape)
    lines = list(lines)
    if not all(isinstance(line, str) for line in lines):
        raise TypeError(shape)
    return ReportSection(title, lines)


@dataclass
class Results:
    """What every renderer reads: the run (node, suite, thresholds, measurements) and each item's verdict."""

    run: Run
    items: list[ItemResult]
    audit: str  # the "partial audit: N of M checks had evidence" line
    audit_counts: AuditCounts  # its N and M as numbers, which the fleet reads
    sections: list[ReportSection] = field(default_factory=list)  # a site's own, from its hooks (plugin.hookspecs)
    scope: RunScope | None = None  # which of the suite's checks ran; None: not known, taken as complete

    @property
    def verdict(self) -> str:
        return run_verdict(self.items, self.scope)

    def failures(self) -> list[ItemResult]:
        return [item for item in self.items if item.failed]

    def failures_by_area(self) -> list[tuple[str, list[ItemResult]]]:
        groups: dict[str, list[ItemResult]] = {}
        for item in self.failures():
            groups.setdefault(item.area, []).append(item)
        return list(groups.items())

    def failure_groups(self, shown: int = FAILURES_SHOWN) -> list[tuple[str, list[FailureGroup]]]:
        """Failures by area, then by check; a check failing on many GPUs or pairs shows a few and names the rest."""
        grouped: list[tuple[str, list[FailureGroup]]] = []
        for area, items in self.failures_by_area():
            checks: dict[str, list[ItemResult]] = {}
            for item in items:
                checks.setdefault(item.check, []).append(item)
            groups = [
                FailureGroup(check, same[:shown], [_param(x) for x in same[shown:]]) for check, same in checks.items()
            ]
            grouped.append((area, groups))
        return grouped

    def counts(self) -> dict[str, int]:
        return dict(Counter(item.pytest_outcome for item in self.items))

    @property
    def nccl_transports(self) -> list[tuple[str, int]]:
        return nccl_transports(self.run)

    @property
    def baseline(self) -> BaselineSection | None:
        """What the run was compared with and what changed since; None without ``--nvlink-baseline``."""
        from pytest_nvlink.record.baseline import baseline_section

        return baseline_section(self.run, self.items)


def nccl_transports(run: Run) -> list[tuple[str, int]]:
    """Channels per transport NCCL used ("P2P/MNNVL", "NET/IB", "NVLS"), from the run's NCCL log; [] without one."""
    audit = run.node.measurements.nccl
    return transport_counts(audit) if audit is not None else []


def transport_counts(audit: NcclAudit) -> list[tuple[str, int]]:
    """Channels per transport as NCCL named it ("P2P/MNNVL", "NET/IB", "SHM/direct"), most used first.

    NVLS appears with the count of NVLS channels NCCL reported, since it prints no per-channel line for them.
    """
    counts: dict[str, int] = {}
    for channel in audit.channels:
        words = channel.detail.split("/")
        label = "/".join(words[:2]) if len(words) > 1 and not words[1].isdigit() else words[0]
        counts[label] = counts.get(label, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if audit.nvls_channels:
        ordered.append(("NVLS", audit.nvls_channels))
    return ordered


def nccl_transport_line(run: Run) -> str | None:
    """ "NCCL transports: P2P/MNNVL 1152 channels, NVLS 16 channels; MNNVL on 72 of 72 ranks (clique 7ffe)"."""
    audit = run.node.measurements.nccl
    counts = nccl_transports(run)
    if audit is None or not (counts or audit.mnnvl):
        return None
    line = "NCCL transports: " + (", ".join(f"{name} {count} channels" for name, count in counts) or "no channel lines")
    if audit.mnnvl:
        enabled = [c for c in audit.mnnvl if c.enabled]
        cliques = sorted({f"{c.clique_id:x}" for c in enabled if c.clique_id is not None})
        shown = f" (clique{'s' if len(cliques) > 1 else ''} {', '.join(cliques)})" if cliques else ""
        line += f"; MNNVL on {len(enabled)} of {len(audit.mnnvl)} ranks{shown}"
    return line


def source_text(run: Run) -> str:
    options = run.options
    if options.replay:
        return f"replay of {options.replay}"
    if options.evidence:
        return "evidence from " + ", ".join(str(p) for p in options.evidence)
    return "live (NVML + torch)"
