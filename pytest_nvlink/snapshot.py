"""Versioned JSON snapshots of a probed node: save from a live run, replay anywhere.

The reader is strict: an unknown schema version, a missing required field or a value of the
wrong type is a :class:`SnapshotError` naming the file and the JSON path, never a half-read
node that would let checks pass on facts nobody measured.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import os
import tempfile
import types
import typing
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from itertools import chain
from pathlib import Path
from typing import Any, TypeVar, Union

from pytest_nvlink import __version__
from pytest_nvlink.collector import collector_paused
from pytest_nvlink.model import Node
from pytest_nvlink.textfile import MIB, UnreadableText, decode_utf8, parse_problem, read_file_bytes
from pytest_nvlink.values import holds_no_number, must_be_positive, surely_possible, value_problems

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
        data = read_file_bytes(path, SNAPSHOT_MAX_BYTES)
    except FileNotFoundError:
        raise SnapshotError(f"{path}: snapshot file not found") from None
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnreadableText as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    with collector_paused():
        node, document = _read_document(data, str(path))
        top = {key: value for key, value in document.items() if key != "node"}
        # Freed while the collector rests: its next pass would otherwise walk the parsed tree's containers.
        del document
    node.source = "replay"
    return node, top


def _read_document(data: bytes, origin: str) -> tuple[Node, dict[str, Any]]:
    """The node and the document, read exactly as the standard library's decoder reads the UTF-8 text.

    orjson (the ``fleet`` extra) decodes a large snapshot ~2x faster, but refuses what the standard
    library takes (NaN, 1e400, lone surrogates) and turns integers beyond 64 bits into floats. So
    anything orjson refuses, any float outside the node and any snapshot error is decoded again by the
    standard library, whose reading (or message) stands; inside the node such a float could only sit
    in a float field, where it is the value float() of the integer gives. orjson reads the bytes as
    they are (it refuses a byte-order mark, bytes that are not UTF-8 and raw NUL bytes, which the text
    decoding then names), so the 8 MB of a 72-GPU snapshot are not copied into a str first.
    """
    fast = _fast_decoder()
    if fast is not None:
        try:
            document = fast(data)
        except ValueError:  # orjson.JSONDecodeError
            pass
        else:
            if isinstance(document, dict) and not any(
                _holds_float(value) for key, value in document.items() if key != "node"
            ):
                try:
                    return node_from_document(document, origin), document
                except SnapshotError:
                    pass
    try:
        text = decode_utf8(data)
    except UnreadableText as exc:
        raise SnapshotError(f"{origin}: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{origin}: line {exc.lineno}: not a readable JSON snapshot ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise SnapshotError(f"{origin}: not a readable JSON snapshot ({parse_problem(exc, text)})") from None
    return node_from_document(document, origin), document


@functools.cache
def _fast_decoder() -> Callable[[bytes], Any] | None:
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


def _holds_float(value: object) -> bool:
    if isinstance(value, dict):
        return any(_holds_float(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_float(item) for item in value)
    return isinstance(value, float)


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
    reading = _Reading()
    node: Node = _from_json(Node, document.get("node"), f"{origin}:node", reading)
    _check_unique_entries(node, f"{origin}:node")
    _check_gpu_numbering(node, f"{origin}:node")
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
    return _from_json(cls, data, where, _Reading())  # type: ignore[no-any-return]


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


class _Reading:
    """What one conversion noticed on its way: whether a number it read might be impossible.

    Every number is looked at as its record is built; while none could break a value rule, the reader
    skips the separate walk of the whole node, which finds, orders and counts the problems otherwise.
    """

    __slots__ = ("suspect",)

    def __init__(self) -> None:
        self.suspect = False


def _from_json(cls: Any, data: object, where: _Where, reading: _Reading) -> Any:
    if not isinstance(data, dict):
        raise SnapshotError(f"{_where_text(where)}: expected an object, got {type(data).__name__}")
    plan = _plan_of(cls)
    # Records of one kind mostly come with the same fields holding the same types: a shape seen before
    # says at once whether every value can be taken as it is, as most of a large snapshot can.
    shape = (tuple(data), tuple(map(type, data.values())))
    try:
        shortcut = plan.shortcuts[shape]
    except KeyError:
        shortcut = plan.learn(shape)
    if shortcut is not None:
        record = shortcut.build(cls, data, reading)
        if record is not None:
            return record
    if not data.keys() <= plan.known:
        raise SnapshotError(f"{_where_text(where)}.{sorted(set(data) - plan.known)[0]}: unknown field")
    kwargs: dict[str, Any] = {}
    for name, hint, plain, required in plan.fields:
        if name in data:
            value = data[name]
            # Most values are a str, int, float, bool or None exactly as declared: taken without a call.
            kwargs[name] = value if type(value) in plain else _convert(hint, value, (where, name), reading)
        elif required:
            raise SnapshotError(f"{_where_text(where)}.{name}: required field missing")
    record = cls(**kwargs)
    if not reading.suspect and not all(_possible(kwargs.get(name), positive) for name, positive in plan.numbers):
        reading.suspect = True
    return record


def _records(cls: Any, items: list[Any], where: _Where, reading: _Reading) -> list[Any]:
    """A list of records: those of a shape known to be plain built on the spot, the others the long way."""
    if len(items) >= _COLUMNS_FROM:
        records = _records_by_field(cls, items, reading)
        if records is not None:
            return records
    shortcuts = _plan_of(cls).shortcuts
    records = []
    for at, data in enumerate(items):
        if type(data) is dict:
            shortcut = shortcuts.get((tuple(data), tuple(map(type, data.values()))))
            record = None if shortcut is None else shortcut.build(cls, data, reading)
            if record is not None:
                records.append(record)
                continue
        records.append(_from_json(cls, data, (where, at), reading))
    return records


_COLUMNS_FROM = 16  # below this many records, looking at them field by field saves nothing


def _records_by_field(cls: Any, items: list[Any], reading: _Reading) -> list[Any] | None:
    """The records of a list whose dicts all hold every field, each with values taken as they are.

    A large snapshot is mostly such lists (15,336 figures at 72 GPUs). Looking at each field's values
    across the whole list (types, numbers, the str keys of dict fields) runs in the interpreter's own
    loops rather than once per record. None for any other list, or any value not taken as it is: the
    record-by-record way reads it, converts or names it.
    """
    plan = _plan_of(cls)
    rules = plan.columns
    if rules is None:
        return None
    try:  # each a dict (any other JSON value raises) with every field, and no more: exactly the class's
        if {*map(len, items)} != {len(rules)}:
            return None
        columns: list[Sequence[Any]] = list(zip(*map(plan.row, items), strict=False))  # rows of equal length
    except (KeyError, TypeError):
        return None
    suspect = reading.suspect
    for at, rule in enumerate(rules):
        read = _read_column(columns[at], rule)
        if read is None:
            return None
        columns[at], numbers = read
        if numbers and not suspect:
            suspect = not (surely_possible(numbers) if rule[2] else surely_possible((), numbers))
    reading.suspect = suspect
    return list(map(cls, *columns))


def _read_column(column: Sequence[Any], rule: _ColumnRule) -> tuple[Sequence[Any], Sequence[Any]] | None:
    """One field's values as a record takes them (dicts copied) and the numbers among them; None: not plain."""
    taken, inner, _ = rule
    kinds = {*map(type, column)}
    if kinds <= taken:
        if not kinds & _NUMBERS:
            return column, ()
        return column, (tuple(filter(_NOT_NONE, column)) if _NONE_TYPE in kinds else column)
    if inner is None or not kinds <= _DICT | taken:  # None only where the field is optional
        return None
    present = tuple(filter(_NOT_NONE, column)) if _NONE_TYPE in kinds else column
    if not {*map(type, chain.from_iterable(present))} <= _STR:  # the keys
        return None
    values = tuple(chain.from_iterable(map(dict.values, present)))
    if not {*map(type, values)} <= inner:
        return None
    # A node shares nothing with the document it was read from.
    copies = list(map(dict, column)) if present is column else [None if v is None else dict(v) for v in column]
    return copies, (values if inner & _NUMBERS else ())


