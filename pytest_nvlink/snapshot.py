"""Versioned JSON snapshots of a probed node: save from a live run, replay anywhere.

The reader is strict: an unknown schema version, a missing required field or a value of the
wrong type is a :class:`SnapshotError` naming the file and the JSON path, never a half-read
node that would let checks pass on facts nobody measured.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import tempfile
import types
import typing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar, Union

from pytest_nvlink import __version__
from pytest_nvlink.collector import collector_paused
from pytest_nvlink.model import Node
from pytest_nvlink.textfile import MIB, UnreadableText, parse_problem, read_text_file
from pytest_nvlink.values import value_problems

# Schema 2 adds the run's environment (versions, suite, thresholds, outcome) and the conditions of
# every measurement; schema-1 files are migrated on read (a handover snapshot must stay replayable).
SCHEMA_VERSION = 2
READABLE_SCHEMAS: tuple[int, ...] = (1, 2)
SNAPSHOT_KIND = "pytest-nvlink-snapshot"
# An 8-GPU snapshot with every measurement is ~200 KiB; a 72-GPU one stays well below this.
SNAPSHOT_MAX_BYTES = 64 * MIB

T = TypeVar("T")


class SnapshotError(Exception):
    """A snapshot file that cannot be read as a node."""


def node_to_dict(node: Node) -> dict[str, Any]:
    return dataclasses.asdict(node)


def snapshot_document(node: Node) -> dict[str, Any]:
    return {
        "kind": SNAPSHOT_KIND,
        "schema_version": SCHEMA_VERSION,
        "plugin_version": __version__,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "node": node_to_dict(node),
    }


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


def _file_mode(path: Path) -> int:
    """The mode a plain write would give: the old file's, else 0666 less the umask (mkstemp uses 0600)."""
    if path.is_file():
        return path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def save_snapshot(node: Node, path: Path) -> None:
    """Write atomically: a run interrupted mid-write leaves the previous file, never half a snapshot."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(snapshot_document(node), indent=1, sort_keys=False) + "\n"
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, _file_mode(path))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_snapshot(path: Path) -> Node:
    """Read a snapshot file; the node's ``source`` becomes ``"replay"``."""
    return load_snapshot_document(path)[0]


