"""Tell which tool printed a text, by its content (file names lie), and parse it with the right parser.

Checks run from the most to the least specific marker: an nccl-tests run with NCCL_DEBUG=INFO
contains NCCL log lines too, and a log of an nccl-tests run can carry the table header without rows.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass

from pytest_nvlink.core.textfile import parse_problem
from pytest_nvlink.sources.evidence.parsers import (
    nccl_log,
    nccl_tests,
    nvbandwidth,
    nvlink,
    p2p_latency,
    smi_query,
    topo,
)
from pytest_nvlink.sources.evidence.parsers.common import ParseError, split_lines

TOPO_MATRIX = "topo_matrix"
TOPO_P2P = "topo_p2p"
NVLINK_STATUS = nvlink.STATUS
NVLINK_ERRORS = nvlink.ERRORS
NVLINK_CAPS = nvlink.CAPS
NVLINK_REMOTE = nvlink.REMOTE
NVLINK_MIXED = "nvlink_mixed"  # several nvidia-smi nvlink options captured into one file
NCCL_TESTS = "nccl_tests"
P2P_BANDWIDTH_LATENCY = "p2p_bandwidth_latency"
NVBANDWIDTH = "nvbandwidth"
NCCL_LOG = "nccl_log"
SNAPSHOT_JSON = "snapshot_json"
SMI_QUERY = "nvidia_smi_q"

KINDS: tuple[str, ...] = (
    TOPO_MATRIX,
    TOPO_P2P,
    NVLINK_STATUS,
    NVLINK_ERRORS,
    NVLINK_CAPS,
    NVLINK_REMOTE,
    NVLINK_MIXED,
    NCCL_TESTS,
    P2P_BANDWIDTH_LATENCY,
    NVBANDWIDTH,
    NCCL_LOG,
    SNAPSHOT_JSON,
    SMI_QUERY,
)

_M = re.MULTILINE
_NVLINK_LINES = {
    NVLINK_STATUS: re.compile(
        r"^\s*Link\s+\d+:\s*(?:[\d.]+\s*GB/s|<\s*inactive\s*>)|all\s+links\s+are\s+inactive", _M | re.I
    ),
    NVLINK_REMOTE: re.compile(r"^\s*Link\s+\d+:\s*Remote\s+Device", _M),
    NVLINK_CAPS: re.compile(r"^\s*Link\s+\d+\s*,.*:\s*(?:true|false)\s*$", _M | re.I),
    NVLINK_ERRORS: re.compile(r"^\s*Link\s+\d+:\s*(?!Remote)[A-Za-z][^:]*:\s*\S+\s*$", _M),
}
# An NCCL log with its "host:pid:tid [dev]" prefix grepped away or replaced by a timestamp.
_STRIPPED_NCCL = re.compile(
    r"^\s*(?:\[[\d\- :T.,]+\]\s*)?(?:\[\d+\]\s+)?(?:[\w.]+:\d+(?:\s+\(\w+\))?\s+)?NCCL\s+(?:INFO|WARN)\s", _M
)


def detect_kind(text: str) -> str | None:
    """One of KINDS, or None when the text looks like none of the supported tools."""
    if _is_snapshot(text):
        return SNAPSHOT_JSON
    if re.search(r"NVSMI LOG|^\s*Attached GPUs\s*:", text, _M) or re.search(
        r"^\s*GPU\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$", text, _M
    ):
        return SMI_QUERY
    nvbandwidth_names = r"^\s*(?:Running\s+\w+\.|nvbandwidth Version:|SUM\s+\w+\s+[\d.]+\s*$)"
    if re.search(nvbandwidth_names, text, _M) and re.search(r"\(row\)\s*(?:<->|->|<-)", text):
        return NVBANDWIDTH
    if re.search(r"Peer-to-Peer\) GPU Bandwidth Latency Test|Access Peer Device=|P2P=(?:Enabled|Disabled)", text):
        return P2P_BANDWIDTH_LATENCY
    if _is_nccl_tests(text):
        return NCCL_TESTS
    if re.search(r"^\s*GPU\s+\d+:.*\(UUID:", text, _M):
        found = [kind for kind, pattern in _NVLINK_LINES.items() if pattern.search(text)]
        if found:
            return found[0] if len(found) == 1 else NVLINK_MIXED
    # (?<!\S): the host name starts a token; otherwise a long line without blanks costs quadratic time.
    if re.search(r"(?<!\S)\S+:\d+:\d+\s+\[\d+\]\s+(?:\S+:\d+\s+)?NCCL\s+(?:INFO|WARN)", text) or _STRIPPED_NCCL.search(
        text
    ):
        return NCCL_LOG
    return _topo_kind(text)


def parse_any(text: str) -> tuple[str, object]:
    """Detect the kind and parse; raises ParseError for unknown or unparsable text."""
    kind = detect_kind(text)
    if kind is None:
        raise ParseError(
            "not output of a supported tool (nvidia-smi topo/nvlink, nccl-tests, "
            "p2pBandwidthLatencyTest, nvbandwidth, NCCL_DEBUG log, snapshot JSON)",
            0,
        )
    return kind, parse_kind(kind, text)


def parse_kind(kind: str, text: str) -> object:
    if kind == TOPO_MATRIX:
        return topo.parse(text)
    if kind == TOPO_P2P:
        return topo.parse_p2p(text)
    if kind.startswith("nvlink_"):
        return nvlink.parse(text)
    if kind == NCCL_TESTS:
        return nccl_tests.parse(text)
    if kind == P2P_BANDWIDTH_LATENCY:
        return p2p_latency.parse(text)
    if kind == NVBANDWIDTH:
        return nvbandwidth.parse(text)
    if kind == NCCL_LOG:
        return nccl_log.parse(text)
    if kind == SNAPSHOT_JSON:
        return _load_json(text)
    if kind == SMI_QUERY:
        return smi_query.parse(text)
    raise ParseError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}", 0)


def _is_snapshot(text: str) -> bool:
    return text.lstrip().startswith("{") and "pytest-nvlink-snapshot" in text


def _load_json(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"invalid JSON: {exc.msg}", exc.lineno) from None
    except RecursionError:
        raise ParseError("invalid JSON: nested too deeply", 0) from None
    except ValueError as exc:  # an integer beyond Python's digit limit
        raise ParseError(f"invalid JSON: {parse_problem(exc, text)}", 0) from None


def _is_nccl_tests(text: str) -> bool:
    if re.search(
        r"^\s*#\s*nThread\s+\d+\s+nGpus|Avg bus bandwidth\s*:|Collective test starting:"
        r"|^\s*#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid",
        text,
        _M,
    ):
        return True
    # Without the header block: the column header or the binary's command line, then a result row.
    start = re.search(r"^\s*#\s*size\s+count\s+type\b|\b[a-z_]+_perf\b", text, _M)
    return start is not None and re.search(r"^\s*\d+\s+\d+\s+[a-z]\w*\s+\S+", text[start.end() :], _M) is not None


def _topo_kind(text: str) -> str | None:
    if not re.search(r"^\s*GPU0\s*GPU1|^\s*GPU0\s+(?:CPU|NIC|mlx)|^\s*GPU0\s*$|^\s*GPU0\s+X\s", text, _M):
        return None
    if re.search(r"^\s*GPU\d+\s.*\b(?:OK|CNS|GNS|TNS|NS)\b", text, _M):
        return TOPO_P2P
    if re.search(r"^\s*GPU\d+[\sA-Z]*\b(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)\b", text, _M):
        return TOPO_MATRIX
    return None


# --- files holding several outputs ---------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One tool's output inside a file: its text and the 1-based line of the file where it starts."""

    start_line: int
    text: str


