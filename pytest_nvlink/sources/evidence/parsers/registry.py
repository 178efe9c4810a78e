"""The evidence formats: each parser module registers how its tool's output is told, parsed and merged.

A format is one module: it calls :func:`register` once with its detection, its parser, the evidence
families its output feeds and the merge step that puts a parsed output into the
:class:`~pytest_nvlink.sources.evidence.merge.Merger`. Detection (:mod:`.detect`) and the evidence
loader only walk this registry, so adding a tool's format touches that module and its tests only.
The package imports every parser module, so importing any of them fills the registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_nvlink.sources.evidence.merge import Merger


class Text(Protocol):
    """One tool output of an evidence file, as the loader hands it to a format."""

    @property
    def name(self) -> str: ...  # how provenance and messages name it: the file, or "file (line N)"

    @property
    def text(self) -> str: ...

    def where(self, line_no: int) -> str: ...  # "file:line" of a line of the text, for messages


class Into(Protocol):
    """Where a merge step puts one parsed output: the merger, and notes on the output's file."""

    @property
    def merger(self) -> Merger: ...

    @property
    def part(self) -> Text: ...

    @property
    def first_line(self) -> int: ...  # the file line the output starts on

    def note(self, text: str) -> None: ...  # listed under the file in the run summary

    def merge_later(self, kind: str) -> None: ...  # also merge this output with ``kind``'s, at the end


def _never_continues(_so_far: list[str]) -> bool:
    return False


@dataclass(frozen=True)
class Format:
    """How one tool's output is told apart, parsed and merged into the evidence node."""

    name: str
    kinds: tuple[str, ...]  # what ``detect`` may answer; several when one parser reads several views
    order: int  # detection runs from the lowest: the most specific marker first
    detect: Callable[[str], str | None]  # one of ``kinds``, or None when the text is not this tool's
    parse: Callable[[str], object]  # raises ParseError for damaged text
    families: tuple[str, ...]  # the evidence families the merge step can feed (coverage table)
    label: str = ""  # how "cannot tell which tool" names it; "" when another format's label covers it
    # (into, the parsed output); Any because each format's step takes its own result type.
    merge: Callable[[Into, Any], None] | None = None
    # Outputs merged together at the end instead of one by one (NCCL logs: one per rank is common).
    merge_together: Callable[[Merger, Sequence[Text]], None] | None = None
    start: re.Pattern[str] | None = None  # a line that can only begin this tool's output in a file
    # Whether a second ``start`` line after these lines still belongs to the same output.
    continues: Callable[[list[str]], bool] = _never_continues
    commands: tuple[str, ...] = ()  # regexes of the tool's command; its command line starts an output


_FORMATS: list[Format] = []


def register(fmt: Format) -> Format:
    """Add a format; a kind or name given twice is a programming error."""
    taken = {kind for known in _FORMATS for kind in (*known.kinds, known.name)}
    clash = taken & {*fmt.kinds, fmt.name}
    if clash:
        raise ValueError(f"evidence format {fmt.name!r}: {', '.join(sorted(clash))} already registered")
    if (fmt.merge is None) == (fmt.merge_together is None):
        raise ValueError(f"evidence format {fmt.name!r}: give exactly one of merge and merge_together")
    _FORMATS.append(fmt)
    return fmt


def unregister(name: str) -> None:
    """Remove a format (for tests that register a toy one)."""
    _FORMATS[:] = [fmt for fmt in _FORMATS if fmt.name != name]


def formats() -> tuple[Format, ...]:
    """Every format in registration order (the order messages list them in)."""
    return tuple(_FORMATS)


def in_detection_order() -> list[Format]:
    return sorted(_FORMATS, key=lambda fmt: fmt.order)


def format_of(kind: str) -> Format | None:
    return next((fmt for fmt in _FORMATS if kind in fmt.kinds), None)
