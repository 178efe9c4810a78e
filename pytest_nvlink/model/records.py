"""Parsed JSON into the model's dataclasses, every field's type checked: snapshots and launch results.

A value of the wrong type, a missing required field or an unknown one is a :class:`SnapshotError`
naming the JSON path. Most of a large snapshot is long lists of plain records (15,336 figures at
72 GPUs), so the reader learns each record shape once and reads long lists field by field.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any, TypeVar, Union, cast

from pytest_nvlink.core.values import holds_no_number, must_be_positive, surely_possible

T = TypeVar("T")


class SnapshotError(Exception):
    """A snapshot file that cannot be read as a node."""


def from_json(cls: type[T], data: object, where: str, reading: Reading | None = None) -> T:
    """Build dataclass ``cls`` from parsed JSON, checking every field's type; ``reading`` notes suspect numbers."""
    return _from_json(cls, data, where, Reading() if reading is None else reading)  # type: ignore[no-any-return]


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


class Reading:
    """What one conversion noticed on its way: whether a number it read might be impossible.

    Every number is looked at as its record is built; while none could break a value rule, the reader
    skips the separate walk of the whole node, which finds, orders and counts the problems otherwise.
    """

    __slots__ = ("suspect", "tables")

    def __init__(self, *, tables: bool = True) -> None:
        self.suspect = False
        self.tables = tables  # whether a list of records may come as a table (snapshot schema 3 on)


def _from_json(cls: Any, data: object, where: _Where, reading: Reading) -> Any:
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


def _records(cls: Any, items: list[Any], where: _Where, reading: Reading) -> list[Any]:
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


def _records_by_field(cls: Any, items: list[Any], reading: Reading) -> list[Any] | None:
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
    return _from_columns(cls, columns, rules, reading)


def _from_columns(
    cls: Any, columns: list[Sequence[Any]], rules: tuple[_ColumnRule, ...], reading: Reading
) -> list[Any] | None:
    """The records whose fields' values ``columns`` hold, in the class's order; None: a value not plain."""
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

    def build(self, cls: Any, data: dict[str, Any], reading: Reading) -> Any:
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


def _convert(hint: Any, value: object, where: _Where, reading: Reading) -> Any:
    kind, inner, optional = _shape(hint)
    if kind == "scalar" and type(value) is inner:
        return value  # most values: a str, int, float or bool of exactly the declared type
    if value is None and optional:
        return None
    if kind == "list":
        if type(value) is dict and dataclasses.is_dataclass(inner):
            return _table_records(inner, value, where, reading)
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


