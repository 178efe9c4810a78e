"""Impossible numbers in a node: NaN, infinity, negative counters, zero speeds.

A snapshot or evidence file that says a link runs at NaN GB/s, or that link 8 saw -3 replay
errors (cancelling link 7's +3 in a per-GPU sum), must not replay green. Every number in the model
is checked by what its field means; the answer is a list of ``(path, problem)`` where ``path`` is
the JSON path of the value (``gpus[3].nvlinks[7].speed_gbps``), so that callers can name file and key.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Sequence
from typing import Any, Union

# Fields whose value must be strictly positive: a rate, a duration, a size, a generation.
_POSITIVE: frozenset[str] = frozenset(
    {
        "speed_gbps",
        "version",
        "value",  # P2PMeasurement: GB/s or microseconds, both > 0
        "bytes_copied",
        "size_bytes",
        "world_size",
        "time_us",
        "pcie_gen_current",
        "pcie_gen_max",
        "pcie_gen_gpu_max",
        "pcie_gen_loaded",
        "pcie_width_current",
        "pcie_width_max",
    }
)


# Fields of a parser's result that are never negative; its other numbers (nccl-tests prints root -1
# for rootless collectives) are only required to be finite.
_NEVER_NEGATIVE: frozenset[str] = frozenset(
    {"errors", "link", "index", "busbw_gbps", "algbw_gbps", "nvlink_bytes", "pcie_bytes"}
)


def value_problems(obj: object, path: str = "") -> list[tuple[str, str]]:
    """Every impossible number under ``obj`` (a model dataclass), with its JSON path."""
    found: list[tuple[Any, str]] = []
    _walk(obj, path, "", found, strict=True, failed=False)
    return [(_path_text(where), problem) for where, problem in found]


def parsed_value_problems(obj: object) -> list[tuple[str, str]]:
    """Impossible numbers in a parser's result, before merging can hide them (a max() over counters)."""
    found: list[tuple[Any, str]] = []
    _walk(obj, "", "", found, strict=False, failed=False)
    return [(_path_text(where), problem) for where, problem in found]


def _walk(obj: object, path: Any, name: str, found: list[tuple[Any, str]], *, strict: bool, failed: bool) -> None:
    # ``path`` is kept as (parent, field name or list index) links and spelled out only for a problem: a
    # 72-GPU node holds ~300,000 values, and writing each one's path as text cost most of the check.
    if obj is None or isinstance(obj, (str, bool)):
        return  # most of a large node: nothing to judge, and cheaper to rule out first
    if isinstance(obj, (int, float)):
        problem = _number_problem(obj, name, strict=strict, failed=failed)
        if problem:
            found.append((path, problem))
    elif isinstance(obj, (list, tuple)):
        for index, item in enumerate(obj):
            _walk(item, (path, index), name, found, strict=strict, failed=failed)
    elif isinstance(obj, dict):
        # Counter dicts (errors, errors_run) inherit the rule of the field that holds them.
        for key, item in obj.items():
            _walk(item, (path, str(key)), name, found, strict=strict, failed=failed)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # A measurement that failed (a hung nccl-tests run) reached no size or rank count: 0 is honest there.
        failed = failed or bool(getattr(obj, "error", None))
        for field_name in _fields_with_numbers(type(obj)):
            item = getattr(obj, field_name)
            kind = type(item)
            if (kind is float or kind is int) and 0 < item < math.inf:
                continue  # positive and finite breaks no rule; most numbers of a large node are, so no call
            _walk(item, (path, field_name), field_name, found, strict=strict, failed=failed)


def must_be_positive(name: str) -> bool:
    """Whether numbers of field ``name`` must be greater than 0 (a rate, a duration, a size, a generation)."""
    return name in _POSITIVE


def surely_possible(positive: Sequence[float], not_negative: Sequence[float] = ()) -> bool:
    """True when no number (ints and floats, no bools) can break a rule of :func:`value_problems`.

    A quick answer for a whole record at once, its numbers grouped by field (see :func:`must_be_positive`):
    finite, and greater than 0 or not negative, breaks no rule under any failed measurement. False only
    means "walk it and see".
    """
    try:
        # NaN or infinity anywhere leaves the sum not finite (min() can miss a NaN); so does an overflow.
        total = sum(positive) + sum(not_negative)
    except OverflowError:  # an int beyond any float beside floats: let the walk judge it
        return False
    return total - total == 0 and (not positive or min(positive) > 0) and (not not_negative or min(not_negative) >= 0)


