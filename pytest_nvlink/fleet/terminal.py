"""The fleet verdict as terminal tables (tabulate): nodes not passing, checks failing, outliers."""

from __future__ import annotations

from tabulate import tabulate

from pytest_nvlink.fleet.merge import FAIL, INCOMPLETE, MISSING, PASS, Fleet

SHOWN_HOSTS = 5  # per-check rows name a few hosts and count the rest
LINE_WIDTH = 110


def render_terminal(fleet: Fleet, fail_on_outliers: bool) -> str:
    parts = [
        _nodes_table(fleet),
        _checks_table(fleet),
        _outliers_table(fleet),
        _family_notes(fleet),
        _unexpected(fleet),
        fleet.mixed_suites() or "",
    ]
    parts.append(summary_line(fleet, fail_on_outliers))
    return "\n\n".join(part for part in parts if part) + "\n"


def summary_line(fleet: Fleet, fail_on_outliers: bool) -> str:
    counts = ", ".join(f"{fleet.count(status)} {status}" for status in (PASS, FAIL, INCOMPLETE, MISSING))
    verdict = "FAIL" if fleet.exit_status(fail_on_outliers) else "PASS"
    outliers = f"{len(fleet.outliers)} outlier(s)" + (" (failing: --fail-on-outliers)" if fail_on_outliers else "")
    line = f"pytest-nvlink fleet: {verdict}: {len(fleet.nodes)} node(s): {counts}; {outliers}"
    return "\n".join([line, *(f"pytest-nvlink fleet: {problem}" for problem in fleet.problems)])


def _nodes_table(fleet: Fleet) -> str:
    rows = [(node.host, node.status.upper(), _clip(node.first_failure or "")) for node in fleet.not_passing()]
    if not rows:
        return f"All {len(fleet.nodes)} node(s) pass." if fleet.nodes else ""
    return "Nodes not passing\n" + tabulate(rows, headers=["node", "status", "first failure"], tablefmt="simple")


def _checks_table(fleet: Fleet) -> str:
    rows = [
        (tally.check, len(tally.failed), len(tally.errored), tally.nodes, _hosts(tally.failed or tally.errored))
        for tally in fleet.checks
        if tally.failed or tally.errored
    ]
    if not rows:
        return ""
    headers = ["check", "nodes failing", "nodes incomplete", "nodes run", "nodes"]
    return "Checks failing\n" + tabulate(rows, headers=headers, tablefmt="simple")


def _outliers_table(fleet: Fleet) -> str:
    rows = [
        (
            o.host,
            o.family,
            f"{o.value:g} {o.unit}",
            o.where,
            f"{o.median:g}",
            f"{o.percent_worse:.1f} %",
            _z(o.z),
            o.level,
        )
        for o in fleet.outliers
    ]
    if not rows:
        return ""
    headers = ["node", "figure", "worst", "at", "fleet median", "worse by", "modified z", "level"]
    return "Outliers (slower than their peers)\n" + tabulate(rows, headers=headers, tablefmt="simple")


def _family_notes(fleet: Fleet) -> str:
    return "\n".join(f"{family.name}: {family.note}" for family in fleet.families if family.note)


def _unexpected(fleet: Fleet) -> str:
    if not fleet.unexpected:
        return ""
    return (
        f"{len(fleet.unexpected)} node(s) sent results but are not in --expect-nodes: {_hosts(tuple(fleet.unexpected))}"
    )


def _z(z: float | None) -> str:
    return "MAD = 0" if z is None else f"{z:+.1f}"


def _hosts(hosts: tuple[str, ...]) -> str:
    shown = ", ".join(hosts[:SHOWN_HOSTS])
    return shown + (f" and {len(hosts) - SHOWN_HOSTS} more" if len(hosts) > SHOWN_HOSTS else "")


def _clip(text: str) -> str:
    return text if len(text) <= LINE_WIDTH else text[: LINE_WIDTH - 1] + "…"
