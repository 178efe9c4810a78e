"""Versioned JSON snapshots of a probed node: save from a live run, replay anywhere.

The reader is strict: an unknown schema version, a missing required field or a value of the
wrong type is a :class:`SnapshotError` naming the file and the JSON path, never a half-read
node that would let checks pass on facts nobody measured.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar, Union

from pytest_nvlink import __version__
from pytest_nvlink.model import Node
from pytest_nvlink.values import value_problems

SCHEMA_VERSION = 1
SNAPSHOT_KIND = "pytest-nvlink-snapshot"

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


def save_snapshot(node: Node, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(snapshot_document(node), indent=1, sort_keys=False)
    path.write_text(text + "\n", encoding="utf-8")


def load_snapshot(path: Path) -> Node:
    """Read a snapshot file; the node's ``source`` becomes ``"replay"``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SnapshotError(f"{path}: snapshot file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{path}: not a readable JSON snapshot ({exc})") from None
    node = node_from_document(document, str(path))
    node.source = "replay"
    return node


def node_from_document(document: object, origin: str) -> Node:
    if not isinstance(document, dict) or document.get("kind") != SNAPSHOT_KIND:
        raise SnapshotError(f"{origin}: not a pytest-nvlink snapshot (missing kind={SNAPSHOT_KIND!r})")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SnapshotError(
            f"{origin}:schema_version: version {version!r} is not supported (this plugin reads {SCHEMA_VERSION})"
        )
    node = from_json(Node, document.get("node"), f"{origin}:node")
    problems = value_problems(node, "node")
    if problems:
        path, problem = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SnapshotError(f"{origin}:{path}: {problem}{more}")
    return node


def from_json(cls: type[T], data: object, where: str) -> T:
    """Build dataclass ``cls`` from parsed JSON, checking every field's type."""
    if not isinstance(data, dict):
        raise SnapshotError(f"{where}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise SnapshotError(f"{where}.{unknown[0]}: unknown field")
    kwargs: dict[str, Any] = {}
    for name, spec in known.items():
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], f"{where}.{name}")
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise SnapshotError(f"{where}.{name}: required field missing")
    return cls(**kwargs)


def _convert(hint: Any, value: object, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        (inner,) = [o for o in options if o is not type(None)]
        return _convert(inner, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise SnapshotError(f"{where}: expected a list")
        (item,) = typing.get_args(hint)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise SnapshotError(f"{where}: expected an object")
        _, item = typing.get_args(hint)
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value, where)  # type: ignore[arg-type]
    return _scalar(hint, value, where)


def _scalar(hint: Any, value: object, where: str) -> Any:
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint in (str, bool) and isinstance(value, hint):
        return value
    if hint is Any:
        return value
    raise SnapshotError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {type(value).__name__}")
