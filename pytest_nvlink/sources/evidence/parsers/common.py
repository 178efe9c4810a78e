"""Shared helpers for the tool-output parsers: the one exception they raise and line handling.

Every parser turns text that it cannot read into :class:`ParseError` with a 1-based line number,
so that callers (the evidence loader, the measurement harness) need to catch exactly one type.
"""

from __future__ import annotations

import math
import re

_QUOTE_LIMIT = 120


class ParseError(ValueError):
    """Text that a parser cannot read; ``line_no`` is 1-based, 0 when no single line is to blame."""

    def __init__(self, message: str, line_no: int = 0) -> None:
        self.message = message
        self.line_no = line_no
        super().__init__(f"line {line_no}: {message}" if line_no else message)


def split_lines(text: str) -> list[str]:
    """Lines without their terminators; CRLF and lone CR (copy-paste from Windows) both end a line."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def quote(line: str) -> str:
    """The offending line, shortened, as a repr so that tabs and odd characters stay visible."""
    shown = line if len(line) <= _QUOTE_LIMIT else line[:_QUOTE_LIMIT] + "..."
    return repr(shown)


def bad_line(expected: str, line: str, line_no: int) -> ParseError:
    return ParseError(f"expected {expected}, got {quote(line)}", line_no)


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def parse_float(token: str) -> float | None:
    """A finite float, or None when the token is not one (``nan``/``inf`` are refused on purpose)."""
    if not _NUMBER.fullmatch(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None  # 1e400 overflows to inf


# What C's printf writes for a NaN or an infinity ("-nan", "nan", "inf", "-inf"), and Python's "infinity".
_NON_FINITE = re.compile(r"[-+]?(?:nan|inf(?:inity)?)", re.IGNORECASE)


def is_non_finite(token: str) -> bool:
    """Whether ``token`` is a printed NaN or infinity: a tool's figure gone wrong, never "no value"."""
    return _NON_FINITE.fullmatch(token.strip()) is not None


def non_finite_error(what: str, token: str, line: str, line_no: int) -> ParseError:
    """The error for a NaN/infinity in an evidence cell: it stops the run naming the file and line."""
    return ParseError(
        f"{what} is {token.strip()!r}, not a number: the tool's figure is broken ({quote(line)})", line_no
    )


def parse_int(token: str) -> int | None:
    return int(token) if re.fullmatch(r"[-+]?\d+", token) else None


def strip_ansi(text: str) -> str:
    """Drop terminal colour escapes that some captured logs carry."""
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
