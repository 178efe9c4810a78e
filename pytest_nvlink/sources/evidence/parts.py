"""Every tool output of the evidence files: told apart, parsed, and handed to its format's merge step.

The single-node and the rack loader share these steps; what each format does lives in its parser
module (:mod:`pytest_nvlink.sources.evidence.parsers.registry`), so nothing here names a tool.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_nvlink.core.values import parsed_value_error
from pytest_nvlink.sources.evidence.merge import EvidenceError, Merger
from pytest_nvlink.sources.evidence.parsers import detect
from pytest_nvlink.sources.evidence.parsers.common import ParseError
from pytest_nvlink.sources.evidence.parsers.registry import Format, format_of, formats
from pytest_nvlink.sources.evidence.read import Loaded, Pending

__all__ = ["absorb", "detect_all", "merge_later", "parse_loaded"]


def detect_all(files: list[Loaded]) -> list[tuple[str, Loaded]]:
    """Every tool output of every file with its kind; all unknown parts are reported together."""
    found: list[tuple[str, Loaded]] = []
    unknown: list[str] = []
    for loaded in files:
        parts = detect.split_parts(loaded.text)
        whole = len(parts) == 1 and loaded.first_line == 1
        for part in parts:
            line = loaded.first_line - 1 + part.start_line
            name = loaded.name if whole else f"{loaded.file or loaded.name} (line {line})"
            piece = Loaded(name, part.text, loaded.file, line, loaded.tray)
            kind = detect.detect_kind(part.text)
            if kind is None:
                unknown.append(loaded.name if whole else f"{loaded.file or loaded.name}:{line}")
            else:
                found.append((kind, piece))
    if unknown:
        raise EvidenceError(
            f"{', '.join(unknown)}: cannot tell which tool produced this text; expected output of "
            f"{detect.expected_tools()} (leave other files out with --nvlink-evidence-exclude=GLOB)"
        )
    return found


def parse_loaded(kind: str, loaded: Loaded) -> object:
    """The parsed output; a damaged one or an impossible value is an EvidenceError naming file and line."""
    try:
        result = detect.parse_kind(kind, loaded.text)
    except ParseError as exc:
        raise EvidenceError(f"{loaded.where(exc.line_no)}: {exc.message} (read as {kind})") from None
    impossible = parsed_value_error(result, loaded.name, loaded.text)
    if impossible:
        raise EvidenceError(impossible)
    return result


def absorb(kind: str, loaded: Loaded, merger: Merger, pending: Pending) -> None:
    """Parse one output and merge it, or keep it for its format's merge at the end."""
    fmt = _format(kind)
    if fmt.merge is None:
        pending.later.setdefault(fmt.name, []).append(loaded)
        return
    result = parse_loaded(kind, loaded)
    for line_no, text in getattr(result, "notes", ()):
        pending.note(loaded.file, f"line {loaded.first_line - 1 + line_no}: {text}" if line_no else text)
    fmt.merge(_Into(merger, loaded, pending), result)


def merge_later(merger: Merger, pending: Pending) -> None:
    """Merge the outputs kept for the end, each format's together, and forget them."""
    for fmt in formats():
        kept = pending.later.pop(fmt.name, [])
        if kept and fmt.merge_together is not None:
            fmt.merge_together(merger, kept)


def _format(kind: str) -> Format:
    fmt = format_of(kind)
    if fmt is None:  # pragma: no cover - detect only answers registered kinds
        raise EvidenceError(f"no evidence format reads {kind}")
    return fmt


@dataclass
class _Into:
    """What a format's merge step gets: the merger, the output, and the notes of the output's file."""

    merger: Merger
    part: Loaded
    pending: Pending

    @property
    def first_line(self) -> int:
        return self.part.first_line

    def note(self, text: str) -> None:
        self.pending.note(self.part.file, text)

    def merge_later(self, kind: str) -> None:
        fmt = _format(kind)
        assert fmt.merge_together is not None, f"{fmt.name} merges its outputs one by one"
        self.pending.later.setdefault(fmt.name, []).append(self.part)
