"""Judge a server from files: parse tool outputs (detected by content) and merge them into one Node.

Every fact remembers the file it came from, so that two files that disagree (8 GPUs here, 7 there;
NV18 here, SYS there) raise :class:`EvidenceConflict` naming both, instead of one silently winning.
A file that cannot be read, or whose kind cannot be told, is an :class:`EvidenceError`: a file the
user handed in and we ignored would make a verdict look better covered than it is.
"""

from __future__ import annotations

import codecs
import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_nvlink.core.values import evidence_value_error, parsed_value_error
from pytest_nvlink.model import Node
from pytest_nvlink.model.document import SnapshotError, node_from_document
from pytest_nvlink.sources.evidence.merge import EvidenceConflict, EvidenceError, Merger
from pytest_nvlink.sources.evidence.parsers import detect, nccl_log
from pytest_nvlink.sources.evidence.parsers.common import ParseError
from pytest_nvlink.sources.evidence.parsers.nccl_tests import NcclTestsResult
from pytest_nvlink.sources.evidence.parsers.nvbandwidth import NvbandwidthResult
from pytest_nvlink.sources.evidence.parsers.nvlink import NvlinkReport
from pytest_nvlink.sources.evidence.parsers.p2p_latency import P2PLatencyResult
from pytest_nvlink.sources.evidence.parsers.smi_query import SmiQuery
from pytest_nvlink.sources.evidence.parsers.topo import TopoMatrix, TopoP2P

__all__ = ["FAMILIES", "EvidenceConflict", "EvidenceError", "coverage", "file_coverage", "load_evidence"]

FAMILIES: tuple[str, ...] = (
    "inventory",
    "paths",
    "p2p",
    "nvlinks",
    "nvlink_errors",
    "p2p_bandwidth",
    "collectives",
    "nccl_transport",
    "platform",
)


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
    nccl_logs: list[Loaded] = field(default_factory=list)
    notes: dict[str, list[str]] = field(default_factory=dict)  # file -> notes, in the order found

    def note(self, file: str, text: str) -> None:
        self.notes.setdefault(file, []).append(text)


def load_evidence(paths: list[Path], exclude: Sequence[str] = ()) -> Node:
    """Parse every file (directories recursively) into one evidence Node.

    A file in a folder that cannot be used (binary, undecodable, of no known kind) stops the run
    with every such file listed, unless ``exclude`` (globs on the name or the path under the folder)
    leaves it out; excluded files are listed as notes, so the summary still shows them.
    """
    pending = Pending()
    files = _expand(paths, exclude, pending)
    if not files:
        raise EvidenceError(f"no evidence files found in {', '.join(str(p) for p in paths) or 'an empty list'}")
    from pytest_nvlink.sources.evidence import rack as evidence_rack  # it builds on this module's readers

    if evidence_rack.is_rack_evidence([loaded.text for loaded in files]):
        return evidence_rack.load_rack(files, pending)
    parts = detect_all(files)
    merger = Merger()
    for kind, loaded in parts:
        absorb(kind, loaded, merger, pending)
    if pending.nccl_logs:
        absorb_nccl_logs(pending.nccl_logs, merger)
    node = merger.build()
    impossible = evidence_value_error(node, node.provenance, {loaded.name: loaded.text for loaded in files})
    if impossible:
        raise EvidenceError(impossible)
    node.evidence_notes = {file: list(notes) for file, notes in pending.notes.items()}
    return node


def coverage(node: Node) -> list[tuple[str, str]]:
    """(family, files) for every family, "" where no file covered it; for a run summary."""
    return [(family, node.provenance.get(family, "")) for family in FAMILIES]


def file_coverage(node: Node) -> list[tuple[str, list[str], list[str]]]:
    """(file, families it contributed to, notes about it) for every file that fed or was noted."""
    families: dict[str, list[str]] = {}
    for family in FAMILIES:
        for name in filter(None, node.provenance.get(family, "").split(", ")):
            families.setdefault(_file_of(name), []).append(family)
    files = list(dict.fromkeys([*families, *node.evidence_notes]))
    return [(file, families.get(file, []), node.evidence_notes.get(file, [])) for file in files]


def _file_of(name: str) -> str:
    """The file of a provenance entry; parts of a multi-output file are named "file (line N)"."""
    match = re.fullmatch(r"(.*) \(line \d+\)", name)
    return match.group(1) if match else name


# --- reading files ------------------------------------------------------------------------------