def load_snapshot_document(path: Path) -> tuple[Node, dict[str, Any]]:
    """The node (``source`` ``"replay"``) and the document's top-level fields (``created_utc``, ...)."""
    try:
        text = read_text_file(path, SNAPSHOT_MAX_BYTES)
    except FileNotFoundError:
        raise SnapshotError(f"{path}: snapshot file not found") from None
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnreadableText as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    with collector_paused():
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SnapshotError(f"{path}: line {exc.lineno}: not a readable JSON snapshot ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:
            raise SnapshotError(f"{path}: not a readable JSON snapshot ({parse_problem(exc, text)})") from None
        node = node_from_document(document, str(path))
    node.source = "replay"
    return node, {key: value for key, value in document.items() if key != "node"}


def node_from_document(document: object, origin: str) -> Node:
    if not isinstance(document, dict) or document.get("kind") != SNAPSHOT_KIND:
        raise SnapshotError(f"{origin}: not a pytest-nvlink snapshot (missing kind={SNAPSHOT_KIND!r})")
    version = document.get("schema_version")
    if version not in READABLE_SCHEMAS or isinstance(version, bool):
        shown = ", ".join(str(v) for v in READABLE_SCHEMAS)
        raise SnapshotError(
            f"{origin}:schema_version: version {version!r} is not supported (this plugin reads {shown})"
        )
    document = migrate_document(document)
    node = from_json(Node, document.get("node"), f"{origin}:node")
    _check_unique_entries(node, f"{origin}:node")
    _check_gpu_numbering(node, f"{origin}:node")
    problems = value_problems(node, "node")
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


def from_json(cls: type[T], data: object, where: str) -> T:
    """Build dataclass ``cls`` from parsed JSON, checking every field's type."""
    return _from_json(cls, data, where)  # type: ignore[no-any-return]


# Where a value sits, as (parent, field name or list index) links spelled out only for an error: a 72-GPU
# snapshot holds ~350,000 values, and writing each one's path as text cost a good part of the load.
_Where = str | tuple[Any, str | int]


def _where_text(where: _Where) -> str:
    parts: list[str | int] = []
    while isinstance(where, tuple):
        where, part = where
        parts.append(part)
    text = where
    for part in reversed(parts):
        text = f"{text}[{part}]" if isinstance(part, int) else f"{text}.{part}"
    return text


def _from_json(cls: Any, data: object, where: _Where) -> Any:
    if not isinstance(data, dict):
        raise SnapshotError(f"{_where_text(where)}: expected an object, got {type(data).__name__}")
    known, plan = _plan_of(cls)
    if not data.keys() <= known:
        raise SnapshotError(f"{_where_text(where)}.{sorted(set(data) - known)[0]}: unknown field")
    kwargs: dict[str, Any] = {}
    for name, hint, plain, required in plan:
        if name in data:
            value = data[name]
            # Most values are a str, int, float, bool or None exactly as declared: taken without a call.
            kwargs[name] = value if type(value) in plain else _convert(hint, value, (where, name))
        elif required:
            raise SnapshotError(f"{_where_text(where)}.{name}: required field missing")
    return cls(**kwargs)


_FieldPlan = tuple[str, Any, frozenset[type], bool]  # name, type hint, types taken as they are, required


@functools.cache
def _plan_of(cls: type[Any]) -> tuple[frozenset[str], tuple[_FieldPlan, ...]]:
    """A dataclass's field names and, per field, how to read it; worked out once per class, not per record."""
    hints = typing.get_type_hints(cls)
    plan = []
    for spec in dataclasses.fields(cls):
        kind, inner, optional = _shape(hints[spec.name])
        plain = {inner} if kind == "scalar" and inner in (str, int, float, bool) else set()
        if optional:
            plain.add(type(None))
        required = spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
        plan.append((spec.name, hints[spec.name], frozenset(plain), required))
    return frozenset(spec.name for spec in dataclasses.fields(cls)), tuple(plan)


@functools.cache
def _shape(hint: Any) -> tuple[str, Any, bool]:
    """(kind, inner hint, None allowed) of a field's type, worked out once per type rather than per value."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        (inner,) = [o for o in options if o is not type(None)]
        kind, item, _ = _shape(inner)
        return kind, item, type(None) in options
    if origin is list:
        return "list", typing.get_args(hint)[0], False
    if origin is dict:
        return "dict", typing.get_args(hint)[1], False
    return ("dataclass" if dataclasses.is_dataclass(hint) else "scalar"), hint, False


def _convert(hint: Any, value: object, where: _Where) -> Any:
    kind, inner, optional = _shape(hint)
    if kind == "scalar" and type(value) is inner:
        return value  # most values: a str, int, float or bool of exactly the declared type
    if value is None and optional:
        return None
    if kind == "list":
        if not isinstance(value, list):
            raise SnapshotError(f"{_where_text(where)}: expected a list")
        return [_convert(inner, v, (where, i)) for i, v in enumerate(value)]
    if kind == "dict":
        if not isinstance(value, dict):
            raise SnapshotError(f"{_where_text(where)}: expected an object")
        return {str(k): _convert(inner, v, (where, str(k))) for k, v in value.items()}
    if kind == "dataclass":
        return _from_json(inner, value, where)
    return _scalar(inner, value, where)


def _scalar(hint: Any, value: object, where: _Where) -> Any:
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint in (str, bool) and isinstance(value, hint):
        return value
    if hint is Any:
        return value
    raise SnapshotError(f"{_where_text(where)}: expected {getattr(hint, '__name__', hint)}, got {type(value).__name__}")
