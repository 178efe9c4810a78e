"""Parser for NVIDIA nvbandwidth's text output, older (0.00 diagonal, no SUM) and newer formats.

Each testcase prints ``Running <name>.``, a title such as ``memcpy CE GPU(row) <- GPU(column)
bandwidth (GB/s)``, a column header and one row per source. The arrow in the title says which
way the data moved; it differs between testcases, so it is kept with each matrix rather than assumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_nvlink.model import WRONG_DATA, P2PMeasurement
from pytest_nvlink.sources.evidence.parsers.common import ParseError, bad_line, parse_float, split_lines
from pytest_nvlink.sources.evidence.parsers.nvbandwidth_host import host_link_measurements, host_link_notes
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

if TYPE_CHECKING:
    from pytest_nvlink.sources.evidence.merge import Merger

_RUNNING = re.compile(r"Running\s+([\w.-]+?)\.?\s*")
_TITLE = re.compile(
    r"(?P<what>.*?)\s*(?P<rowkind>CPU|GPU)\(row\)\s*(?P<arrow><->|->|<-)\s*(?P<colkind>CPU|GPU)\(column\)"
    r"\s*(?P<rest>.*?)\s*\((?P<unit>GB/s|ns|us)\)\s*"
)
_DEVICE = re.compile(r"[Dd]evice\s+(\d+)\s*:\s*(.+?)\s*(?:\(([0-9A-Fa-f]+:[0-9A-Fa-f:.]+)\))?\s*")
# Multinode builds (one MPI process per GPU) name each process's host and its device there, so device
# numbers restart on every host: "Process 4 (tray-02): device 0: NVIDIA GB200 (00000008:01:00)".
_PROCESS_START = re.compile(r"Process\s+\d+\b")
_PROCESS = re.compile(
    r"Process\s+(\d+)\s*\(([^()\s]+)\)\s*:\s*[Dd]evice\s+(\d+)\s*:\s*(.+?)\s*(?:\(([0-9A-Fa-f]+:[0-9A-Fa-f:.]+)\))\s*"
)
_SUM = re.compile(r"SUM\s+([\w.-]+)\s+(\S+)\s*")
# The data check after a copy aborts the whole run: "Invalid value when checking the pattern at ...", "ASSERT ...".
_ABORT = re.compile(r".*(?:\bASSERT\b|Invalid value when checking the pattern).*")
_QUOTE = re.compile(r"^\s*(?:>\s?)+")  # Markdown quoting of a pasted block: "> Running ...", "> > 0  N/A ..."
_VERSIONS = {
    "nvbandwidth Version": "version",
    "MPI version": "mpi",
    "Built from Git version": "git_version",
    "CUDA Runtime Version": "cuda_runtime",
    "CUDA Driver Version": "cuda_driver",
    "Driver Version": "driver",
}


@dataclass(frozen=True)
class Testcase:
    name: str
    title: str
    row_kind: str  # "GPU" or "CPU"
    column_kind: str
    arrow: str  # "<-": data moved column -> row; "->": row -> column; "<->": both at once
    unit: str  # "GB/s", or "ns" for latency testcases
    matrix: dict[tuple[int, int], float | None]  # N/A cells are None; the "Total" one when several are printed
    total: float | None = None  # the SUM line of newer versions
    # Bidirectional testcases of newer versions print per-direction matrices too ("Read1", "Read2",
    # "Write1", ...) besides "Total"; kept apart here, keyed by that word.
    parts: dict[str, dict[tuple[int, int], float | None]] = field(default_factory=dict)

    @property
    def bidirectional(self) -> bool:
        return self.arrow == "<->"

    def source_and_destination(self, row: int, column: int) -> tuple[int, int]:
        """(src, dst) of the data for a cell; for "<->" the row is reported as the source."""
        return (column, row) if self.arrow == "<-" else (row, column)


@dataclass(frozen=True)
class ProcessDevice:
    """One MPI process of a multinode run: the matrices' row/column ``process`` is ``device`` on ``host``."""

    process: int
    host: str
    device: int  # the CUDA device on that host; numbers restart on every host
    name: str
    bus_id: str | None