def _expand(paths: list[Path], exclude: Sequence[str], pending: Pending) -> list[Loaded]:
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
            f"{', '.join(unknown)}: cannot tell which tool produced this text; expected output of nvidia-smi "
            "topo -m/-p2p, nvidia-smi nvlink -s/-e/-c/-R, nvidia-smi -q, nccl-tests, p2pBandwidthLatencyTest, "
            "nvbandwidth, an NCCL_DEBUG=INFO log or a pytest-nvlink snapshot (leave other files out with "
            "--nvlink-evidence-exclude=GLOB)"
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
    if kind == detect.NCCL_LOG:
        pending.nccl_logs.append(loaded)  # merged together at the end: one log per rank is common
        return
    result = parse_loaded(kind, loaded)
    for line_no, text in getattr(result, "notes", ()):
        pending.note(loaded.file, f"line {loaded.first_line - 1 + line_no}: {text}" if line_no else text)
    _dispatch(kind, result, loaded, merger, pending)


def _dispatch(kind: str, result: object, loaded: Loaded, merger: Merger, pending: Pending) -> None:
    name = loaded.name
    if isinstance(result, TopoMatrix):
        merger.add_topo(result, name)
    elif isinstance(result, TopoP2P):
        if not result.capabilities:
            not_ok = [f"GPU{a}->GPU{b} {status}" for (a, b), status in sorted(result.status.items()) if status != "ok"]
            shown = f" ({len(not_ok)} pair(s) not OK: {', '.join(not_ok[:4])}{', ...' if len(not_ok) > 4 else ''})"
            pending.note(
                loaded.file,
                f"nvidia-smi topo -p2p matrix without its command line (line {loaded.first_line}): the capability "
                "(r, w, n, a) is not stated, so it gives the GPU count only; its P2P answers are not judged"
                + (shown if not_ok else ""),
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
    elif isinstance(result, SmiQuery):
        for note in merger.add_smi_query(result, name):
            pending.note(loaded.file, note)
    elif kind == detect.SNAPSHOT_JSON:
        try:
            node = node_from_document(result, name)
        except SnapshotError as exc:
            raise EvidenceError(str(exc)) from None
        merger.add_snapshot(node, name)
    else:  # pragma: no cover - detect and parse_kind agree on the kinds
        raise EvidenceError(f"{name}: no merge rule for {kind}")


def _add_nccl_tests(result: NcclTestsResult, loaded: Loaded, merger: Merger, pending: Pending) -> None:
    if not result.rows:
        _add_hung_run(result, loaded, merger, pending)
        return
    if result.op is None:
        candidates = " or ".join(result.op_candidates) or "any collective"
        pending.note(
            loaded.file,
            f"nccl-tests rows without the test name: the collective could be {candidates}; its bandwidth is "
            "not judged (keep the '# Collective test starting' or command line to judge it)",
        )
    elif result.inferred:
        pending.note(loaded.file, f"nccl-tests header trimmed: {result.inferred}")
    if result.nranks is None:
        pending.note(
            loaded.file,
            "nccl-tests output without '# Using devices' rank lines, '# nThread ... nGpus' header or NCCL INFO "
            "rank lines: the number of ranks is unknown, so its bandwidth is not judged",
        )
    if result.op is not None and result.nranks is not None:
        merger.add_nccl_tests(result, loaded.name)
    # A run with NCCL_DEBUG=INFO also shows which transports NCCL picked.
    if re.search(r"NCCL\s+INFO\s+Channel\s+\d+.*\bvia\b", loaded.text):
        pending.nccl_logs.append(loaded)


def _add_hung_run(result: NcclTestsResult, loaded: Loaded, merger: Merger, pending: Pending) -> None:
    """Banner and column header but no row: the run hung or was killed, which is a failed run."""
    error = "the nccl-tests run printed its header and no result row (it hung or was killed)"
    pending.note(loaded.file, f"{error}; judged as a failed {result.op or 'collective'} run")
    if result.op is not None:
        merger.add_failed_collective(result.op, result.nranks or 0, error, loaded.name)


def absorb_nccl_logs(logs: list[Loaded], merger: Merger) -> None:
    for loaded in logs:  # parse one by one first, so that an error names its file
        try:
            nccl_log.parse(loaded.text)
        except ParseError as exc:
            raise EvidenceError(f"{loaded.where(exc.line_no)}: {exc.message} (read as nccl_log)") from None
    names = ", ".join(log.name for log in logs)
    merged = nccl_log.parse_many([log.text for log in logs])
    merger.add_nccl_audit(nccl_log.to_audit(merged, names), [log.name for log in logs])
