"""Parser for the CUDA samples' ``p2pBandwidthLatencyTest`` output.

Matrices are keyed ``(kind, p2p_enabled)`` with kind "unidirectional", "bidirectional", "latency"
(the GPU sub-table, or the only table in older versions) or "latency_cpu", and cells keyed
``(row, column)``. With the default P2P writes the row GPU writes into the column GPU, so data
flows row -> column; with ``--p2p_read`` it flows column -> row (see ``data_flows_row_to_column``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_nvlink.model import P2PMeasurement
from pytest_nvlink.sources.evidence.parsers.common import (
    ParseError,
    bad_line,
    is_non_finite,
    non_finite_error,
    parse_float,
    split_lines,
)
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

_DEVICE = re.compile(
    r"Device:\s*(\d+),\s*(.+?),\s*pciBusID:\s*([0-9a-fA-F]+),\s*pciDeviceID:\s*([0-9a-fA-F]+),"
    r"\s*pciDomainID:\s*([0-9a-fA-F]+)\s*"
)
_ACCESS = re.compile(r"Device=(\d+)\s+(CAN|CANNOT)\s+Access\s+Peer\s+Device=(\d+)", re.IGNORECASE)
_TITLE = re.compile(
    r"(Unidirectional|Bidirectional)?\s*P2P=(Enabled|Disabled)\s+(Bandwidth|Latency)\s*(?:\((P2P \w+)\))?\s*Matrix",
    re.IGNORECASE,
)
_COLUMNS = re.compile(r"(D\\D|GPU|CPU)((?:\s+\d+)+)")

Matrix = dict[tuple[int, int], float | None]


@dataclass(frozen=True)
class P2PDevice:
    index: int
    name: str
    pci_bus_id: str  # "0000:07:00.0", built from the printed domain/bus/device numbers


@dataclass(frozen=True)
class P2PLatencyResult:
    devices: tuple[P2PDevice, ...]
    can_access: dict[tuple[int, int], bool]  # (device, peer) -> CAN / CANNOT Access Peer
    connectivity: dict[tuple[int, int], bool]
    matrices: dict[tuple[str, bool], Matrix]  # (kind, p2p_enabled) -> {(row, col): value}
    data_flows_row_to_column: bool = True  # False for the "P2P Reads" variant
    units: dict[str, str] = field(default_factory=dict)  # kind -> "GB/s" or "us"

    @property
    def gpu_count(self) -> int:
        return len(self.devices)


@dataclass
class _Builder:
    devices: list[P2PDevice] = field(default_factory=list)
    can_access: dict[tuple[int, int], bool] = field(default_factory=dict)
    connectivity: dict[tuple[int, int], bool] = field(default_factory=dict)
    matrices: dict[tuple[str, bool], Matrix] = field(default_factory=dict)
    reads: bool = False


def parse(text: str) -> P2PLatencyResult:
    lines = split_lines(text)
    out = _Builder()
    section: tuple[str, bool] | None = None  # current matrix title, or ("connectivity", True)
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if match := _DEVICE.fullmatch(line):
            out.devices.append(_device(match))
        elif match := _ACCESS.search(line):
            out.can_access[(int(match.group(1)), int(match.group(3)))] = match.group(2).upper() == "CAN"
        elif line.startswith("P2P Connectivity Matrix"):
            section = ("connectivity", True)
        elif match := _TITLE.search(line):
            section = _section_of(match)
            out.reads = out.reads or "read" in (match.group(4) or "").lower()
        elif match := _COLUMNS.fullmatch(line):
            if section is None:
                raise bad_line("a matrix title before the column header", lines[index - 1], index)
            index = _read_matrix(lines, index, match, section, out)
    if not out.matrices and not out.connectivity and not out.can_access:
        raise ParseError("expected p2pBandwidthLatencyTest output (Device/Access Peer lines or matrices); none", 0)
    _check_sizes(out)
    units = {kind: ("us" if kind.startswith("latency") else "GB/s") for kind, _ in out.matrices}
    return P2PLatencyResult(tuple(out.devices), out.can_access, out.connectivity, out.matrices, not out.reads, units)


def _device(match: re.Match[str]) -> P2PDevice:
    index, name, bus, dev, domain = match.groups()
    return P2PDevice(int(index), name, f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.0")


def _section_of(match: re.Match[str]) -> tuple[str, bool]:
    enabled = match.group(2).lower() == "enabled"
    if match.group(3).lower() == "latency":
        return ("latency", enabled)
    direction = (match.group(1) or "unidirectional").lower()
    return (direction, enabled)


def _read_matrix(lines: list[str], index: int, header: re.Match[str], section: tuple[str, bool], out: _Builder) -> int:
    columns = [int(c) for c in header.group(2).split()]
    key = section
    if section[0] == "latency" and header.group(1) == "CPU":
        key = ("latency_cpu", section[1])
    cells: dict[tuple[int, int], float | None] = {}
    while index < len(lines):
        tokens = lines[index].split()
        if not tokens or not tokens[0].isdigit():
            break
        row = int(tokens[0])
        if len(tokens) != len(columns) + 1:
            raise bad_line(f"row {row} with {len(columns)} values of the {key[0]} matrix", lines[index], index + 1)
        for column, token in zip(columns, tokens[1:], strict=True):
            cells[(row, column)] = _cell(token, lines[index], index + 1)
        index += 1
    if not cells:
        raise ParseError(f"the {key[0]} matrix has a header but no rows", index)
    if key[0] == "connectivity":
        out.connectivity.update({pair: bool(value) for pair, value in cells.items()})
    elif key in out.matrices:
        raise ParseError(f"a second {key[0]} matrix with P2P={'Enabled' if key[1] else 'Disabled'}", index)
    else:
        out.matrices[key] = cells
    return index


def _cell(token: str, line: str, line_no: int) -> float:
    if is_non_finite(token):
        raise non_finite_error("a matrix cell", token, line, line_no)
    value = parse_float(token)
    if value is None:
        raise bad_line("a number in the matrix", line, line_no)
    return value


def _check_sizes(out: _Builder) -> None:
    """Every matrix must cover the same square of devices; a shorter one means a dropped row."""
    expected = {d.index for d in out.devices}
    tables: list[tuple[str, set[tuple[int, int]]]] = [(k[0], set(m)) for k, m in out.matrices.items()]
    if out.connectivity:
        tables.append(("connectivity", set(out.connectivity)))
    for name, pairs in tables:
        rows = {a for a, _ in pairs} | {b for _, b in pairs}
        if expected and rows != expected:
            raise ParseError(f"the {name} matrix covers devices {sorted(rows)}, the device list {sorted(expected)}")
        if len(pairs) != len(rows) ** 2:
            raise ParseError(f"the {name} matrix is not square ({len(pairs)} cells for {len(rows)} devices)")


# --- the evidence format: how this output is told apart and merged ----------------------------------

KIND = "p2p_bandwidth_latency"


def _detect(text: str) -> str | None:
    if re.search(r"Peer-to-Peer\) GPU Bandwidth Latency Test|Access Peer Device=|P2P=(?:Enabled|Disabled)", text):
        return KIND
    return None


def _merge(into: Into, result: P2PLatencyResult) -> None:
    merger, file = into.merger, into.part.name
    count = result.gpu_count or _square(result.matrices)
    if count:
        merger.count(count, file)
    for device in result.devices:
        merger.gpu_fact(device.index, "name", device.name, file)
    for (src, dst), can in result.can_access.items():
        for capability in ("read", "write"):
            merger.p2p_status(src, dst, capability, "ok" if can else "not_supported", file)
    if result.can_access:
        # CUDA's "can access peer" also holds for P2P over PCIe, so it covers no NVLink P2P check.
        merger.unknown_reason(
            "p2p",
            f"{file} (p2pBandwidthLatencyTest) states CUDA peer access, which P2P over PCIe also grants, not "
            "NVLink P2P capability; add `nvidia-smi topo -p2p n` output",
        )
    for kind in ("unidirectional", "bidirectional", "latency"):
        matrix = result.matrices.get((kind, True))
        merger.p2p_measurements.extend(_measurements(result, kind, matrix or {}, file))
        if matrix:
            merger.note("p2p_bandwidth", file)


def _measurements(
    result: P2PLatencyResult, kind: str, matrix: dict[tuple[int, int], float | None], file: str
) -> list[P2PMeasurement]:
    found = []
    for (row, col), value in sorted(matrix.items()):
        if row == col:
            continue
        src, dst = (row, col) if result.data_flows_row_to_column else (col, row)
        found.append(
            P2PMeasurement(
                src,
                dst,
                kind,
                value,
                "us" if kind == "latency" else "GB/s",
                can_access_peer=result.can_access.get((src, dst)),
                error=None if value is not None else "not a number in the output",
                source=f"p2pBandwidthLatencyTest: {file}",
            )
        )
    return found


def _square(matrices: dict[tuple[str, bool], dict[tuple[int, int], float | None]]) -> int:
    return max((max(a for a, _ in m) + 1 for m in matrices.values() if m), default=0)


FORMAT = register(
    Format(
        name="p2p_latency",
        kinds=(KIND,),
        order=40,
        detect=_detect,
        parse=parse,
        families=("inventory", "p2p_bandwidth"),
        label="p2pBandwidthLatencyTest",
        merge=_merge,
        start=re.compile(r"^\s*\[P2P \(Peer-to-Peer\) GPU Bandwidth Latency Test\]"),
        commands=(r"p2pBandwidthLatencyTest\b",),
    )
)