def table_of(cls: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Records of a plain class (as ``dataclasses.asdict`` gives them) as a table, one list per field.

    ``{"columns": {field: [its value in each record], ...}}``; a dict field's column lists each distinct
    dict once: ``{"distinct": [dicts], "at": [index into distinct, or null, per record]}``. A 72-GPU
    node's 15,336 figures decode ~5x faster so than as objects, and the file is ~4x smaller.
    """
    plan = _plan_of(cls)
    if plan.columns is None:
        raise TypeError(f"{cls.__name__} has fields that are records or lists: no table")
    columns: dict[str, Any] = {}
    for name, (_, inner, _) in zip(plan.order, plan.columns, strict=True):
        values = [record[name] for record in records]
        columns[name] = values if inner is None else _distinct_of(values)
    return {"columns": columns}


def _distinct_of(values: list[dict[str, Any] | None]) -> dict[str, list[Any]]:
    distinct: list[dict[str, Any]] = []
    first: dict[tuple[tuple[str, Any], ...], int] = {}
    at: list[int | None] = []
    for value in values:
        if value is None:
            at.append(None)
            continue
        key = tuple(value.items())
        if key not in first:
            first[key] = len(distinct)
            distinct.append(value)
        at.append(first[key])
    return {"distinct": distinct, "at": at}


def _table_records(cls: Any, table: dict[str, Any], where: _Where, reading: Reading) -> list[Any]:
    """The records of a :func:`table_of` table; anything it could not have written is named."""
    plan = _plan_of(cls)
    if plan.columns is None:
        raise SnapshotError(f"{_where_text(where)}: expected a list")
    if not reading.tables:
        raise SnapshotError(f"{_where_text(where)}: expected a list (tables of records came with schema 3)")
    if table.keys() != {"columns"} or type(table["columns"]) is not dict:
        raise SnapshotError(
            f'{_where_text(where)}: expected a list of records or a table {{"columns": {{field: [values]}}}}'
        )
    given, at = table["columns"], (where, "columns")
    unknown = [name for name in given if name not in plan.known]
    if unknown:
        raise SnapshotError(f"{_where_text((at, unknown[0]))}: unknown field")
    columns: list[Sequence[Any]] = []
    rules = list(plan.columns)
    for name, rule in zip(plan.order, plan.columns, strict=True):
        if name not in given:
            raise SnapshotError(f"{_where_text((at, name))}: column missing (a table lists every field)")
        column = given[name]
        if rule[1] is not None and type(column) is dict:
            column, rules[len(columns)] = _distinct_column(column, (at, name), rule, reading)
        elif type(column) is not list:
            raise SnapshotError(f"{_where_text((at, name))}: expected a list of one value per record")
        columns.append(column)
    _check_lengths(plan.order, columns, at)
    records = _from_columns(cls, list(columns), tuple(rules), reading)
    if records is None:  # a value not taken as it is: record by record, which converts it or names it
        records = _records(
            cls, [dict(zip(plan.order, row, strict=True)) for row in zip(*columns, strict=True)], where, reading
        )
    return records


def _distinct_column(
    column: dict[str, Any], where: _Where, rule: _ColumnRule, reading: Reading
) -> tuple[list[Any], _ColumnRule]:
    """A dict field's column, one dict (or None) per record, and the rule its values still need.

    Each distinct dict is looked at once (15,336 figures share one or two conditions): when all are
    plain, every record gets its own copy of its checked dict. Otherwise each record gets the shared
    dict, and reading record by record names the first that is not plain.
    """
    distinct, indices = _distinct_parts(column, where)
    read = _read_column(distinct, rule)
    if read is None or (None in indices and _NONE_TYPE not in rule[0]):  # a required dict left out
        return [None if i is None else distinct[i] for i in indices], rule
    checked, numbers = read
    if numbers and not reading.suspect:
        reading.suspect = not (surely_possible(numbers) if rule[2] else surely_possible((), numbers))
    if None in indices:
        return [None if i is None else dict(checked[i]) for i in indices], _CHECKED_DICTS
    return list(map(dict, map(checked.__getitem__, cast("list[int]", indices)))), _CHECKED_DICTS


_CHECKED_DICTS: _ColumnRule = (frozenset({dict, _NONE_TYPE}), None, False)  # copies made of checked dicts


def _distinct_parts(column: dict[str, Any], where: _Where) -> tuple[list[Any], list[int | None]]:
    """``distinct`` and ``at``: each distinct entry checked to be an object, each index to point into it or be null."""
    distinct, at = column.get("distinct"), column.get("at")
    if column.keys() != {"distinct", "at"} or type(distinct) is not list or type(at) is not list:
        raise SnapshotError(
            f'{_where_text(where)}: expected a list, or {{"distinct": [objects], "at": [index or null per record]}}'
        )
    # Only objects: table_of lists each distinct dict, and a record without one has null in at. A null
    # here once reached dict() as a TypeError (and a replay as an INTERNALERROR); others named a record.
    if not {*map(type, distinct)} <= _DICT:
        first = next(i for i, value in enumerate(distinct) if type(value) is not dict)
        entry = distinct[first]
        got = "null (a record without one has null in at)" if entry is None else type(entry).__name__
        raise SnapshotError(f"{_where_text(((where, 'distinct'), first))}: expected an object, got {got}")
    # Not bool (True would point at distinct[1]), not negative, not beyond the list.
    if {*map(type, at)} <= {int, _NONE_TYPE} and all(i is None or 0 <= i < len(distinct) for i in set(at)):
        return distinct, at
    first = next(
        i
        for i, value in enumerate(at)
        if value is not None and (type(value) is not int or not 0 <= value < len(distinct))
    )
    indices = f"0..{len(distinct) - 1}" if distinct else "distinct is empty"
    raise SnapshotError(
        f"{_where_text(((where, 'at'), first))}: {at[first]!r} is not an index into distinct ({indices}) or null"
    )


def _check_lengths(names: tuple[str, ...], columns: list[Sequence[Any]], where: _Where) -> None:
    count = len(columns[0])
    for name, column in zip(names, columns, strict=True):
        if len(column) != count:
            raise SnapshotError(
                f"{_where_text((where, name))}: {len(column)} value(s) where column {names[0]} has {count}; "
                "a table holds one value per record in every column"
            )