@dataclass(frozen=True)
class NvbandwidthResult:
    testcases: dict[str, Testcase]
    devices: dict[int, str]  # index -> name
    device_bus_ids: dict[int, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # keys: values of _VERSIONS
    waived: tuple[str, ...] = ()  # testcases that ran but printed no matrix
    notes: tuple[tuple[int, str], ...] = ()
    processes: dict[int, ProcessDevice] = field(default_factory=dict)  # multinode builds only
    aborted: dict[str, str] = field(default_factory=dict)  # testcase -> the line its data check aborted with

    @property
    def version(self) -> str | None:
        return self.versions.get("version")

    @property
    def hosts(self) -> tuple[str, ...]:
        """The hosts of a multinode run in the order of their first process."""
        return tuple(dict.fromkeys(p.host for _, p in sorted(self.processes.items())))


@dataclass
class _Pending:
    name: str
    line_no: int
    title: re.Match[str] | None = None
    matrix: dict[tuple[int, int], float | None] | None = None
    parts: dict[str, tuple[re.Match[str], dict[tuple[int, int], float | None]]] = field(default_factory=dict)

    @property
    def unnamed(self) -> bool:
        return self.name.startswith(_UNNAMED)

    def next_title(self, title: re.Match[str]) -> bool:
        """Take a further matrix title of the same testcase; False when it starts another testcase."""
        part = _part_of(title)
        if self.title is None or self.matrix is None or part is None or _part_of(self.title) is None:
            return False
        self.parts[_part_of(self.title) or ""] = (self.title, self.matrix)
        self.title, self.matrix = title, None
        return True


@dataclass
class _Builder:
    testcases: dict[str, Testcase] = field(default_factory=dict)
    devices: dict[int, str] = field(default_factory=dict)
    bus_ids: dict[int, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    waived: list[str] = field(default_factory=list)
    sums: dict[str, float] = field(default_factory=dict)
    sum_lines: dict[str, int] = field(default_factory=dict)
    notes: list[tuple[int, str]] = field(default_factory=list)
    processes: dict[int, ProcessDevice] = field(default_factory=dict)
    aborted: dict[str, str] = field(default_factory=dict)


def parse(text: str) -> NvbandwidthResult:
    lines = [_QUOTE.sub("", line) for line in split_lines(text)]
    out = _Builder()
    pending: _Pending | None = None
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if match := _RUNNING.fullmatch(line):
            _finish(pending, out)
            pending = _Pending(match.group(1), index)
        elif match := _TITLE.fullmatch(line):
            pending = _take_title(pending, match, index, out)
        elif pending is not None and pending.title is not None and re.fullmatch(r"\d+(?:\s+\d+)*", line):
            if pending.matrix is not None:
                raise bad_line(f"one matrix per title for testcase {pending.name}", lines[index - 1], index)
            pending.matrix, index = _read_matrix(lines, index, line)
        elif match := _SUM.fullmatch(line):
            out.sums[match.group(1)] = _number(match.group(2), lines[index - 1], index)
            out.sum_lines[match.group(1)] = index
            if pending is not None and pending.unnamed:
                pending.name = match.group(1)  # newer versions: the name may survive only on the SUM line
        elif pending is not None and pending.title is None and line.startswith("Waived"):
            _finish(pending, out)
            pending = None
        elif _ABORT.fullmatch(line) and not (out.aborted and pending is None):  # later lines of the same abort
            name = pending.name if pending is not None and pending.matrix is None else "the testcase after the last"
            out.aborted.setdefault(name, line)
            pending = None if pending is not None and pending.matrix is None else pending
        elif _PROCESS_START.match(line):
            _read_process(line, lines[index - 1], index, out)
        else:
            _read_preamble(line, out)
    _finish(pending, out)
    if not out.testcases and not out.waived and not out.aborted:
        raise ParseError("expected nvbandwidth output ('Running <testcase>.' followed by a matrix); none found", 0)
    testcases = {name: _with_total(case, out.sums.get(name)) for name, case in out.testcases.items()}
    out.notes.extend(_sums_that_disagree(testcases, out.sum_lines))
    return NvbandwidthResult(
        testcases,
        out.devices,
        out.bus_ids,
        out.versions,
        tuple(out.waived),
        tuple(out.notes),
        out.processes,
        out.aborted,
    )


_UNNAMED = "unnamed testcase at line "


def _sums_that_disagree(testcases: dict[str, Testcase], sum_lines: dict[str, int]) -> list[tuple[int, str]]:
    """SUM lines that are not the sum of their matrix's cells: a cell or the SUM line was damaged.

    Cells are printed to two decimals, so the sum may differ from SUM by up to 0.005 per cell.
    """
    notes = []
    for name, case in testcases.items():
        cells = [value for value in case.matrix.values() if value is not None]
        if case.total is None or abs(sum(cells) - case.total) <= 0.01 * len(cells) + 0.01:
            continue
        notes.append(
            (
                sum_lines.get(name, 0),
                f"SUM {name} {case.total:g} is not the sum of its {len(cells)} cells ({sum(cells):.2f}): "
                "a cell or the SUM line is damaged",
            )
        )
    return notes


def _part_of(title: re.Match[str]) -> str | None:
    words = [w for w in title.group("rest").split() if w.lower() not in ("bandwidth", "latency")]
    return words[0] if words else None


def _take_title(pending: _Pending | None, title: re.Match[str], line_no: int, out: _Builder) -> _Pending:
    if pending is not None and pending.title is None:
        pending.title = title
        return pending
    if pending is not None and pending.next_title(title):
        return pending
    # A matrix title with no "Running <name>." line before it: the line was cut ("...").
    _finish(pending, out)
    return _Pending(f"{_UNNAMED}{line_no}", line_no, title)


def _with_total(case: Testcase, total: float | None) -> Testcase:
    return Testcase(
        case.name, case.title, case.row_kind, case.column_kind, case.arrow, case.unit, case.matrix, total, case.parts
    )


def _read_preamble(line: str, out: _Builder) -> None:
    for label, key in _VERSIONS.items():
        if line.startswith(label + ":"):
            out.versions[key] = line[len(label) + 1 :].strip()
            return
    if match := _DEVICE.fullmatch(line):
        out.devices[int(match.group(1))] = match.group(2)
        if match.group(3):
            out.bus_ids[int(match.group(1))] = match.group(3)


def _read_process(line: str, raw: str, line_no: int, out: _Builder) -> None:
    match = _PROCESS.fullmatch(line)
    if match is None:  # cut or damaged: which GPU a row is would be a guess
        raise bad_line("'Process N (HOST): device M: NAME (BUS ID)'", raw, line_no)
    process, host, device, name, bus = match.groups()
    if int(process) in out.processes:
        raise bad_line(f"process {process} once", raw, line_no)
    out.processes[int(process)] = ProcessDevice(int(process), host, int(device), name, bus)


def _finish(pending: _Pending | None, out: _Builder) -> None:
    if pending is None:
        return
    if pending.name in out.testcases:
        raise ParseError(f"testcase {pending.name} appears twice", pending.line_no)
    if pending.title is None or pending.matrix is None:
        out.waived.append(pending.name)  # "Waived" or an error message instead of a result
        return
    if pending.unnamed:
        out.notes.append(
            (pending.line_no, "a matrix with no 'Running <testcase>.' line or SUM line naming it; not read")
        )
        return
    parts = {**pending.parts, _part_of(pending.title) or "": (pending.title, pending.matrix)}
    main = next((key for key in parts if key.lower() == "total"), next(iter(parts)))
    title, matrix = parts.pop(main)
    out.testcases[pending.name] = Testcase(
        name=pending.name,
        title=title.group(0).strip(),
        row_kind=title.group("rowkind"),
        column_kind=title.group("colkind"),
        arrow=title.group("arrow"),
        unit=title.group("unit"),
        matrix=matrix,
        parts={key: value for key, (_, value) in parts.items()},
    )


def _read_matrix(lines: list[str], index: int, header: str) -> tuple[dict[tuple[int, int], float | None], int]:
    columns = [int(c) for c in header.split()]
    matrix: dict[tuple[int, int], float | None] = {}
    rows: set[int] = set()
    while index < len(lines):
        tokens = lines[index].split()
        if not tokens or not tokens[0].isdigit():
            break
        row = int(tokens[0])
        if len(tokens) != len(columns) + 1 or row in rows:
            raise bad_line(f"row {row} once, with {len(columns)} values (number or N/A)", lines[index], index + 1)
        rows.add(row)
        for column, token in zip(columns, tokens[1:], strict=True):
            matrix[(row, column)] = None if token.upper() == "N/A" else _number(token, lines[index], index + 1)
        index += 1
    if not matrix:
        raise ParseError("a matrix column header with no rows under it", index)
    return matrix, index


def _number(token: str, line: str, line_no: int) -> float:
    value = parse_float(token)
    if value is None:
        raise bad_line("a number or N/A", line, line_no)
    return value


# --- the evidence format: how this output is told apart and merged ----------------------------------

KIND = "nvbandwidth"
_M = re.MULTILINE


def _detect(text: str) -> str | None:
    if re.search(r"^[\s>]*nvbandwidth Version:", text, _M):
        return KIND  # no other tool prints it; its testcases may all be waived or aborted
    names = r"^[\s>]*(?:Running\s+\w+\.|SUM\s+\w+\s+[\d.]+\s*$)"
    if re.search(names, text, _M) and re.search(r"\(row\)\s*(?:<->|->|<-)", text):
        return KIND
    return None


def _merge(into: Into, result: NvbandwidthResult) -> None:
    add(into.merger, result, into.part.name)
    for note in no_p2p_notes(result) + host_link_notes(result):
        into.note(note)


def add(merger: Merger, result: NvbandwidthResult, file: str) -> None:
    """The GPU count and names, every device-to-device figure as a pair measurement, every host-link figure."""
    gpu_cases = [c for c in result.testcases.values() if c.row_kind == c.column_kind == "GPU"]
    if result.devices:
        merger.count(len(result.devices), file)
    elif gpu_cases:
        merger.count(max(max(a, b) for a, b in gpu_cases[0].matrix) + 1, file)
    for index, name in result.devices.items():
        merger.gpu_fact(index, "name", name, file)
    if not result.devices and not gpu_cases:  # host tests only: their GPU columns name GPUs that exist
        columns = [col for case in _host_cases(result) for _, col in case.matrix]
        if columns:
            merger.lower_bound(max(columns) + 1, file)
    for case in gpu_cases:
        if "device_to_device" in case.name:
            merger.p2p_measurements.extend(_measurements(case, file))
            merger.note("p2p_bandwidth", file)
    add_unmeasured(merger, result, file)
    merger.add_host_link(host_link_measurements(result, file), file)


def _measurements(case: Testcase, file: str) -> list[P2PMeasurement]:
    if case.unit == "ns":
        kind, unit, scale = "latency", "us", 1e-3
    else:
        kind, unit, scale = ("bidirectional" if case.bidirectional else "unidirectional"), "GB/s", 1.0
    # Newer versions print per-direction matrices and a "Total" (the sum, judged); a bidirectional testcase
    # with one matrix only reports each direction, which the judge doubles to compare with the sum floor.
    summed = ("total" in case.title.lower().split()) if kind == "bidirectional" else None
    found = []
    for (row, col), value in sorted(case.matrix.items()):
        if row == col:
            continue
        src, dst = case.source_and_destination(row, col)
        found.append(
            P2PMeasurement(
                src,
                dst,
                kind,
                None if value is None else value * scale,
                unit,
                error="nvbandwidth printed N/A" if value is None else None,
                source=f"nvbandwidth {case.name}: {file}",
                bidirectional_sum=summed,
            )
        )
    return found


def _host_cases(result: NvbandwidthResult) -> list[Testcase]:
    """Host<->device testcases: one CPU row, a column per GPU; never GPU pairs."""
    return [case for case in result.testcases.values() if "CPU" in (case.row_kind, case.column_kind)]


def _waived_device_to_device(result: NvbandwidthResult) -> list[str]:
    return [name for name in result.waived if "device_to_device" in name]


def _pairs(result: NvbandwidthResult) -> list[tuple[int, int]]:
    return [(a, b) for a in sorted(result.devices) for b in sorted(result.devices) if a != b]


def _unmeasured(name: str, pairs: list[tuple[int, int]], error: str, file: str) -> list[P2PMeasurement]:
    kind = "latency" if "latency" in name else "bidirectional" if "bidirectional" in name else "unidirectional"
    unit = "us" if kind == "latency" else "GB/s"
    source = f"nvbandwidth {name}: {file}"
    return [P2PMeasurement(src, dst, kind, None, unit, error=error, source=source) for src, dst in pairs]


def add_unmeasured(merger: Merger, result: NvbandwidthResult, file: str) -> None:
    """Device-to-device testcases without a matrix: waived (no pair has P2P) or aborted by the data check."""
    pairs = _pairs(result)
    for name in _waived_device_to_device(result):
        # nvbandwidth waives a device-to-device testcase when no GPU pair can access peer memory.
        for src, dst in pairs:
            for capability in [c for c in ("read", "write") if c in name] or ["read", "write"]:
                merger.p2p_status(src, dst, capability, "waived: no P2P", file)
        merger.p2p_measurements.extend(_unmeasured(name, pairs, f"nvbandwidth {name} waived: no P2P", file))
        if pairs:
            merger.note("p2p", file)
            merger.note("p2p_bandwidth", file)
    for name, line in result.aborted.items():
        error = f"{WRONG_DATA}: nvbandwidth {name} aborted in its data check ({line.strip()})"
        merger.p2p_measurements.extend(_unmeasured(name, pairs, error, file))
        if pairs:
            merger.note("p2p_bandwidth", file)


def no_p2p_notes(result: NvbandwidthResult) -> list[str]:
    unnamed = "" if result.devices else "; its 'Device N:' lines are missing, so no GPU pair can be named"
    notes = [
        f"nvbandwidth {name} waived: no GPU pair can access peer memory{unnamed}"
        for name in _waived_device_to_device(result)
    ]
    notes += [
        f"nvbandwidth {name} aborted in its data check ({line.strip()!r}): the copied data was wrong{unnamed}"
        for name, line in result.aborted.items()
    ]
    return notes


FORMAT = register(
    Format(
        name=KIND,
        kinds=(KIND,),
        order=30,
        detect=_detect,
        parse=parse,
        families=("inventory", "p2p_bandwidth", "host_link"),
        label="nvbandwidth",
        merge=_merge,
        start=re.compile(r"^\s*(?:nvbandwidth Version:|Running\s+\w+\.\s*$)"),
        continues=lambda _so_far: True,  # nvbandwidth prints one "Running" line per testcase
        commands=(r"nvbandwidth\b",),
    )
)