# Lines that can only begin a new tool output. The same kind repeats without a split where a tool's
# own output repeats the marker (nvidia-smi nvlink per GPU, nvbandwidth per testcase).
_STARTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "command",
        re.compile(
            r"^\s*(?:\S*[$#>%]\s+)?(?:sudo\s+)?(?:\S*/)?(?:nvidia-smi\b|nvbandwidth\b|\w+_perf\b|p2pBandwidthLatencyTest\b)"
        ),
    ),
    (TOPO_MATRIX, re.compile(r"^\s*GPU0(?:\s+GPU1|\s+(?:NIC0|mlx\w+|CPU\s+Affinity)|\s*$)")),
    (NVLINK_STATUS, re.compile(r"^\s*GPU\s+\d+:.*\(UUID:")),
    (
        NCCL_TESTS,
        re.compile(r"^\s*#\s*(?:nccl-tests version|Collective test starting|nThread\s+\d+|size\s+count\s+type)"),
    ),
    (NVBANDWIDTH, re.compile(r"^\s*(?:nvbandwidth Version:|Running\s+\w+\.\s*$)")),
    (P2P_BANDWIDTH_LATENCY, re.compile(r"^\s*\[P2P \(Peer-to-Peer\) GPU Bandwidth Latency Test\]")),
    (SMI_QUERY, re.compile(r"^\s*=+\s*NVSMI LOG\s*=+\s*$")),
)
_REPEATS_WITHIN_ONE_OUTPUT = {NVLINK_STATUS, NVBANDWIDTH, "command"}


def split_parts(text: str) -> list[Part]:
    """The file cut where a second tool's output begins; lines before the first output go with it."""
    lines = split_lines(text)
    starts: list[int] = [0]
    current: str | None = None
    pending_command: int | None = None
    for index, line in enumerate(lines):
        marker = next((name for name, pattern in _STARTS if pattern.search(line)), None)
        if marker is None:
            continue
        if marker == "command":
            if current is not None and pending_command is None:
                pending_command = index  # the next output starts here, command line included
            continue
        if _begins_new_output(marker, current, lines[starts[-1] : index]):
            starts.append(pending_command if pending_command is not None else index)
        current = marker
        pending_command = None
    starts.append(len(lines))
    return [Part(a + 1, "\n".join(lines[a:b])) for a, b in itertools.pairwise(starts) if a < b]


def _begins_new_output(marker: str, current: str | None, so_far: list[str]) -> bool:
    if current is None or (marker == current and marker in _REPEATS_WITHIN_ONE_OUTPUT):
        return False
    # nccl-tests prints several header lines; only one after result rows starts a second run.
    return not (marker == NCCL_TESTS == current and not _has_rows(so_far))


def _has_rows(lines: list[str]) -> bool:
    return any(re.match(r"\s*\d+\s+\d+\s+[a-z]\w*\s+\S+", line) for line in lines)


# --- files holding several hosts' outputs ----------------------------------------------------------

# "host: NAME" on a line of its own, as `for h in $hosts; do echo "host: $h"; ssh $h nvidia-smi -q; done` writes:
# the outputs that follow, up to the next such line, come from that host (a tray of a rack).
HOST_LINE = re.compile(r"^\s*host\s*:\s*([A-Za-z0-9][\w.-]*)\s*$", re.IGNORECASE)


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
