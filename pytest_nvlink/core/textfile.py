"""Reading suite, threshold and snapshot files as text: UTF-8 only, and every refusal says where.

A file saved by an editor in Windows-1252, a UTF-16 export, a binary file given by mistake, a
5000-digit integer or arrays nested thousands deep would otherwise surface as a Python traceback
(``UnicodeDecodeError``, ``ValueError``, ``RecursionError``) instead of one line naming the file.
Callers prefix the message with the file name and raise their own error type.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF8_BOM = "\ufeff"
MIB = 1 << 20


class UnreadableText(Exception):
    """Why a file cannot be read as text; the message omits the file name."""


def read_text_file(path: Path, max_bytes: int) -> str:
    """The file's UTF-8 text; ``FileNotFoundError``/``OSError`` pass through, other problems are UnreadableText."""
    return decode_utf8(read_file_bytes(path, max_bytes))


def read_file_bytes(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, refused as :func:`read_text_file` refuses it."""
    if path.is_dir():
        raise UnreadableText("is a folder, not a file")
    if path.exists() and not path.is_file():
        # /dev/zero or a pipe would never end; /dev/null would read as an empty file.
        raise UnreadableText("is not a regular file (a device, pipe or socket)")
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnreadableText(f"is larger than {max_bytes // MIB} MiB, far beyond any file of this kind")
    return data


def decode_utf8(data: bytes) -> str:
    """Decode UTF-8 (a leading byte-order mark is dropped) or say which line holds the first bad byte."""
    if data.startswith(_UTF16_BOMS):
        raise UnreadableText("is UTF-16 text (byte-order mark at the start); save it as UTF-8")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise UnreadableText(f"line {_line_of(data, nul)}: NUL byte: binary or UTF-16 content, expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _line_of(data, exc.start), exc.start - data.rfind(b"\n", 0, exc.start)
        raise UnreadableText(
            f"line {line}, column {column}: byte 0x{data[exc.start]:02x} is not UTF-8 "
            "(saved as Windows-1252 or Latin-1?); save the file as UTF-8"
        ) from None
    return text.removeprefix(_UTF8_BOM)


def parse_problem(exc: ValueError | RecursionError, text: str) -> str:
    """What a parser's ValueError or RecursionError means, with the line where it can be found."""
    if isinstance(exc, RecursionError):
        return "nested too deeply to read (arrays or tables nested hundreds of levels deep)"
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    found = re.search(rf"\d{{{limit + 1},}}", text) if limit and "integer string conversion" in str(exc) else None
    if found is not None:
        line = text.count("\n", 0, found.start()) + 1
        return f"line {line}: an integer with {len(found.group())} digits (more than {limit} cannot be read)"
    return str(exc)


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1