def _possible(value: object, positive: bool) -> bool:
    """Whether a field's value surely holds no impossible number; records inside were judged when built."""
    if value is None or isinstance(value, (str, bool)) or dataclasses.is_dataclass(value):
        return True
    if isinstance(value, (int, float)):
        return surely_possible((value,)) if positive else surely_possible((), (value,))
    if isinstance(value, list):
        return all(_possible(item, positive) for item in value)
    if isinstance(value, dict):
        return all(_possible(item, positive) for item in value.values())
    return False  # anything else (an Any field): the walk judges it


_FieldPlan = tuple[str, Any, frozenset[type], bool]  # name, type hint, types taken as they are, required
_SHAPES_KEPT = 64  # per class; a file of ever new shapes still reads, only without shortcuts


@dataclasses.dataclass(frozen=True)
class _Shortcut:
    """How to build a record of one shape whose values are all taken as they are."""

    # (name, value types taken as they are, must be positive, holds numbers) of each dict field
    dicts: tuple[tuple[str, frozenset[type], bool, bool], ...]
    positive: Callable[[dict[str, Any]], tuple[Any, ...]]  # the record's numbers that must be > 0
    not_negative: Callable[[dict[str, Any]], tuple[Any, ...]]  # and those that must not be negative
    # A record with every field: its values in the class's order, passed by position (parsing a dozen
    # keyword arguments costs more than everything else done for the record). None: by keyword.
    arguments: Callable[[dict[str, Any]], tuple[Any, ...]] | None

    def build(self, cls: Any, data: dict[str, Any], reading: _Reading) -> Any:
        """The record, or None when a dict field holds other than plain values (the long way tells why)."""
        if self.dicts:
            data = dict(data)  # its dicts are replaced by copies: a node shares nothing with the document
            for name, types_taken, positive, numeric in self.dicts:
                value = data[name]
                if types_taken is _STR:  # keys and values: one look
                    if not {*map(type, value), *map(type, value.values())} <= _STR:
                        return None
                elif not ({*map(type, value.values())} <= types_taken and {*map(type, value)} <= _STR):
                    return None
                data[name] = dict(value)
                if numeric and not reading.suspect:
                    numbers = tuple(value.values())
                    reading.suspect = not (surely_possible(numbers) if positive else surely_possible((), numbers))
        if not reading.suspect:
            reading.suspect = not surely_possible(self.positive(data), self.not_negative(data))
        return cls(**data) if self.arguments is None else cls(*self.arguments(data))


