"""One fleet verdict from the nodes' results: each node pass / fail / incomplete / missing, and per check how many fail.

A node is incomplete (never pass) when its run ended with errors, judged no check, or its audit
line says fewer checks had evidence than should have; it fails when any check failed. Nodes that
were expected and sent no results are missing. Worst wins: missing, fail, incomplete, pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_nvlink.fleet.load import NodeFile, ResultsReader, read_fleet
from pytest_nvlink.fleet.outliers import Family, NodeFigure, Outlier, OutlierSettings, find_outliers, node_figures

PASS, FAIL, INCOMPLETE, MISSING = "pass", "fail", "incomplete", "missing"
STATUS_ORDER = (MISSING, FAIL, INCOMPLETE, PASS)
FAILED_OUTCOMES = frozenset({"fail", "unjudged"})
JUDGED_OUTCOMES = frozenset({"pass", "fail"})
AUDIT_LINE = re.compile(r"^partial audit: (\d+) of (\d+) checks had evidence")


@dataclass(frozen=True)
class NodeVerdict:
    host: str
    status: str  # pass | fail | incomplete | missing
    first_failure: str | None  # one sentence; None for a passing node
    file: Path | None  # None for a missing node
    run_verdict: str | None  # the run's own verdict in the file
    failed_checks: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSummary:
    """What the merge keeps of one node's file."""

    verdict: NodeVerdict
    checks: dict[str, str]  # check -> "pass" | "failed" | "incomplete", the worst of its items
    figures: list[NodeFigure]

    @property
    def host(self) -> str:
        return self.verdict.host


def summarize(node: NodeFile) -> NodeSummary:
    return NodeSummary(node_verdict(node), check_states(node), node_figures(node.document["node"]["measurements"]))


def merge_paths(
    paths: Iterable[Path],
    expected: Iterable[str] | None,
    settings: OutlierSettings,
    reader: ResultsReader | None = None,
) -> Fleet:
    """Read every results file under ``paths`` and merge them."""
    return merge(read_fleet(paths, summarize, reader), expected, settings)


@dataclass(frozen=True)
class CheckTally:
    check: str
    failed: tuple[str, ...]  # hosts where the check failed
    errored: tuple[str, ...]  # hosts where it ended with an error or no evidence
    nodes: int  # nodes on which it ran


@dataclass
class Fleet:
    nodes: list[NodeVerdict]
    checks: list[CheckTally]
    families: list[Family]
    outliers: list[Outlier]
    settings: OutlierSettings
    expected: int | None = None  # how many nodes --expect-nodes named
    problems: list[str] = field(default_factory=list)  # fleet-level failures (an empty input)

    def count(self, status: str) -> int:
        return sum(1 for node in self.nodes if node.status == status)

    @property
    def verdict(self) -> str:
        if self.problems or any(node.status != PASS for node in self.nodes):
            return "FAIL"
        return "PASS"

    def exit_status(self, fail_on_outliers: bool) -> int:
        failed = self.verdict != "PASS" or (fail_on_outliers and bool(self.outliers))
        return 1 if failed else 0

    def not_passing(self) -> list[NodeVerdict]:
        return [node for node in self.nodes if node.status != PASS]


def merge(files: Sequence[NodeSummary], expected: Iterable[str] | None, settings: OutlierSettings) -> Fleet:
    verdicts = [node.verdict for node in files]
    expected_hosts = list(expected) if expected is not None else None
    if expected_hosts is not None:
        present = {node.host for node in files}
        verdicts += [
            NodeVerdict(host, MISSING, "missing: no results file for this expected node", None, None)
            for host in expected_hosts
            if host not in present
        ]
    verdicts.sort(key=lambda v: (STATUS_ORDER.index(v.status), v.host))
    families, outliers = find_outliers(files, settings)
    problems = [] if files else ["no results file was found: an empty fleet proves nothing"]
    expected_count = None if expected_hosts is None else len(expected_hosts)
    return Fleet(verdicts, tally_checks(files), families, outliers, settings, expected_count, problems)


def node_verdict(node: NodeFile) -> NodeVerdict:
    document = node.document
    items: list[dict[str, Any]] = document["items"]
    failed = [item for item in items if item["outcome"] in FAILED_OUTCOMES or item["pytest_outcome"] == "failed"]
    failed_checks = tuple(dict.fromkeys(item["check"] for item in failed))
    verdict = document["verdict"]
    if failed or verdict == "FAIL":
        first = _item_line(failed[0]) if failed else "the run's verdict is FAIL"
        return NodeVerdict(node.host, FAIL, first, node.path, verdict, failed_checks)
    reason = _incomplete_reason(document)
    if reason is not None:
        return NodeVerdict(node.host, INCOMPLETE, reason, node.path, verdict, failed_checks)
    return NodeVerdict(node.host, PASS, None, node.path, verdict)


def _incomplete_reason(document: dict[str, Any]) -> str | None:
    items: list[dict[str, Any]] = document["items"]
    errored = [item for item in items if item["pytest_outcome"] == "error" or item["outcome"] == "no_evidence"]
    if errored:
        return "incomplete: " + _item_line(errored[0])
    if not any(item["outcome"] in JUDGED_OUTCOMES for item in items):
        return "incomplete: no check was judged"
    if document["counts"].get("error"):
        return f"incomplete: {document['counts']['error']} check(s) ended with an error"
    audit = AUDIT_LINE.match(document["audit"])
    if audit is None:
        return f"incomplete: the audit line is not understood ({document['audit']!r})"
    if int(audit.group(1)) < int(audit.group(2)):
        return f"incomplete: {document['audit']}"
    if document["verdict"] != "PASS":
        return f"incomplete: the run's verdict is {document['verdict']}"
    return None


def _item_line(item: dict[str, Any]) -> str:
    nodeid: str = item["nodeid"]
    name = nodeid.rsplit("::", 1)[-1]
    message = " ".join(str(item["message"]).split()) or item["outcome"]
    return f"{name}: {message}"


def check_states(node: NodeFile) -> dict[str, str]:
    states: dict[str, str] = {}
    for item in node.document["items"]:
        check = item["check"]
        if item["outcome"] in FAILED_OUTCOMES or item["pytest_outcome"] == "failed":
            states[check] = "failed"
        elif item["pytest_outcome"] == "error" or item["outcome"] == "no_evidence":
            if states.get(check) != "failed":
                states[check] = "incomplete"
        else:
            states.setdefault(check, "pass")
    return states


def tally_checks(files: Sequence[NodeSummary]) -> list[CheckTally]:
    failed: dict[str, list[str]] = {}
    errored: dict[str, list[str]] = {}
    ran: dict[str, int] = {}
    for node in files:
        for check, state in node.checks.items():
            ran[check] = ran.get(check, 0) + 1
            if state == "failed":
                failed.setdefault(check, []).append(node.host)
            elif state == "incomplete":
                errored.setdefault(check, []).append(node.host)
    tallies = [
        CheckTally(check, tuple(failed.get(check, ())), tuple(errored.get(check, ())), count)
        for check, count in ran.items()
    ]
    return sorted(tallies, key=lambda t: (-len(t.failed), -len(t.errored), t.check))