def _path_text(path: Any) -> str:
    parts: list[str | int] = []
    while isinstance(path, tuple):
        path, part = path
        parts.append(part)
    text = str(path)
    for part in reversed(parts):
        text = f"{text}[{part}]" if isinstance(part, int) else _join(text, part)
    return text


@functools.cache
def _fields_with_numbers(cls: type[Any]) -> tuple[str, ...]:
    """The fields whose declared type can hold a number, in order; text and flags need no walk."""
    hints = typing.get_type_hints(cls)
    return tuple(spec.name for spec in dataclasses.fields(cls) if not holds_no_number(hints[spec.name]))


def holds_no_number(hint: Any) -> bool:
    if hint in (str, bool, type(None)):
        return True
    arguments = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType, list):
        return all(holds_no_number(argument) for argument in arguments)
    if origin is dict:
        return holds_no_number(arguments[1])  # keys become the path, only values are judged
    return False  # numbers, dataclasses, Any, anything else: walked


def _number_problem(value: float, name: str, *, strict: bool, failed: bool = False) -> str | None:
    if not math.isfinite(value):
        return f"{value} is not a finite number"
    if name in _POSITIVE and (value < 0 if failed else value <= 0):
        return f"{value} is impossible here (must be greater than 0)"
    # Indices, counters, byte counts and bandwidths are never negative.
    if value < 0 and (strict or name in _NEVER_NEGATIVE):
        return f"{value} is impossible here (must not be negative)"
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# Path prefix in the node -> the evidence family whose files filled it (most specific first).
_FAMILY_OF_PATH: tuple[tuple[str, str], ...] = (
    (".errors", "nvlink_errors"),
    (".nvlinks", "nvlinks"),
    ("measurements.p2p", "p2p_bandwidth"),
    ("measurements.host_link", "host_link"),
    ("measurements.collectives", "collectives"),
    ("measurements.nccl", "nccl_transport"),
    ("gpus", "inventory"),
    ("paths", "paths"),
    ("p2p", "p2p"),
)


def evidence_value_error(node: object, provenance: dict[str, str], texts: dict[str, str]) -> str | None:
    """``file:line: key: problem`` for the first impossible number of an evidence node, else None.

    Parsed values no longer carry their line, so the line is found again by looking for the number
    in the files that filled that family of facts; when it cannot be found the files are named.
    """
    problems = value_problems(node)
    if not problems:
        return None
    path, problem = problems[0]
    family = next((fam for marker, fam in _FAMILY_OF_PATH if marker in path or path.startswith(marker)), "")
    files = [name.strip() for name in provenance.get(family, "").split(",") if name.strip()]
    bad = _number_of(problem)
    for name in files:
        line = _line_of(texts.get(name, ""), bad)
        if line is not None:
            return f"{name}:{line}: {path}: {problem}"
    return f"{', '.join(files) or 'evidence'}: {path}: {problem}"


def parsed_value_error(result: object, name: str, text: str) -> str | None:
    """``file:line: key: problem`` for the first impossible number a parser read from one file."""
    problems = parsed_value_problems(result)
    if not problems:
        return None
    path, problem = problems[0]
    line = _line_of(text, _number_of(problem))
    return f"{name}:{line}: {path}: {problem}" if line is not None else f"{name}: {path}: {problem}"


def _number_of(problem: str) -> str:
    return problem.split(" ", 1)[0]


def _line_of(text: str, number: str) -> int | None:
    try:
        wanted = float(number)
    except ValueError:
        return None
    for line_no, line in enumerate(text.splitlines(), start=1):
        for token in line.replace(",", " ").replace("|", " ").split():
            try:
                if float(token) == wanted or (math.isnan(wanted) and math.isnan(float(token))):
                    return line_no
            except ValueError:
                continue
    return None
