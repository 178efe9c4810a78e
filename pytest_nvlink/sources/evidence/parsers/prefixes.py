"""Line prefixes that launchers and log collectors add, removed before any output is told apart.

``mpirun --tag-output`` writes ``[1,0]<stdout>:``, ``srun --label`` `` 0: ``, ``pdsh``/``clush`` ``host: ``,
Ray ``(WorkerDict pid=123) `` and ``[repeated 16x across cluster]``, ``kubectl logs --timestamps`` an RFC 3339
time, ``journalctl`` its syslog head, a forum reply ``> > >``, ``docker compose logs`` ``svc-1  | ``. The
tool's own text is what follows, so a table whose every line carries the same prefix parses as the bare
table. A prefix is removed as a rule, not per tool: the known shapes wherever they are common to most
lines, and any other prefix up to a ``|`` that every line shares when the text reads without it.

Lines are never added or removed, so line numbers in messages still name the file's lines.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from pytest_nvlink.sources.evidence.parsers.common import split_lines

__all__ = ["Stripped", "strip_prefixes"]

# Shapes no tool output starts a line with: removed from every line that carries them.
_SURE = [
    ("OpenMPI --tag-output", re.compile(r"\[\d+,\d+\]<(?:stdout|stderr)>:[ \t]?")),
    ("Ray worker", re.compile(r"\((?:[\w.:-]+ )?pid=\d+(?:, ip=[\w.:-]+)?\)[ \t]?")),
    # kubectl logs --timestamps, docker logs -t; the CRI log file adds the stream and a partial-line flag.
    (
        "timestamp",
        re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)[ \t](?:(?:stdout|stderr) [FP] )?"),
    ),
]
# Shapes a tool's own line could start with (a row "0: ...", a quoted "> note"): removed only where they
# are common to most lines, the sign of a launcher rather than of the tool.
_COMMON = [
    ("srun --label", re.compile(r"[ \t]*\d{1,5}:(?: |$)")),
    ("quoted reply", re.compile(r"[ \t]*>(?:[ \t]*>)*(?:[ \t]|$)")),
    ("journal", re.compile(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.-]+ [\w.@/-]+(?:\[\d+\])?: ")),
    ("timestamp", re.compile(r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?[ \t]")),
]
# pdsh/clush: "node12: " before content. "host: NAME" alone on a line separates a rack's trays instead.
_HOST_PREFIX = re.compile(r"([A-Za-z0-9][\w.-]*): ")
_HOST_LINE = re.compile(r"\s*host\s*:\s*[A-Za-z0-9][\w.-]*\s*$", re.IGNORECASE)
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_MOST = 0.6  # share of the non-blank lines a prefix must be on to count as the launcher's
_LAYERS = 6  # "timestamp + srun label + Ray" stacks a few deep, never more


@dataclass(frozen=True)
class Stripped:
    text: str
    removed: tuple[str, ...]  # what was removed, for the file's notes: "OpenMPI --tag-output ('[1,0]<stdout>:')"


def strip_prefixes(text: str, readable: Callable[[str], bool] = lambda _text: True) -> Stripped:
    """``text`` without launcher prefixes and trailing spaces; ``readable`` says whether a text is a tool's."""
    lines = split_lines(text)
    removed: list[str] = []
    lines, ray = _strip_suffixes(lines)
    if ray:
        removed.append(f"Ray's '[repeated Nx across cluster]' on {ray} line(s)")
    for _ in range(_LAYERS):
        step = _one_layer(lines, readable)
        if step is None:
            break
        lines, what = step
        removed.append(what)
    if not removed and lines == split_lines(text):
        return Stripped(text, ())  # untouched: the loader keeps the exact text
    return Stripped("\n".join(lines), tuple(removed))


def _strip_suffixes(lines: list[str]) -> tuple[list[str], int]:
    out, ray = [], 0
    for line in lines:
        cut = _RAY_REPEATED.sub("", line)
        ray += cut != line
        out.append(cut.rstrip(" "))  # trailing tabs stay: a topo row's blank last cell is a tab
    return out, ray


def _one_layer(lines: list[str], readable: Callable[[str], bool]) -> tuple[list[str], str] | None:
    content = [line for line in lines if line.strip() and not _HOST_LINE.match(line)]
    if not content:
        return None
    for name, pattern in _SURE:
        found = [m.group(0) for line in content if (m := pattern.match(line))]
        if found:
            return _remove(lines, pattern, name, found)
    for name, pattern in _COMMON:
        hits = [m.group(0) for line in content if (m := pattern.match(line))]
        if len(hits) >= max(2, _MOST * len(content)):
            return _remove(lines, pattern, name, hits)
    return _host_layer(lines, content) or _literal_layer(lines, content, readable)


def _remove(lines: list[str], pattern: re.Pattern[str], name: str, hits: list[str]) -> tuple[list[str], str]:
    out = [line if _HOST_LINE.match(line) else pattern.sub("", line, count=1) for line in lines]
    shown = Counter(hit.strip() for hit in hits).most_common(1)[0][0]
    return out, f"{name} prefix ({shown!r}) on {len(hits)} line(s)"


def _host_layer(lines: list[str], content: list[str]) -> tuple[list[str], str] | None:
    hosts = Counter(m.group(1) for line in content if (m := _HOST_PREFIX.match(line)))
    if not hosts:
        return None
    host, count = hosts.most_common(1)[0]
    if count < max(2, _MOST * len(content)) or host.lower() == "host":
        return None
    prefix = re.compile(re.escape(host) + r": ?")
    out = [prefix.sub("", line, count=1) if line.startswith(f"{host}:") else line for line in lines]
    return out, f"pdsh/clush host prefix ({host + ':'!r}) on {count} line(s)"


def _literal_layer(
    lines: list[str], content: list[str], readable: Callable[[str], bool]
) -> tuple[list[str], str] | None:
    """A literal prefix every line shares up to a ``|`` (``svc-1  | ``), taken when the text reads without it."""
    match = re.match(r"[^|]*\|[ \t]?", content[0])
    if match is None or not match.group(0)[:-1].strip():
        return None
    prefix = match.group(0)
    if not all(line.startswith(prefix) or line.startswith(prefix.rstrip()) for line in content):
        return None
    out = [line.removeprefix(prefix.rstrip()).removeprefix(prefix[len(prefix.rstrip()) :]) for line in lines]
    if not readable("\n".join(out)):
        return None
    return out, f"common prefix ({prefix.strip()!r}) on {len(content)} line(s)"
