"""Versioned JSON snapshots of a probed node: save from a live run, replay anywhere.

The reader is strict: an unknown schema version, a missing required field or a value of the
wrong type is a :class:`SnapshotError` naming the file and the JSON path, never a half-read
node that would let checks pass on facts nobody measured.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_nvlink import __version__
from pytest_nvlink.core.atomic import write_text_atomically
from pytest_nvlink.core.values import value_problems
from pytest_nvlink.model import MIG_MODES, Node, P2PMeasurement, P2PStatus, PairPath
from pytest_nvlink.model.records import Reading, from_json, table_of

# Re-exported: every reader of snapshots catches it from here.
from pytest_nvlink.model.records import SnapshotError as SnapshotError  # noqa: PLC0414

# Schema 2 adds the run's environment (versions, suite, thresholds, outcome) and the conditions of
# every measurement; schema-1 files are migrated on read (a handover snapshot must stay replayable).
# Schema 3 writes the long lists of plain records as tables (one list per field, see _TABLES); it
# reads lists there too, and older schemas read as before.
SCHEMA_VERSION = 3
READABLE_SCHEMAS: tuple[int, ...] = (1, 2, 3)
SNAPSHOT_KIND = "pytest-nvlink-snapshot"
_RESULTS_KIND = "pytest-nvlink-results"  # report/json_results.py's RESULTS_KIND, which this layer cannot import


# The lists a node holds thousands of records in (at 72 GPUs: 15,336 figures, 5,112 P2P statuses and
# 2,556 paths), written as tables: their file shrinks ~4x and decodes ~5x faster.
_TABLES: tuple[tuple[tuple[str, ...], type[Any]], ...] = (
    (("measurements", "p2p"), P2PMeasurement),
    (("p2p",), P2PStatus),
    (("paths",), PairPath),
)


# Optional fields added after schema 3 was published, written only when known: files of nodes whose
# sources do not know them stay as they were (readers default a missing optional field to None).
_WRITTEN_WHEN_KNOWN: tuple[str, ...] = ("health_problems",)


def node_to_dict(node: Node) -> dict[str, Any]:
    """The node as plain JSON values, every list of records a list (the results record's form)."""
    data = dataclasses.asdict(node)
    for gpu in data["gpus"]:
        fabric = gpu.get("fabric")
        for name in _WRITTEN_WHEN_KNOWN:
            if fabric is not None and fabric.get(name, 0) is None:
                del fabric[name]
    return data


def snapshot_document(node: Node) -> dict[str, Any]:
    """The snapshot's JSON document (current schema): the node, its long record lists as tables."""
    data = node_to_dict(node)
    for (*parents, name), cls in _TABLES:
        holder = data
        for parent in parents:
            holder = holder[parent]
        if holder[name] is not None:
            holder[name] = table_of(cls, holder[name])
    return {
        "kind": SNAPSHOT_KIND,
        "schema_version": SCHEMA_VERSION,
        "plugin_version": __version__,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "node": data,
    }


def snapshot_text(document: dict[str, Any]) -> str:
    """The document as a file holds it: one key per line, and each table column on one line of its own."""
    token = uuid.uuid4().hex  # stands in for a column while the rest is indented; no value can hold it
    columns: dict[str, str] = {}

    def held(values: list[Any]) -> str:
        key = f"{token}-{len(columns)}"
        columns[f'"{key}"'] = json.dumps(values, separators=(", ", ": "))
        return key

    shown = copy.deepcopy(document)  # the caller's document keeps its lists
    for (*parents, name), _ in _TABLES:
        holder = shown["node"]
        for parent in parents:
            holder = holder[parent]
        table = holder[name]
        if table is not None:
            for field, column in table["columns"].items():
                if isinstance(column, dict):
                    table["columns"][field] = {part: held(values) for part, values in column.items()}
                else:
                    table["columns"][field] = held(column)
    text = json.dumps(shown, indent=1)
    return re.sub(f'"{token}-[0-9]+"', lambda found: columns[found.group(0)], text) + "\n"


def check_writable(path: Path) -> None:
    """Refuse a save target before the run starts, rather than losing the snapshot at its end.

    The test is a real file created next to the target: permission bits say nothing to root, and
    /proc or a read-only mount refuse only an actual write.
    """
    if path.is_dir():
        raise SnapshotError(f"{path} is a folder; give a file name such as {path / 'node.json'}")
    if path.exists() and not path.is_file():
        raise SnapshotError(f"{path} is not a regular file (a device or pipe); the snapshot would be lost")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # save_snapshot creates the missing folders
    if not folder.is_dir():
        raise SnapshotError(f"cannot create {path}: {folder} is not a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise SnapshotError(f"cannot write {path}: {exc.strerror or exc} in {folder}") from None


def save_snapshot(node: Node, path: Path) -> None:
    """Write atomically: a run interrupted mid-write leaves the previous file, never half a snapshot."""
    write_text_atomically(path, snapshot_text(snapshot_document(node)))


def node_from_document(document: object, origin: str) -> Node:
    if isinstance(document, dict) and document.get("kind") == _RESULTS_KIND:
        raise SnapshotError(
            f"{origin}: a results JSON (--nvlink-json), not a snapshot: it keeps the verdicts, not every fact and "
            "figure a replay or a baseline compares; give the run's --nvlink-save snapshot or its --nvlink-save-dir "
            "folder"
        )
    if not isinstance(document, dict) or document.get("kind") != SNAPSHOT_KIND:
        raise SnapshotError(f"{origin}: not a pytest-nvlink snapshot (missing kind={SNAPSHOT_KIND!r})")
    version = document.get("schema_version")
    if version not in READABLE_SCHEMAS or isinstance(version, bool):
        shown = ", ".join(str(v) for v in READABLE_SCHEMAS)
        raise SnapshotError(
            f"{origin}:schema_version: version {version!r} is not supported (this plugin reads {shown})"
        )
    document = migrate_document(document)
    reading = Reading(tables=version >= 3)
    node = from_json(Node, document.get("node"), f"{origin}:node", reading)
    _check_unique_entries(node, f"{origin}:node")
    _check_gpu_numbering(node, f"{origin}:node")
    _check_mig_modes(node, f"{origin}:node")
    # Only a node with a number that might be impossible is walked: the walk orders and counts them.
    problems = value_problems(node, "node") if reading.suspect else []
    if problems:
        path, problem = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SnapshotError(f"{origin}:{path}: {problem}{more}")
    return node


def migrate_document(document: dict[str, Any]) -> dict[str, Any]:
    """The document in the current schema. Schema 1 lacks only optional fields (environment, conditions),
    which read as "not recorded"; nothing is invented for them."""
    if document.get("schema_version") == 1:
        return {**document, "schema_version": SCHEMA_VERSION, "migrated_from": 1}
    return document


def _check_unique_entries(node: Node, where: str) -> None:
    """Two entries for one GPU, link or pair: lookups take the first, so a GPU could go missing unseen."""
    _first_duplicate(where, "gpus", [(gpu.index,) for gpu in node.gpus], "GPU index", conflicting_only=False)
    for i, gpu in enumerate(node.gpus):
        links = [(link.link,) for link in gpu.nvlinks or []]
        _first_duplicate(f"{where}.gpus[{i}]", "nvlinks", links, "link", conflicting_only=False)
    paths = [(min(p.a, p.b), max(p.a, p.b), p.path) for p in node.paths or []]
    _first_duplicate(where, "paths", paths, "pair")
    pairs = [(s.src, s.dst) for s in node.p2p or []]
    if len(set(pairs)) < len(pairs):  # the capabilities are spelled out only to tell two entries apart
        statuses = [
            (s.src, s.dst, ", ".join(f"{cap}={s.get(cap)}" for cap in ("read", "write", "nvlink", "atomics")))
            for s in node.p2p or []
        ]
        _first_duplicate(where, "p2p", statuses, "ordered pair")


def _check_gpu_numbering(node: Node, where: str) -> None:
    """A complete GPU list is numbered 0..n-1, as NVML numbers devices; a gap would hide a GPU from the count.

    Lists that are only a lower bound (evidence naming some GPUs) are left alone.
    """
    if node.gpu_list is not None and not node.gpu_list.complete:
        return
    count = len(node.gpus)
    for i, gpu in enumerate(node.gpus):
        if gpu.index >= count:
            raise SnapshotError(
                f"{where}.gpus[{i}].index: GPU {gpu.index} in a list of {count} GPU(s); NVML numbers a node's GPUs "
                f"0..{count - 1}, so GPU(s) {', '.join(str(n) for n in _unlisted(node))} would go missing unseen — "
                "the file was edited or merged by hand"
            )


def _check_mig_modes(node: Node, where: str) -> None:
    """A MIG mode is "enabled" or "disabled" (None: not recorded); anything else would be judged as neither."""
    for i, gpu in enumerate(node.gpus):
        for name in ("mig_mode_current", "mig_mode_pending"):
            value = getattr(gpu, name)
            if value is not None and value not in MIG_MODES:
                raise SnapshotError(
                    f"{where}.gpus[{i}].{name}: {value!r} is not a MIG mode (expected "
                    f"{' or '.join(map(repr, MIG_MODES))}, or null where the source could not tell)"
                )


def _unlisted(node: Node) -> list[int]:
    listed = {gpu.index for gpu in node.gpus}
    return [index for index in range(len(node.gpus)) if index not in listed]


def _first_duplicate(
    where: str, name: str, entries: list[tuple[Any, ...]], what: str, *, conflicting_only: bool = True
) -> None:
    """Raise for the first key listed twice; with ``conflicting_only`` identical repeats are tolerated."""
    key_length = len(entries[0]) - 1 if conflicting_only and entries else None
    seen: dict[tuple[Any, ...], tuple[int, tuple[Any, ...]]] = {}
    for i, entry in enumerate(entries):
        key = entry[:key_length]
        if key not in seen:
            seen[key] = (i, entry)
            continue
        first, earlier = seen[key]
        if conflicting_only and earlier == entry:
            continue
        shown = ", ".join(str(k) for k in key)
        detail = f" ({earlier[-1]} vs {entry[-1]})" if conflicting_only else ""
        raise SnapshotError(
            f"{where}.{name}[{i}]: {what} {shown} is listed twice, also at {name}[{first}]{detail}; "
            "a snapshot lists each once — the file was edited or merged by hand"
        )
