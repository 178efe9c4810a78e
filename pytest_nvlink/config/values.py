"""Value checks shared by the suite and threshold readers, and the error they raise.

Each check returns None for a usable value or the one phrase saying what is wrong with it; the
reader prefixes ``file:key``. Nothing here imports pytest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    """A suite or threshold file that cannot be used; the message starts with ``file:key``."""


Check = Callable[[Any], str | None]


def int_range(low: int, high: int) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"expected an integer, got {type(value).__name__}"
        return None if low <= value <= high else f"{value} is outside {low}..{high}"

    return check


def number(low: float, high: float, *, low_allowed: bool = False) -> Check:
    """A finite number in a plausible range: inf, NaN or 1e400 would silently disable a check."""

    def check(value: Any) -> str | None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"expected a number, got {type(value).__name__}"
        if not math.isfinite(value):
            return f"{value} is not a finite number"
        if value < low or (value == low and not low_allowed):
            return f"{value} must be {'at least' if low_allowed else 'greater than'} {low:g}"
        return None if value <= high else f"{value} must be at most {high:g}"

    return check


def boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"expected true or false, got {type(value).__name__}"


def text(value: Any) -> str | None:
    return None if isinstance(value, str) and value.strip() else "expected a non-empty string"


def divides(count: int) -> Check:
    """A positive integer that splits ``count`` evenly (GPUs per host of a suite's GPUs)."""

    def check(value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"expected a positive integer, got {value!r}"
        return None if count % value == 0 else f"{value} does not divide suite.gpu_count = {count}"

    return check


_MAX_TABLE_DEPTH = 8  # suite and threshold keys are at most three tables deep


def check_nesting(path: Path, document: dict[str, Any]) -> None:
    """Refuse absurdly nested tables up front; the recursive readers would overflow the stack."""
    pending: list[tuple[list[str], object]] = [([], document)]
    while pending:
        keys, value = pending.pop()
        if len(keys) > _MAX_TABLE_DEPTH:
            shown = ".".join(keys[:4])
            raise ConfigError(f"{path}:{shown}...: tables nested deeper than {_MAX_TABLE_DEPTH} levels")
        if isinstance(value, dict):
            pending.extend(([*keys, str(key)], item) for key, item in value.items())