_STR = frozenset({str})
_SCALARS = (str, int, float, bool)
_NONE_TYPE: type = type(None)
_DICT = frozenset({dict})
_NUMBERS = {int, float}
_NOT_NONE = functools.partial(operator.is_not, None)
# Per field of a class read field by field: the value types taken as they are; for a dict field the
# types its values may have (None otherwise); whether its numbers must be > 0 (else not negative).
_ColumnRule = tuple[frozenset[type], frozenset[type] | None, bool]


@dataclasses.dataclass
class _ClassPlan:
    """A dataclass's field names and, per field, how to read it; worked out once per class, not per record."""

    known: frozenset[str]
    required: frozenset[str]
    fields: tuple[_FieldPlan, ...]
    numbers: tuple[tuple[str, bool], ...]  # fields that can hold numbers outside records, must be positive
    order: tuple[str, ...]  # the field names in the class's order, when __init__ takes every one of them
    shortcuts: dict[tuple[tuple[str, ...], tuple[type, ...]], _Shortcut | None]
    # How to read a list of these field by field; None when a field holds records or lists.
    columns: tuple[_ColumnRule, ...] | None = None
    row: Callable[[dict[str, Any]], tuple[Any, ...]] = tuple

    def learn(self, shape: tuple[tuple[str, ...], tuple[type, ...]]) -> _Shortcut | None:
        shortcut = self._shortcut(*shape)
        if len(self.shortcuts) < _SHAPES_KEPT:
            self.shortcuts[shape] = shortcut
        return shortcut

    def _shortcut(self, names: tuple[str, ...], kinds: tuple[type, ...]) -> _Shortcut | None:
        if not set(names) <= self.known or not self.required <= set(names):
            return None  # the long way names the field
        hints = {name: (hint, plain) for name, hint, plain, _ in self.fields}
        dicts: list[tuple[str, frozenset[type], bool, bool]] = []
        positive: list[str] = []
        not_negative: list[str] = []
        for name, kind in zip(names, kinds, strict=True):
            hint, plain = hints[name]
            if kind in plain:
                if kind is int or kind is float:
                    (positive if must_be_positive(name) else not_negative).append(name)
                continue
            shape, inner, _ = _shape(hint)
            if kind is not dict or shape != "dict" or inner not in _SCALARS:
                return None
            taken = _STR if inner is str else frozenset({inner})
            dicts.append((name, taken, must_be_positive(name), inner in (int, float)))
        complete = bool(self.order) and len(names) == len(self.order)  # names are known and distinct
        arguments = operator.itemgetter(*self.order) if complete else None
        return _Shortcut(tuple(dicts), _values_of(positive), _values_of(not_negative), arguments)


