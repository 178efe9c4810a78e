"""Parser for NVIDIA nvbandwidth's text output, older (0.00 diagonal, no SUM) and newer formats.

Each testcase prints ``Running <name>.``, a title such as ``memcpy CE GPU(row) <- GPU(column)
bandwidth (GB/s)``, a column header and one row per source. The arrow in the title says which
way the data moved; it differs between testcases, so it is kept with each matrix rather than assumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_nvlink.parsers.common import ParseError, bad_line, parse_float, split_lines

_RUNNING = re.compile(r"Running\s+([\w.-]+?)\.?\s*")
_TITLE = re.compile(
    r"(?P<what>.*?)\s*(?P<rowkind>CPU|GPU)\(row\)\s*(?P<arrow><->|->|<-)\s*(?P<colkind>CPU|GPU)\(column\)"
    r"\s*(?P<rest>.*?)\s*\((?P<unit>GB/s|ns|us)\)\s*"
)
_DEVICE = re.compile(
    r"(?:Process\s+\d+\s*(?:\([^)]*\))?\s*:\s*)?[Dd]evice\s+(\d+)\s*:\s*(.+?)\s*(?:\(([0-9A-Fa-f]+:[0-9A-Fa-f:.]+)\))?\s*"
)
_SUM = re.compile(r"SUM\s+([\w.-]+)\s+(\S+)\s*")
_VERSIONS = {
    "nvbandwidth Version": "version",
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
    matrix: dict[tuple[int, int], float | None]  # N/A cells are None
    total: float | None = None  # the SUM line of newer versions

    @property
    def bidirectional(self) -> bool:
        return self.arrow == "<->"

    def source_and_destination(self, row: int, column: int) -> tuple[int, int]:
        """(src, dst) of the data for a cell; for "<->" the row is reported as the source."""
        return (column, row) if self.arrow == "<-" else (row, column)


@dataclass(frozen=True)
class NvbandwidthResult:
    testcases: dict[str, Testcase]
    devices: dict[int, str]  # index -> name
    device_bus_ids: dict[int, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # keys: values of _VERSIONS
    waived: tuple[str, ...] = ()  # testcases that ran but printed no matrix

    @property
    def version(self) -> str | None:
        return self.versions.get("version")


@dataclass
class _Pending:
    name: str
    line_no: int
    title: re.Match[str] | None = None
    matrix: dict[tuple[int, int], float | None] | None = None


@dataclass
class _Builder:
    testcases: dict[str, Testcase] = field(default_factory=dict)
    devices: dict[int, str] = field(default_factory=dict)
    bus_ids: dict[int, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    waived: list[str] = field(default_factory=list)
    sums: dict[str, float] = field(default_factory=dict)


def parse(text: str) -> NvbandwidthResult:
    lines = split_lines(text)
    out = _Builder()
    pending: _Pending | None = None
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if match := _RUNNING.fullmatch(line):
            _finish(pending, out)
            pending = _Pending(match.group(1), index)
        elif pending is not None and pending.title is None and (match := _TITLE.fullmatch(line)):
            pending.title = match
        elif pending is not None and pending.title is not None and re.fullmatch(r"\d+(?:\s+\d+)*", line):
            if pending.matrix is not None:
                raise bad_line(f"one matrix for testcase {pending.name}", lines[index - 1], index)
            pending.matrix, index = _read_matrix(lines, index, line)
        elif match := _SUM.fullmatch(line):
            out.sums[match.group(1)] = _number(match.group(2), lines[index - 1], index)
        else:
            _read_preamble(line, out)
    _finish(pending, out)
    if not out.testcases and not out.waived:
        raise ParseError("expected nvbandwidth output ('Running <testcase>.' followed by a matrix); none found", 0)
    testcases = {name: _with_total(case, out.sums.get(name)) for name, case in out.testcases.items()}
    return NvbandwidthResult(testcases, out.devices, out.bus_ids, out.versions, tuple(out.waived))


def _with_total(case: Testcase, total: float | None) -> Testcase:
    return Testcase(case.name, case.title, case.row_kind, case.column_kind, case.arrow, case.unit, case.matrix, total)


def _read_preamble(line: str, out: _Builder) -> None:
    for label, key in _VERSIONS.items():
        if line.startswith(label + ":"):
            out.versions[key] = line[len(label) + 1 :].strip()
            return
    if match := _DEVICE.fullmatch(line):
        out.devices[int(match.group(1))] = match.group(2)
        if match.group(3):
            out.bus_ids[int(match.group(1))] = match.group(3)


def _finish(pending: _Pending | None, out: _Builder) -> None:
    if pending is None:
        return
    if pending.name in out.testcases:
        raise ParseError(f"testcase {pending.name} appears twice", pending.line_no)
    if pending.title is None or pending.matrix is None:
        out.waived.append(pending.name)  # "Waived" or an error message instead of a result
        return
    title = pending.title
    out.testcases[pending.name] = Testcase(
        name=pending.name,
        title=title.group(0).strip(),
        row_kind=title.group("rowkind"),
        column_kind=title.group("colkind"),
        arrow=title.group("arrow"),
        unit=title.group("unit"),
        matrix=pending.matrix,
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
