"""Tell which tool printed a text, by its content (file names lie), and parse it with the right parser.

Checks run from the most to the least specific marker: an nccl-tests run with NCCL_DEBUG=INFO
contains NCCL log lines too, and a log of an nccl-tests run can carry the table header without rows.
"""

from __future__ import annotations

import json
import re

from pytest_nvlink.parsers import nccl_log, nccl_tests, nvbandwidth, nvlink, p2p_latency, topo
from pytest_nvlink.parsers.common import ParseError
from pytest_nvlink.textfile import parse_problem

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


def detect_kind(text: str) -> str | None:
    """One of KINDS, or None when the text looks like none of the supported tools."""
    if _is_snapshot(text):
        return SNAPSHOT_JSON
    if re.search(r"^\s*Running\s+\w+\.", text, _M) and re.search(r"\(row\)\s*(?:<->|->|<-)", text):
        return NVBANDWIDTH
    if re.search(r"Peer-to-Peer\) GPU Bandwidth Latency Test|Access Peer Device=|P2P=(?:Enabled|Disabled)", text):
        return P2P_BANDWIDTH_LATENCY
    if _is_nccl_tests(text):
        return NCCL_TESTS
    if re.search(r"^\s*GPU\s+\d+:.*\(UUID:", text, _M):
        found = [kind for kind, pattern in _NVLINK_LINES.items() if pattern.search(text)]
        if found:
            return found[0] if len(found) == 1 else NVLINK_MIXED
    if re.search(r"\S+:\d+:\d+\s+\[\d+\]\s+(?:\S+:\d+\s+)?NCCL\s+(?:INFO|WARN)", text):
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
    if not re.search(r"^\s*GPU0\s*GPU1|^\s*GPU0\s+(?:CPU|NIC|mlx)|^\s*GPU0\s*$", text, _M):
        return None
    if re.search(r"^\s*GPU\d+\s.*\b(?:OK|CNS|GNS|TNS|NS)\b", text, _M):
        return TOPO_P2P
    if re.search(r"^\s*GPU\d+[\sA-Z]*\b(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)\b", text, _M):
        return TOPO_MATRIX
    return None
