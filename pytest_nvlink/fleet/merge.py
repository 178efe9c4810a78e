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

from pytest_nvlink.fleet.load import NodeFile, read_fleet
from pytest_nvlink.fleet.outliers import Family, NodeFigure, Outlier, OutlierSettings, find_outliers, node_figures

PASS, FAIL, INCOMPLETE, MISSING = "pass", "fail", "incomplete", "missing"
STATUS_ORDER = (MISSING, FAIL, INCOMPLETE, PASS)
FAILED_OUTCOMES = frozenset({"fail", "unjudged"})
JUDGED_OUTCOMES = frozenset({"pass", "fail"})
# Files written before ``audit_counts`` existed hold the counts only in the audit sentence: read from it there.
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
    suite: str = ""  # the suite the node was judged against

    @property
    def host(self) -> str:
        return self.verdict.host


def merge_paths(
    paths: Iterable[Path],
    expected: Iterable[str] | None,
    settings: OutlierSettings,
    jobs: int = 1,
) -> Fleet:
    """Read every results file under ``paths`` (in ``jobs`` processes) and merge them."""
    return merge(read_fleet(paths, summarize, jobs=jobs), expected, settings)


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
    unexpected: list[str] = field(default_factory=list)  # hosts with results that --expect-nodes does not name
    # The suites the nodes were judged against, each with its hosts; more than one: a mixed fleet, whose
    # outliers are judged among the nodes of one suite only.
    suites: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def mixed_suites(self) -> str | None:
        """One sentence when the nodes were judged against more than one suite; None otherwise."""
        if len(self.suites) < 2:
            return None
        shown = "; ".join(f"{suite} ({len(hosts)} node(s))" for suite, hosts in self.suites.items())
        return (
            f"the results mix suites: {shown}; each node is judged against its own suite, and outliers only "
            "among nodes of one suite"
        )

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
    # Host names compare without regard to case, as DNS does: GPU001 in the list is gpu001's results.
    present = {node.host.lower() for node in files}
    named = {host.lower() for host in expected_hosts or []}
    unexpected = [] if expected_hosts is None else sorted(n.host for n in files if n.host.lower() not in named)
    if expected_hosts is not None:
        verdicts += [
            NodeVerdict(host, MISSING, "missing: no results file for this expected node", None, None)
            for host in expected_hosts
            if host.lower() not in present
        ]
    verdicts.sort(key=lambda v: (STATUS_ORDER.index(v.status), v.host))
    suites = suites_of(files)
    families, outliers = find_outliers(files, settings, by_suite=len(suites) > 1)
    problems = [] if files else ["no results file was found: an empty fleet proves nothing"]
    expected_count = None if expected_hosts is None else len(expected_hosts)
    fleet = Fleet(verdicts, tally_checks(files), families, outliers, settings, expected_count, problems, unexpected)
    fleet.suites = suites
    return fleet


def suites_of(files: Sequence[NodeSummary]) -> dict[str, tuple[str, ...]]:
    """Each suite the nodes were judged against, with its hosts."""
    suites: dict[str, list[str]] = {}
    for node in files:
        suites.setdefault(node.suite, []).append(node.host)
    return {suite: tuple(sorted(hosts)) for suite, hosts in sorted(suites.items())}


@dataclass
class ItemScan:
    """One pass over a node's items: each check's worst state and the first failed and errored items."""

    states: dict[str, str] = field(default_factory=dict)  # check -> "pass" | "failed" | "incomplete"
    first_failed: dict[str, Any] | None = None
    first_errored: dict[str, Any] | None = None
    judged: int = 0


def scan_items(items: list[dict[str, Any]]) -> ItemScan:
    scan = ItemScan()
    states = scan.states
    for item in items:
        check, outcome, pytest_outcome = item["check"], item["outcome"], item["pytest_outcome"]
        if outcome in JUDGED_OUTCOMES:
            scan.judged += 1
        if outcome in FAILED_OUTCOMES or pytest_outcome == "failed":
            states[check] = "failed"
            scan.first_failed = scan.first_failed or item
        elif pytest_outcome == "error" or outcome == "no_evidence":
            if states.get(check) != "failed":
                states[check] = "incomplete"
            scan.first_errored = scan.first_errored or item
        elif check not in states:
            states[check] = "pass"
    return scan


def summarize(node: NodeFile) -> NodeSummary:
    scan = scan_items(node.document["items"])
    figures = node_figures(node.document["node"]["measurements"])
    return NodeSummary(node_verdict(node, scan), scan.states, figures, str(node.document["suite"]["name"]))


def node_verdict(node: NodeFile, scan: ItemScan) -> NodeVerdict:
    document = node.document
    failed_checks = tuple(check for check, state in scan.states.items() if state == "failed")
    verdict = document["verdict"]
    if scan.first_failed is not None or verdict == "FAIL":
        first = _item_line(scan.first_failed) if scan.first_failed is not None else "the run's verdict is FAIL"
        return NodeVerdict(node.host, FAIL, first, node.path, verdict, failed_checks)
    reason = _incomplete_reason(document, scan)
    if reason is not None:
        return NodeVerdict(node.host, INCOMPLETE, reason, node.path, verdict, failed_checks)
    return NodeVerdict(node.host, PASS, None, node.path, verdict)


def _incomplete_reason(document: dict[str, Any], scan: ItemScan) -> str | None:
    left_out = document.get("left_out")
    if left_out is not None:  # a partial or interrupted run proves nothing of the checks it left out
        return f"incomplete: {left_out['line']}"
    if scan.first_errored is not None:
        return "incomplete: " + _item_line(scan.first_errored)
    if not scan.judged:
        return "incomplete: no check was judged"
    if document["counts"].get("error"):
        return f"incomplete: {document['counts']['error']} check(s) ended with an error"
    counts = _audit_counts(document)
    if counts is None:
        return f"incomplete: the audit line is not understood ({document['audit']!r})"
    if counts[0] < counts[1]:
        return f"incomplete: {document['audit']}"
    if document["verdict"] != "PASS":
        return f"incomplete: the run's verdict is {document['verdict']}"
    return None


def _audit_counts(document: dict[str, Any]) -> tuple[int, int] | None:
    """(judged, applicable) from the file's ``audit_counts``; None when neither it nor an older file's line says."""
    counts = document.get("audit_counts")
    if counts is not None:
        return int(counts["judged"]), int(counts["applicable"])
    # A file written before audit_counts: its counts are only in the sentence (the one place it is parsed).
    audit = AUDIT_LINE.match(document["audit"])
    return None if audit is None else (int(audit.group(1)), int(audit.group(2)))


def _item_line(item: dict[str, Any]) -> str:
    nodeid: str = item["nodeid"]
    name = nodeid.rsplit("::", 1)[-1]
    message = " ".join(str(item["message"]).split()) or item["outcome"]
    return f"{name}: {message}"


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
