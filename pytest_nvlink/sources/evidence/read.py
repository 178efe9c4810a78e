"""Reading evidence files: every file of the given paths as text, and why one cannot be used.

A file that cannot be read, or read as text, is an :class:`EvidenceError`: a file the user handed in
and we ignored would make a verdict look better covered than it is.
"""

from __future__ import annotations

import codecs
import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_nvlink.sources.evidence.merge import EvidenceError
from pytest_nvlink.sources.evidence.parsers import detect
from pytest_nvlink.sources.evidence.parsers.common import ParseError
from pytest_nvlink.sources.evidence.parsers.kernel_log import KIND as KERNEL_LOG
from pytest_nvlink.sources.evidence.parsers.prefixes import strip_prefixes

__all__ = ["Loaded", "Pending", "read_files"]


@dataclass
class Loaded:
    name: str  # how messages and provenance name the file (or the part of a file)
    text: str
    file: str = ""  # the file the text came from; notes are listed per file
    first_line: int = 1  # the file line the text starts on, for messages about a part of a file
    tray: str | None = None  # the host a "host: NAME" line before the text names (rack evidence)

    def where(self, line_no: int) -> str:
        return f"{self.file or self.name}:{self.first_line - 1 + line_no}" if line_no else self.file or self.name


@dataclass
class Pending:
    """What is kept for the end of the load: notes per file, and outputs merged together at the end."""

    notes: dict[str, list[str]] = field(default_factory=dict)  # file -> notes, in the order found
    later: dict[str, list[Loaded]] = field(default_factory=dict)  # format name -> its outputs, in order

    def note(self, file: str, text: str) -> None:
        notes = self.notes.setdefault(file, [])
        if text not in notes:  # several outputs of one file (a run per GPU) can say the same thing once
            notes.append(text)


def read_files(paths: list[Path], exclude: Sequence[str], pending: Pending) -> list[Loaded]:
    """Every file of ``paths`` (directories recursively) as text; unusable ones are reported together."""
    loaded: list[Loaded] = []
    unusable: list[str] = []
    for path in paths:
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                pattern = _excluded_by(file, path, exclude)
                if pattern is not None:
                    pending.note(str(file), f"not used: excluded by --nvlink-evidence-exclude={pattern}")
                    continue
                text, problem = _read(file, pending)
                if problem is not None:
                    unusable.append(f"{file} ({problem})")
                else:
                    loaded.append(Loaded(str(file), text, str(file)))
        elif path.is_file():
            text, problem = _read(path, pending)
            if problem is not None:
                raise EvidenceError(f"{path}: {problem}")
            loaded.append(Loaded(str(path), text, str(path)))
        else:
            raise EvidenceError(f"{path}: no such file or directory")
    if unusable:
        raise EvidenceError(_unusable_message(unusable))
    return loaded


def _unusable_message(unusable: list[str]) -> str:
    return (
        f"{len(unusable)} file(s) in the evidence folders cannot be used: {'; '.join(unusable)}. Convert them to "
        "text or leave them out with --nvlink-evidence-exclude=GLOB (ini: nvlink_evidence_exclude)"
    )


def _excluded_by(file: Path, root: Path, exclude: Sequence[str]) -> str | None:
    relative = file.relative_to(root).as_posix()
    return next((g for g in exclude if fnmatch.fnmatch(file.name, g) or fnmatch.fnmatch(relative, g)), None)


def _read(path: Path, pending: Pending) -> tuple[str, str | None]:
    """The file's text without launcher line prefixes, or "" and why it cannot be read as text."""
    text, problem = _decode(path, pending)
    if problem is not None:
        return text, problem
    # One place, before any output is told apart: every format reads the bare tool output.
    stripped = strip_prefixes(text, _readable)
    if stripped.removed and _stamps_are_the_log(text, stripped.text):
        return text, None
    for removed in stripped.removed:
        pending.note(str(path), f"removed {removed}")
    return stripped.text, None


def _stamps_are_the_log(raw: str, stripped: str) -> bool:
    """A kernel log's syslog or ISO time heads are its timestamps, not a launcher's prefix: kept unless the
    text without them is another tool's output (an NCCL log collected through journald)."""
    return detect.detect_kind(raw) == KERNEL_LOG and detect.detect_kind(stripped) in (None, KERNEL_LOG)


def _readable(text: str) -> bool:
    try:
        detect.parse_any(text)
    except ParseError:
        return False
    return True


def _decode(path: Path, pending: Pending) -> tuple[str, str | None]:
    """The file's text, or "" and why it cannot be read as text."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EvidenceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        # PowerShell's ">" writes UTF-16 with a byte-order mark; the text itself is fine.
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            return "", "UTF-16 byte-order mark but not valid UTF-16"
        pending.note(str(path), "read as UTF-16 (byte-order mark)")
        return text, None
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data[:nul].count(b"\n") + 1
        return "", f"binary: NUL byte on line {line}"
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return "", f"not UTF-8 text: byte 0x{data[exc.start]:02x} on line {line}"
