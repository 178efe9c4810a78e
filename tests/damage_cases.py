"""Line damage for the "damage is never silent" property (issue 28, item 3): the edits, the fingerprint a load
leaves, and the per-format allow-lists of lines a parser may ignore.

One edit touches one line: delete it, truncate it in the middle of its last token, replace its last digit, or swap
its last two fields. The fingerprint is everything the evidence load hands on (the node's facts, unknown reasons,
probe errors and evidence notes; the usage error when the file is refused) with line numbers made neutral, so a
deleted blank line that only shifts later line numbers leaves it the same. Provenance is left out: it names the
file, which is the same for every edit.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pytest_nvlink.sources.evidence.load import EvidenceError, load_evidence

OPS: tuple[str, ...] = ("delete", "truncate", "digit", "swap")
ALL = frozenset(OPS)
FILE_NAME = "evidence.txt"
_LINE_NO = re.compile(r"\b(lines?)\s+\d+(?:\s*(?:-|to)\s*\d+)?")
_FILE_LINE = re.compile(re.escape(FILE_NAME) + r":\d+")
_LAST_DIGIT = re.compile(r"\d(?=\D*$)")
_TOKEN = re.compile(r"\S+")


def damaged(line: str, op: str) -> str | None:
    """``line`` after ``op`` ("delete": None), or ``line`` itself where the edit has nothing to act on."""
    if op == "delete":
        return None
    spans = [m.span() for m in _TOKEN.finditer(line)]
    if op == "truncate" and spans:
        start, end = spans[-1]
        return line[: start + (end - start) // 3] if end - start > 2 else line[:start].rstrip()
    if op == "digit" and (digit := _LAST_DIGIT.search(line)):
        return line[: digit.start()] + ("3" if digit.group() == "7" else "7") + line[digit.end() :]
    if op == "swap" and len(spans) >= 2:
        (a0, a1), (b0, b1) = spans[-2], spans[-1]
        return line[:a0] + line[b0:b1] + line[a1:b0] + line[a0:a1] + line[b1:]
    return line


def with_damage(lines: list[str], index: int, op: str) -> str:
    edited = damaged(lines[index], op)
    return "\n".join([*lines[:index], *([] if edited is None else [edited]), *lines[index + 1 :]])


def _neutral(text: str) -> str:
    return _FILE_LINE.sub(FILE_NAME + ":N", _LINE_NO.sub(r"\1 N", text))


def fingerprint(text: str, folder: Path) -> str:
    """What loading ``text`` as an evidence file hands on, as one comparable string."""
    path = folder / FILE_NAME
    path.write_text(text, encoding="utf-8")
    try:
        node = load_evidence([path])
    except EvidenceError as exc:
        return "refused: " + _neutral(str(exc).replace(str(folder), "<folder>"))
    facts = dataclasses.asdict(node)
    facts.pop("provenance")
    return _neutral(json.dumps(facts, sort_keys=True, default=str).replace(str(folder), "<folder>"))


@dataclass(frozen=True)
class Irrelevant:
    """Lines a format's parser may ignore: the edits in ``ops`` of a line that ``matches`` must change nothing."""

    why: str
    pattern: str = ""  # a regex searched in the line
    ops: frozenset[str] = ALL
    lines: tuple[int, ...] = ()  # or file line numbers (as an editor shows them, header included)
    but_not: tuple[int, ...] = ()  # file lines the pattern matches that are judged all the same

    def matches(self, file_line: int, line: str) -> bool:
        if self.lines:
            return file_line in self.lines
        return file_line not in self.but_not and re.search(self.pattern, line) is not None


BLANK = Irrelevant("a blank line carries nothing (every format)", r"^\s*$")


@dataclass(frozen=True, repr=False)
class Case:
    """One realistic input of a format and the lines its parser may ignore."""

    format: str  # the registry's format name the input is detected as
    sample: str  # under tests/data/evidence (three header lines and a blank are dropped), or under snapshots/
    irrelevant: tuple[Irrelevant, ...]
    first_line: int = 5  # the file line the text starts on (after the provenance header)
    text: Callable[[], str] | None = None  # the input when it is not the sample file's text

    @property
    def id(self) -> str:
        return self.sample

    def __repr__(self) -> str:
        return f"Case({self.sample!r})"


def allowed(case: Case, index: int, line: str, op: str) -> Irrelevant | None:
    """The allow-list entry that lets ``op`` on line ``index`` change nothing, if any."""
    rules = (BLANK, *case.irrelevant)
    return next((r for r in rules if op in r.ops and r.matches(case.first_line + index, line)), None)


def edits(lines: list[str]) -> Iterator[tuple[int, str]]:
    """Every (line index, op) whose edit differs from the line as it is."""
    for index, line in enumerate(lines):
        for op in OPS:
            if damaged(line, op) != line:
                yield index, op
