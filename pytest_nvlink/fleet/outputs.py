"""The fleet verdict as files: JUnit XML (junit-xml), JSON (fleet.schema.json) and a Slurm drain script."""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_nvlink import __version__
from pytest_nvlink.core.atomic import write_text_atomically
from pytest_nvlink.fleet.merge import PASS, Fleet, NodeVerdict
from pytest_nvlink.fleet.outliers import Outlier

FLEET_KIND = "pytest-nvlink-fleet"
FLEET_SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).resolve().parent / "fleet.schema.json"
# Slurm keeps a node's Reason as free text; a short one stays readable in sinfo -R.
REASON_MAX_CHARS = 200


def fleet_document(fleet: Fleet, fail_on_outliers: bool) -> dict[str, Any]:
    settings = fleet.settings
    return {
        "kind": FLEET_KIND,
        "schema_version": FLEET_SCHEMA_VERSION,
        "plugin_version": __version__,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "verdict": "FAIL" if fleet.exit_status(fail_on_outliers) else "PASS",
        "exit_status": fleet.exit_status(fail_on_outliers),
        "problems": list(fleet.problems),
        "expected_nodes": fleet.expected,
        "unexpected_nodes": list(fleet.unexpected),
        "suites": {suite: list(hosts) for suite, hosts in fleet.suites.items()},
        "counts": {status: fleet.count(status) for status in ("pass", "fail", "incomplete", "missing")},
        "settings": {
            "z_threshold": settings.z_threshold,
            "warn_percent": settings.warn_percent,
            "replace_percent": settings.replace_percent,
            "min_nodes": settings.min_nodes,
            "fail_on_outliers": fail_on_outliers,
        },
        "nodes": [_node(node) for node in fleet.nodes],
        "checks": [
            {"check": t.check, "nodes_run": t.nodes, "failed": list(t.failed), "incomplete": list(t.errored)}
            for t in fleet.checks
        ],
        "families": [
            {
                "family": f.name,
                "unit": f.unit,
                "higher_is_better": f.higher_is_better,
                "nodes": len(f.figures),
                "median": f.median,
                "mad": f.mad,
                "note": f.note,
            }
            for f in fleet.families
        ],
        "outliers": [_outlier(o) for o in fleet.outliers],
    }


def _node(node: NodeVerdict) -> dict[str, Any]:
    return {
        "host": node.host,
        "status": node.status,
        "first_failure": node.first_failure,
        "file": None if node.file is None else str(node.file),
        "run_verdict": node.run_verdict,
        "failed_checks": list(node.failed_checks),
    }


def _outlier(outlier: Outlier) -> dict[str, Any]:
    return {
        "host": outlier.host,
        "family": outlier.family,
        "value": outlier.value,
        "unit": outlier.unit,
        "where": outlier.where,
        "median": outlier.median,
        "modified_z": outlier.z,
        "percent_worse": round(outlier.percent_worse, 3),
        "level": outlier.level,
        "text": outlier.sentence(),
    }


def write_json(fleet: Fleet, path: Path, fail_on_outliers: bool) -> None:
    write_text_atomically(path, json.dumps(fleet_document(fleet, fail_on_outliers), indent=1) + "\n")


def write_junit(fleet: Fleet, path: Path, fail_on_outliers: bool) -> None:
    """One testcase per node and per outlier; outliers fail only with --fail-on-outliers."""
    from junit_xml import TestCase, TestSuite, to_xml_report_string

    cases: list[TestCase] = []
    for node in fleet.nodes:
        case = TestCase(node.host, classname="pytest-nvlink.fleet.node", file=str(node.file or ""))
        if node.status == "incomplete":
            case.add_error_info(message=node.first_failure, error_type="incomplete")
        elif node.status != PASS:
            case.add_failure_info(message=node.first_failure, failure_type=node.status)
        cases.append(case)
    for outlier in fleet.outliers:
        case = TestCase(f"{outlier.host} {outlier.family}", classname="pytest-nvlink.fleet.outlier")
        if fail_on_outliers:
            case.add_failure_info(message=outlier.sentence(), failure_type=f"outlier-{outlier.level}")
        else:
            case.stdout = outlier.sentence()
        cases.append(case)
    for problem in fleet.problems:
        case = TestCase("fleet", classname="pytest-nvlink.fleet")
        case.add_failure_info(message=problem, failure_type="fleet")
        cases.append(case)
    suite = TestSuite("pytest-nvlink fleet", cases, timestamp=datetime.now(timezone.utc).isoformat())
    write_text_atomically(path, to_xml_report_string([suite], prettyprint=True, encoding="utf-8"))


def drain_script(fleet: Fleet) -> str:
    lines = [
        "#!/bin/sh",
        f"# Written by pytest-nvlink fleet {__version__} on "
        f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; never run by it.",
        "# Drains every node that failed, was incomplete or sent no results. Review, then run it.",
        "set -e",
    ]
    for node in fleet.not_passing():
        reason = " ".join(f"pytest-nvlink: {node.first_failure or node.status}".split())
        if len(reason) > REASON_MAX_CHARS:
            reason = reason[: REASON_MAX_CHARS - 3] + "..."  # ASCII: scontrol and sinfo on any locale
        words = ["scontrol", "update", f"NodeName={node.host}", "State=DRAIN", f"Reason={reason}"]
        lines.append(" ".join(shlex.quote(word) for word in words))
    return "\n".join(lines) + "\n"


def write_drain_script(fleet: Fleet, path: Path) -> None:
    # a script to run, readable by whoever reviews it (a device such as /dev/stdout keeps its own mode)
    write_text_atomically(path, drain_script(fleet), mode=0o755)
