"""How much of the acceptance run was judged on facts: the "partial audit" counts.

A run can end green without judging anything: every check skipped for lack of evidence, or a
check that never handed a verdict over. The tally counts, from pytest's reports (plain objects,
so this module needs no pytest import, and reports from xdist workers count the same), how many
checks had a verdict made on evidence, so that the summary can say so and the exit status can
refuse a run that judged nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pytest_nvlink.model import Node
from pytest_nvlink.verdict import Outcome

# Outcomes that mean a verdict was made on facts; "no evidence" and "not applicable" judge nothing.
JUDGED: frozenset[str] = frozenset({Outcome.PASS.value, Outcome.FAIL.value})
UNJUDGED = "unjudged"  # the item ran but recorded no verdict (setup error, or never called nvlink_judge)


@dataclass(frozen=True)
class AuditCounts:
    """The partial-audit figures as numbers: checks judged on facts, of those that should have been."""

    judged: int
    applicable: int


@dataclass
class AuditTally:
    """The verdict outcome of every nvlink-marked item, by node id."""

    outcomes: dict[str, str] = field(default_factory=dict)

    def add(self, report: Any) -> None:
        """Take one pytest TestReport (setup, call or teardown)."""
        if "nvlink" not in getattr(report, "keywords", {}):
            return
        nodeid = str(report.nodeid)
        when = getattr(report, "when", None)
        if when == "call":
            self.outcomes[nodeid] = _last_outcome(getattr(report, "user_properties", []))
        elif when == "setup" and not getattr(report, "passed", False):
            self.outcomes.setdefault(nodeid, UNJUDGED)

    @property
    def applicable(self) -> int:
        """Items that should have been judged: all but those the suite says do not apply."""
        return sum(1 for outcome in self.outcomes.values() if outcome != Outcome.NOT_APPLICABLE.value)

    @property
    def judged(self) -> int:
        return sum(1 for outcome in self.outcomes.values() if outcome in JUDGED)

    def counts(self) -> AuditCounts:
        return AuditCounts(self.judged, self.applicable)

    def judged_nothing(self) -> bool:
        """True when nvlink checks ran and not one of them gave a verdict on facts."""
        return bool(self.outcomes) and self.judged == 0

    def line(self) -> str:
        counts = Counter(self.outcomes.values())
        parts = [
            f"{counts[Outcome.NO_EVIDENCE.value]} without evidence" if counts[Outcome.NO_EVIDENCE.value] else "",
            f"{counts[UNJUDGED]} never judged" if counts[UNJUDGED] else "",
            f"{counts[Outcome.NOT_APPLICABLE.value]} not applicable" if counts[Outcome.NOT_APPLICABLE.value] else "",
        ]
        detail = ", ".join(part for part in parts if part)
        return f"partial audit: {self.judged} of {self.applicable} checks had evidence" + (
            f" ({detail})" if detail else ""
        )


def no_verdict_line(tally: AuditTally) -> str:
    return (
        f"pytest-nvlink: no check was judged ({tally.line()}): this run says nothing about the node, "
        "so it fails; give evidence that covers the checks or run on the node itself"
    )


def evidence_header_line(node: Node) -> str:
    """What the evidence files cover, known before any check runs."""
    # Imported here: the evidence parsers are a third of a replay's start-up, and only evidence runs need them.
    from pytest_nvlink.record.coverage import coverage

    families = coverage(node)
    covered = [family for family, files in families if files]
    missing = [family for family, files in families if not files]
    text = f"partial audit: evidence covers {len(covered)} of {len(families)} check families"
    text += f" ({', '.join(covered)})" if covered else ""
    if missing:
        text += f"; no evidence for {', '.join(missing)}: their checks fail (skip with --nvlink-evidence-missing=skip)"
    return text


def _last_outcome(properties: list[tuple[Any, Any]]) -> str:
    """The last ``outcome`` an item recorded (a verdict judged twice: the later), else UNJUDGED."""
    for name, value in reversed(properties):
        if name == "outcome":
            return str(value)
    return UNJUDGED
