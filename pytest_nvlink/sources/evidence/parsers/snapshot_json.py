"""A pytest-nvlink snapshot handed in as evidence: its facts join the text files', conflicts checked."""

from __future__ import annotations

import json

from pytest_nvlink.core.textfile import parse_problem
from pytest_nvlink.model.document import SnapshotError, node_from_document
from pytest_nvlink.sources.evidence.merge import EvidenceError
from pytest_nvlink.sources.evidence.parsers.common import ParseError
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

KIND = "snapshot_json"


def parse(text: str) -> object:
    """The JSON document; whether it is a valid snapshot is the merge step's question."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"invalid JSON: {exc.msg}", exc.lineno) from None
    except RecursionError:
        raise ParseError("invalid JSON: nested too deeply", 0) from None
    except ValueError as exc:  # an integer beyond Python's digit limit
        raise ParseError(f"invalid JSON: {parse_problem(exc, text)}", 0) from None


def _detect(text: str) -> str | None:
    return KIND if text.lstrip().startswith("{") and "pytest-nvlink-snapshot" in text else None


def _merge(into: Into, document: object) -> None:
    try:
        node = node_from_document(document, into.part.name)
    except SnapshotError as exc:
        raise EvidenceError(str(exc)) from None
    into.merger.add_snapshot(node, into.part.name)


FORMAT = register(
    Format(
        name=KIND,
        kinds=(KIND,),
        order=10,  # first: its JSON can hold any tool's words
        detect=_detect,
        parse=parse,
        # What a snapshot can hold; Merger.add_snapshot notes the ones it does.
        families=(
            "inventory",
            "paths",
            "p2p",
            "nvlinks",
            "nvlink_errors",
            "p2p_bandwidth",
            "collectives",
            "nccl_transport",
        ),
        label="a pytest-nvlink snapshot",
        merge=_merge,
    )
)