def _values_of(names: list[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    if len(names) > 1:
        return operator.itemgetter(*names)
    return (lambda data: (data[names[0]],)) if names else (lambda data: ())


@functools.cache
def _plan_of(cls: type[Any]) -> _ClassPlan:
    hints = typing.get_type_hints(cls)
    fields, numbers, required = [], [], set()
    for spec in dataclasses.fields(cls):
        kind, inner, optional = _shape(hints[spec.name])
        plain = {inner} if kind == "scalar" and inner in _SCALARS else set()
        if optional:
            plain.add(type(None))
        if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            required.add(spec.name)
        fields.append((spec.name, hints[spec.name], frozenset(plain), spec.name in required))
        if not (dataclasses.is_dataclass(inner) or holds_no_number(hints[spec.name])):
            numbers.append((spec.name, must_be_positive(spec.name)))
    known = frozenset(spec.name for spec in dataclasses.fields(cls))
    # Passing values by position needs an __init__ taking every field in order (no field left out of it).
    order = tuple(spec.name for spec in dataclasses.fields(cls)) if all(s.init for s in dataclasses.fields(cls)) else ()
    plan = _ClassPlan(known, frozenset(required), tuple(fields), tuple(numbers), order, {})
    if len(order) > 1:
        plan.columns = _column_rules(fields)
        plan.row = operator.itemgetter(*order)
    return plan


def _column_rules(fields: list[_FieldPlan]) -> tuple[_ColumnRule, ...] | None:
    rules: list[_ColumnRule] = []
    for name, hint, plain, _ in fields:
        kind, inner, _ = _shape(hint)
        if kind == "dict" and inner in _SCALARS:
            rules.append((plain, frozenset({inner}), must_be_positive(name)))
        elif kind == "scalar" and inner in _SCALARS:
            rules.append((plain, None, must_be_positive(name)))
        else:
            return None
    return tuple(rules)


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


def _convert(hint: Any, value: object, where: _Where, reading: _Reading) -> Any:
    kind, inner, optional = _shape(hint)
    if kind == "scalar" and type(value) is inner:
        return value  # most values: a str, int, float or bool of exactly the declared type
    if value is None and optional:
        return None
    if kind == "list":
        if not isinstance(value, list):
            raise SnapshotError(f"{_where_text(where)}: expected a list")
        if dataclasses.is_dataclass(inner):
            return _records(inner, value, where, reading)
        return [_convert(inner, v, (where, i), reading) for i, v in enumerate(value)]
    if kind == "dict":
        if not isinstance(value, dict):
            raise SnapshotError(f"{_where_text(where)}: expected an object")
        return {str(k): _convert(inner, v, (where, str(k)), reading) for k, v in value.items()}
    if kind == "dataclass":
        return _from_json(inner, value, where, reading)
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
