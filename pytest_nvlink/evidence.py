"""Judge a server from files: parse tool outputs (detected by content) and merge them into one Node.

Every fact remembers the file it came from, so that two files that disagree (8 GPUs here, 7 there;
NV18 here, SYS there) raise :class:`EvidenceConflict` naming both, instead of one silently winning.
A file that cannot be read, or whose kind cannot be told, is an :class:`EvidenceError`: a file the
user handed in and we ignored would make a verdict look better covered than it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pytest_nvlink.evidence_merge import EvidenceConflict, EvidenceError, Merger
from pytest_nvlink.model import Node
from pytest_nvlink.parsers import detect, nccl_log
from pytest_nvlink.parsers.common import ParseError
from pytest_nvlink.parsers.nccl_tests import NcclTestsResult
from pytest_nvlink.parsers.nvbandwidth import NvbandwidthResult
from pytest_nvlink.parsers.nvlink import NvlinkReport
from pytest_nvlink.parsers.p2p_latency import P2PLatencyResult
from pytest_nvlink.parsers.topo import TopoMatrix, TopoP2P
from pytest_nvlink.snapshot import SnapshotError, node_from_document
from pytest_nvlink.values import evidence_value_error, parsed_value_error

__all__ = ["FAMILIES", "EvidenceConflict", "EvidenceError", "coverage", "load_evidence"]

FAMILIES: tuple[str, ...] = (
    "inventory",
    "paths",
    "p2p",
    "nvlinks",
    "nvlink_errors",
    "p2p_bandwidth",
    "collectives",
    "nccl_transport",
)
_SNIFF_BYTES = 8192


@dataclass
class _Loaded:
    name: str  # how messages and provenance name the file
    text: str


@dataclass
class _Pending:
    nccl_logs: list[_Loaded] = field(default_factory=list)


def load_evidence(paths: list[Path]) -> Node:
    """Parse every file (directories recursively, binary files in them skipped) into one evidence Node."""
    files = _expand(paths)
    if not files:
        raise EvidenceError(f"no evidence files found in {', '.join(str(p) for p in paths) or 'an empty list'}")
    merger = Merger()
    pending = _Pending()
    for loaded in files:
        _absorb(loaded, merger, pending)
    if pending.nccl_logs:
        _absorb_nccl_logs(pending.nccl_logs, merger)
    node = merger.build()
    impossible = evidence_value_error(node, node.provenance, {loaded.name: loaded.text for loaded in files})
    if impossible:
        raise EvidenceError(impossible)
    return node


def coverage(node: Node) -> list[tuple[str, str]]:
    """(family, files) for every family, "" where no file covered it; for a run summary."""
    return [(family, node.provenance.get(family, "")) for family in FAMILIES]


# --- reading files ------------------------------------------------------------------------------


def _expand(paths: list[Path]) -> list[_Loaded]:
    loaded: list[_Loaded] = []
    for path in paths:
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                text = _read(file, explicit=False)
                if text is not None:
                    loaded.append(_Loaded(str(file), text))
        elif path.is_file():
            text = _read(path, explicit=True)
            assert text is not None  # explicit files raise instead of returning None
            loaded.append(_Loaded(str(path), text))
        else:
            raise EvidenceError(f"{path}: no such file or directory")
    return loaded


def _read(path: Path, *, explicit: bool) -> str | None:
    """The file's text; None for a binary file found in a directory, an error for one named explicitly."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EvidenceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        if b"\x00" in data[:_SNIFF_BYTES]:
            raise UnicodeDecodeError("utf-8", data[:1], 0, 1, "NUL byte")
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        if explicit:
            raise EvidenceError(f"{path}: not a text file (binary or not UTF-8)") from None
        return None


def _absorb(loaded: _Loaded, merger: Merger, pending: _Pending) -> None:
    kind = detect.detect_kind(loaded.text)
    if kind is None:
        raise EvidenceError(
            f"{loaded.name}: cannot tell which tool produced this file; expected output of nvidia-smi topo -m/-p2p, "
            "nvidia-smi nvlink -s/-e/-c/-R, nccl-tests, p2pBandwidthLatencyTest, nvbandwidth, an NCCL_DEBUG=INFO "
            "log or a pytest-nvlink snapshot"
        )
    if kind == detect.NCCL_LOG:
        pending.nccl_logs.append(loaded)  # merged together at the end: one log per rank is common
        return
    try:
        result = detect.parse_kind(kind, loaded.text)
    except ParseError as exc:
        raise EvidenceError(f"{loaded.name}:{exc.line_no}: {exc.message} (read as {kind})") from None
    impossible = parsed_value_error(result, loaded.name, loaded.text)
    if impossible:
        raise EvidenceError(impossible)
    _dispatch(kind, result, loaded, merger, pending)


def _dispatch(kind: str, result: object, loaded: _Loaded, merger: Merger, pending: _Pending) -> None:
    name = loaded.name
    if isinstance(result, TopoMatrix):
        merger.add_topo(result, name)
    elif isinstance(result, TopoP2P):
        if not result.capabilities:
            raise EvidenceError(
                f"{name}: nvidia-smi topo -p2p output, but it does not say which capability (r, w, n, a) was "
                "asked; keep the 'nvidia-smi topo -p2p X' command line at the top of the file"
            )
        merger.add_topo_p2p(result, name)
    elif isinstance(result, NvlinkReport):
        merger.add_nvlink(result, name)
    elif isinstance(result, NcclTestsResult):
        _add_nccl_tests(result, loaded, merger, pending)
    elif isinstance(result, P2PLatencyResult):
        merger.add_p2p_latency(result, name)
    elif isinstance(result, NvbandwidthResult):
        merger.add_nvbandwidth(result, name)
    elif kind == detect.SNAPSHOT_JSON:
        try:
            node = node_from_document(result, name)
        except SnapshotError as exc:
            raise EvidenceError(str(exc)) from None
        merger.add_snapshot(node, name)
    else:  # pragma: no cover - detect and parse_kind agree on the kinds
        raise EvidenceError(f"{name}: no merge rule for {kind}")


def _add_nccl_tests(result: NcclTestsResult, loaded: _Loaded, merger: Merger, pending: _Pending) -> None:
    if result.op is None:
        raise EvidenceError(
            f"{loaded.name}: nccl-tests output, but which collective ran cannot be told from it; keep the "
            "'# Collective test starting: X_perf' line or the command line in the file"
        )
    if result.nranks is None:
        raise EvidenceError(
            f"{loaded.name}: nccl-tests output without '# Using devices' rank lines or '# nThread ... nGpus' "
            "header, so the number of ranks is unknown; keep those lines in the file"
        )
    merger.add_nccl_tests(result, loaded.name)
    # A run with NCCL_DEBUG=INFO also shows which transports NCCL picked.
    if re.search(r"NCCL\s+INFO\s+Channel\s+\d+.*\bvia\b", loaded.text):
        pending.nccl_logs.append(loaded)


def _absorb_nccl_logs(logs: list[_Loaded], merger: Merger) -> None:
    for loaded in logs:  # parse one by one first, so that an error names its file
        try:
            nccl_log.parse(loaded.text)
        except ParseError as exc:
            raise EvidenceError(f"{loaded.name}:{exc.line_no}: {exc.message} (read as nccl_log)") from None
    names = ", ".join(log.name for log in logs)
    merged = nccl_log.parse_many([log.text for log in logs])
    merger.add_nccl_audit(nccl_log.to_audit(merged, names), [log.name for log in logs])
