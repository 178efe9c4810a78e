"""Tell which tool printed a text, by its content (file names lie), and parse it with the right parser.

Each parser module registers its format's detection (:mod:`.registry`); they run from the most to
the least specific marker: an nccl-tests run with NCCL_DEBUG=INFO contains NCCL log lines too, and a
log of an nccl-tests run can carry the table header without rows.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from pytest_nvlink.sources.evidence.parsers.common import ParseError, split_lines
from pytest_nvlink.sources.evidence.parsers.registry import Format, format_of, formats, in_detection_order


def kinds() -> list[str]:
    """Every kind a registered format can answer, in registration order."""
    return [kind for fmt in formats() for kind in fmt.kinds]


def detect_kind(text: str) -> str | None:
    """One of :func:`kinds`, or None when the text looks like none of the supported tools."""
    for fmt in in_detection_order():
        kind = fmt.detect(text)
        if kind is not None:
            return kind
    return None


def expected_tools() -> str:
    """The tools whose output is read, for messages: "a, b or c"."""
    labels = [fmt.label for fmt in formats() if fmt.label]
    return f"{', '.join(labels[:-1])} or {labels[-1]}" if len(labels) > 1 else "".join(labels)


def parse_any(text: str) -> tuple[str, object]:
    """Detect the kind and parse; raises ParseError for unknown or unparsable text."""
    kind = detect_kind(text)
    if kind is None:
        raise ParseError(
            "not output of a supported tool (nvidia-smi topo/nvlink, nccl-tests, "
            "p2pBandwidthLatencyTest, nvbandwidth, NCCL_DEBUG log, snapshot JSON, kernel log)",
            0,
        )
    return kind, parse_kind(kind, text)


def parse_kind(kind: str, text: str) -> object:
    fmt = format_of(kind)
    if fmt is None:
        raise ParseError(f"unknown kind {kind!r}; expected one of {', '.join(kinds())}", 0)
    return fmt.parse(text)


# --- files holding several outputs ---------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One tool's output inside a file: its text and the 1-based line of the file where it starts."""

    start_line: int
    text: str


_COMMAND = "command"


def _starts() -> list[tuple[str, re.Pattern[str], Format | None]]:
    """Lines that can only begin a new tool output: a tool's command line, or a format's own start line."""
    commands = "|".join(dict.fromkeys(command for fmt in formats() for command in fmt.commands))
    command = re.compile(rf"^\s*(?:\S*[$#>%]\s+)?(?:sudo\s+)?(?:\S*/)?(?:{commands})")
    return [(_COMMAND, command, None), *((fmt.name, fmt.start, fmt) for fmt in formats() if fmt.start is not None)]


def split_parts(text: str) -> list[Part]:
    """The file cut where a second tool's output begins; lines before the first output go with it."""
    lines = split_lines(text)
    starts: list[int] = [0]
    current: str | None = None
    pending_command: int | None = None
    markers = _starts()
    for index, line in enumerate(lines):
        marker = next(((name, fmt) for name, pattern, fmt in markers if pattern.search(line)), None)
        if marker is None:
            continue
        name, fmt = marker
        if fmt is None:  # a command line
            if current is not None and pending_command is None:
                pending_command = index  # the next output starts here, command line included
            continue
        if current is not None and (name != current or not fmt.continues(lines[starts[-1] : index])):
            starts.append(pending_command if pending_command is not None else index)
        current = name
        pending_command = None
    starts.append(len(lines))
    return [Part(a + 1, "\n".join(lines[a:b])) for a, b in itertools.pairwise(starts) if a < b]
