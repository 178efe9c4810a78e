"""Which evidence families fed this run, from which files: the coverage table of an evidence run.

The renderers read it here, as part of what the run recorded; the families and the checks each feeds
are the evidence source's (:mod:`pytest_nvlink.sources.evidence.families`).
"""

from __future__ import annotations

import re

from pytest_nvlink.model import Node
from pytest_nvlink.sources.evidence.families import FAMILIES, FAMILY_CHECKS


def coverage_rows(node: Node) -> list[tuple[str, str, str]]:
    """(family, the checks it feeds, files) for every family, files "" where none covered it."""
    return [(family, FAMILY_CHECKS.get(family, ""), files) for family, files in coverage(node)]


def coverage(node: Node) -> list[tuple[str, str]]:
    """(family, files) for every family, "" where no file covered it; for a run summary."""
    return [(family, node.provenance.get(family, "")) for family in FAMILIES]


def file_coverage(node: Node) -> list[tuple[str, list[str], list[str]]]:
    """(file, families it contributed to, notes about it) for every file that fed or was noted."""
    families: dict[str, list[str]] = {}
    for family in FAMILIES:
        for name in filter(None, node.provenance.get(family, "").split(", ")):
            families.setdefault(_file_of(name), []).append(family)
    files = list(dict.fromkeys([*families, *node.evidence_notes]))
    return [(file, families.get(file, []), node.evidence_notes.get(file, [])) for file in files]


def _file_of(name: str) -> str:
    """The file of a provenance entry; parts of a multi-output file are named "file (line N)"."""
    match = re.fullmatch(r"(.*) \(line \d+\)", name)
    return match.group(1) if match else name
