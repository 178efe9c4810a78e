"""Evidence from several hosts (the trays of a rack): files cut at their ``host: NAME`` lines.

This runs before any output is told apart, so both loaders (one node, a rack) get their parts ready
and neither calls back into the other.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_nvlink.sources.evidence.parsers.common import split_lines
from pytest_nvlink.sources.evidence.read import Loaded

__all__ = ["HOST_LINE", "HostPart", "host_sections", "is_rack_evidence", "split_hosts"]

# "host: NAME" on a line of its own, as `for h in $hosts; do echo "host: $h"; ssh $h nvidia-smi -q; done` writes:
# the outputs that follow, up to the next such line, come from that host (a tray of a rack).
HOST_LINE = re.compile(r"^\s*host\s*:\s*([A-Za-z0-9][\w.-]*)\s*$", re.IGNORECASE)
_PROCESS_HOST = re.compile(r"^\s*Process\s+\d+\s*\(([^()\s]+)\)", re.MULTILINE)


@dataclass(frozen=True)
class HostPart:
    """The lines of a file that one host printed: ``host`` None for lines before any ``host:`` line."""

    host: str | None
    start_line: int
    text: str


def split_hosts(text: str) -> list[HostPart]:
    """The file cut at every ``host: NAME`` line (the line itself dropped); one part when there is none."""
    lines = split_lines(text)
    marks = [(index, match.group(1)) for index, line in enumerate(lines) if (match := HOST_LINE.match(line))]
    if not marks:
        return [HostPart(None, 1, text)]
    parts = []
    if any(line.strip() for line in lines[: marks[0][0]]):
        parts.append(HostPart(None, 1, "\n".join(lines[: marks[0][0]])))
    for (index, host), (end, _) in itertools.pairwise([*marks, (len(lines), "")]):
        parts.append(HostPart(host, index + 2, "\n".join(lines[index + 1 : end])))
    return parts


def is_rack_evidence(texts: Sequence[str]) -> bool:
    """Whether the files come from several hosts: ``host:`` lines or nvbandwidth processes name more than one."""
    hosts: set[str] = set()
    for text in texts:
        hosts.update(part.host for part in split_hosts(text) if part.host is not None)
        hosts.update(_PROCESS_HOST.findall(text))
    return len(hosts) > 1


def host_sections(loaded: Loaded) -> list[Loaded]:
    """The file's parts, each with the host its ``host:`` line names; the file itself when it has none."""
    parts = split_hosts(loaded.text)
    if len(parts) == 1 and parts[0].host is None:
        return [loaded]
    return [
        Loaded(f"{loaded.file} (line {part.start_line})", part.text, loaded.file, part.start_line, part.host)
        for part in parts
        if part.host is not None or not _only_comments(part.text)
    ]


def _only_comments(text: str) -> bool:
    """A file's own header ("# source: ...") before its first "host:" line is no tool output."""
    return all(line.lstrip().startswith("#") for line in text.splitlines() if line.strip())
