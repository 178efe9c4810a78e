"""Parser for cuda-samples ``bandwidthTest``: host<->device copy bandwidth of one GPU, or a sum over several.

A run prints ``[CUDA Bandwidth Test] - Starting...``, ``Running on...``, one `` Device N: NAME`` line per
device it uses, the mode (`` Quick Mode``, `` Range Mode``, `` Shmoo Mode``) and one block per copy kind:
`` Host to Device Bandwidth, 1 Device(s)``, `` PINNED Memory Transfers`` (or ``PAGEABLE``), a
``Transfer Size (Bytes)  Bandwidth(GB/s)`` header and one row per size, then ``Result = PASS``, which only
says the copied data was right. Older versions print ``Bandwidth(MB/s)``, computed as
``(1 << 10) * bytes / (ms * (1 << 20))``: one such MB/s is 1,024,000 bytes/s, so GB/s = MB/s * 0.001024.
``--csv`` prints ``bandwidthTest-H2D-Pinned, Bandwidth = 12.3 GB/s, Time = ..., Size = N bytes, NumDevsUsed = 1``
instead. With ``--device=all`` each figure is the sum over all devices ("8 Device(s)"): no single GPU's.
(NVIDIA/cuda-samples ``Samples/1_Utilities/bandwidthTest/bandwidthTest.cu``.)

Several sizes (``--mode=range``/``shmoo``): the figure of the largest size is taken, as large copies are
where a link reaches its plateau and small ones measure latency; the size goes in ``conditions``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from pytest_nvlink.model import WRONG_DATA
from pytest_nvlink.model.host_link import PAGEABLE, PINNED, HostLinkMeasurement
from pytest_nvlink.sources.evidence.parsers.common import (
    ParseError,
    bad_line,
    is_non_finite,
    non_finite_error,
    parse_float,
    quote,
    split_lines,
)
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

__all__ = ["BandwidthTestResult", "Block", "Run", "measurements", "parse"]

_BANNER = re.compile(r"\[CUDA Bandwidth Test\]\s*-\s*Starting\.*")
_DEVICE = re.compile(r"Device\s+(\d+)\s*:\s*(.+?)")
_MODE = re.compile(r"(Quick|Range|Shmoo)\s+Mode")
_BLOCK = re.compile(r"(Host to Device|Device to Host|Device to Device)\s+Bandwidth,\s*(\d+)\s+Device\(s\)")
_MEMORY = re.compile(r"(PINNED|PAGEABLE)\s+Memory\s+Transfers")
_HEADER = re.compile(r"Transfer\s+Size\s+\(Bytes\)\s+Bandwidth\((GB|MB)/s\)")
_ROW = re.compile(r"(\d+)\s+(\S+)")
_RESULT = re.compile(r"Result\s*=\s*(\w+)")
_CSV = re.compile(
    r"bandwidthTest-(H2D|D2H|D2D)(-Paged|-Pinned)?(-WriteCombined)?\s*,\s*Bandwidth\s*=\s*(\S+)\s*(GB|MB)/s\s*,"
    r"\s*Time\s*=\s*\S+\s*s\s*,\s*Size\s*=\s*(\d+)\s*bytes\s*,\s*NumDevsUsed\s*=\s*(\d+)"
)
# Lines that state nothing about a figure: the banner's second line, the closing NOTE, shmoo's progress dots.
# A comment line of a saved log ("# ...") and the tool's command line ("$ ./bandwidthTest --device=0") too.
_IRRELEVANT = re.compile(r"Running on\.*|NOTE:.*|\.+|#.*|(?:\S*[$%>]\s+)?(?:sudo\s+)?\S*bandwidthTest\b.*")
_KINDS = {
    "Host to Device": "h2d",
    "Device to Host": "d2h",
    "Device to Device": "d2d",
    "H2D": "h2d",
    "D2H": "d2h",
    "D2D": "d2d",
}
# One MB/s of the older versions' formula, in GB/s (1e9 bytes/s).
MBS_IN_GBS = 1024 * 1000 / 1e9


@dataclass(frozen=True)
class Block:
    """One copy kind's table: its figures in GB/s by transfer size, as printed."""

    kind: str  # "h2d", "d2h" or "d2d"
    devices: int  # the "N Device(s)" of the block: more than 1 is a sum over that many GPUs
    memory: str  # "pinned" or "pageable"
    line_no: int
    rows: tuple[tuple[int, float], ...] = ()  # (transfer size in bytes, GB/s)
    write_combined: bool = False
    unit: str = "GB/s"  # as printed; the rows are GB/s either way


@dataclass(frozen=True)
class Run:
    """One run of the tool: the devices it names, its mode, its blocks and its Result line."""

    line_no: int
    devices: dict[int, str] = field(default_factory=dict)
    mode: str | None = None
    blocks: tuple[Block, ...] = ()
    result: str | None = None


@dataclass(frozen=True)
class BandwidthTestResult:
    runs: tuple[Run, ...]
    notes: tuple[tuple[int, str], ...] = ()


@dataclass
class _Builder:
    runs: list[Run] = field(default_factory=list)
    notes: list[tuple[int, str]] = field(default_factory=list)
    block: Block | None = None
    header: bool = False

    def run(self, line_no: int) -> Run:
        if not self.runs:  # the banner was cut off: the lines still belong to one run
            self.runs.append(Run(line_no))
        return self.runs[-1]

    def replace_run(self, **changes: Any) -> None:
        run = self.runs[-1]
        self.runs[-1] = dataclasses.replace(run, **changes)

    def close_block(self) -> None:
        if self.block is not None:
            if not self.block.rows:
                self.notes.append((self.block.line_no, f"the {_label(self.block)} block has no figure (cut short?)"))
            self.replace_run(blocks=(*self.runs[-1].blocks, self.block))
        self.block, self.header = None, False


def parse(text: str) -> BandwidthTestResult:
    out = _Builder()
    for line_no, raw in enumerate(split_lines(text), start=1):
        line = raw.strip()
        if line:
            _read_line(line, raw, line_no, out)
    if out.runs:
        out.close_block()
    if not any(run.blocks for run in out.runs):
        raise ParseError("expected bandwidthTest output (a 'Host to Device Bandwidth, N Device(s)' block); none found")
    return BandwidthTestResult(tuple(out.runs), tuple(out.notes))


def _read_line(line: str, raw: str, line_no: int, out: _Builder) -> None:
    if _BANNER.fullmatch(line):
        if out.runs:
            out.close_block()
        out.runs.append(Run(line_no))
    elif match := _BLOCK.fullmatch(line):
        out.run(line_no)
        out.close_block()
        out.block = Block(_KINDS[match.group(1)], int(match.group(2)), "", line_no)
    elif (match := _HEADER.search(line)) and out.block is not None:
        wc = "Write-Combined" in line
        out.block = _with(out.block, unit=f"{match.group(1)}/s", write_combined=out.block.write_combined or wc)
        out.header = True
    elif (match := _ROW.fullmatch(line)) and out.block is not None and out.header:
        value = _figure(match.group(2), out.block.unit, raw, line_no)
        out.block = _with(out.block, rows=(*out.block.rows, (int(match.group(1)), value)))
    else:
        _read_other(line, raw, line_no, out)


def _read_other(line: str, raw: str, line_no: int, out: _Builder) -> None:
    if (match := _MEMORY.match(line)) and out.block is not None and not out.block.memory:
        wc = "Write-Combined" in line
        out.block = _with(out.block, memory=match.group(1).lower(), write_combined=wc)
    elif "Write-Combined Memory Writes are Enabled" in line and out.block is not None:
        out.block = _with(out.block, write_combined=True)
    elif match := _DEVICE.fullmatch(line):
        out.replace_run(devices={**out.run(line_no).devices, int(match.group(1)): match.group(2)})
    elif match := _MODE.fullmatch(line):
        out.run(line_no)
        out.replace_run(mode=match.group(1).lower())
    elif match := _RESULT.fullmatch(line):
        out.run(line_no)
        out.close_block()
        out.replace_run(result=match.group(1).upper())
    elif match := _CSV.search(line):
        _read_csv(match, raw, line_no, out)
    elif not _IRRELEVANT.fullmatch(line):
        out.notes.append((line_no, f"line not read: {quote(line)}"))


def _read_csv(match: re.Match[str], raw: str, line_no: int, out: _Builder) -> None:
    kind, memory, wc, token, unit, size, devices = match.groups()
    out.run(line_no)
    out.close_block()
    value = _figure(token, f"{unit}/s", raw, line_no)
    memory_word = PAGEABLE if memory == "-Paged" else PINNED if memory == "-Pinned" else ""
    block = Block(_KINDS[kind], int(devices), memory_word, line_no, ((int(size), value),), bool(wc), f"{unit}/s")
    out.replace_run(blocks=(*out.runs[-1].blocks, block))


def _figure(token: str, unit: str, raw: str, line_no: int) -> float:
    if is_non_finite(token):
        raise non_finite_error("a bandwidthTest figure", token, raw, line_no)
    value = parse_float(token)
    if value is None:
        raise bad_line("a transfer size and a bandwidth figure", raw, line_no)
    if value < 0:
        raise ParseError(f"a bandwidthTest figure is {token}: a bandwidth is never negative ({quote(raw)})", line_no)
    return value * MBS_IN_GBS if unit == "MB/s" else value


def _with(block: Block, **changes: Any) -> Block:
    return dataclasses.replace(block, **changes)


def _label(block: Block) -> str:
    names = {"h2d": "Host to Device", "d2h": "Device to Host", "d2d": "Device to Device"}
    return f"{names[block.kind]} ({block.memory or 'memory not stated'})"


# --- host-link figures ----------------------------------------------------------------------------


def measurements(
    result: BandwidthTestResult, file: str, first_line: int = 1
) -> tuple[list[HostLinkMeasurement], list[str]]:
    """One figure per run and host<->device block whose GPU is known, and notes on all the rest.

    ``first_line`` is the file line the output starts on, so that notes name the file's lines.
    """
    found: list[HostLinkMeasurement] = []
    notes: list[str] = []
    for run in result.runs:
        for block in run.blocks:
            figure, note = _measurement(run, block, file, first_line - 1)
            found += [figure] if figure is not None else []
            notes += [note] if note else []
        if run.result == "PASS":
            notes.append("'Result = PASS' only says the copied data was right, not that a figure is fast enough")
    return found, notes


def _measurement(run: Run, block: Block, file: str, offset: int) -> tuple[HostLinkMeasurement | None, str]:
    where = f"line {offset + block.line_no}: the {_label(block)} block"
    if block.kind == "d2d":
        return None, "Device to Device blocks copy within one GPU's memory, not over its host link; not read"
    if not block.rows:
        return None, ""  # the parser's note already says so
    if block.devices > 1:
        return None, f"{where}: the sum over {block.devices} GPUs (--device=all), no single GPU's figure; not read"
    if len(run.devices) != 1:
        return None, f"{where}: {len(run.devices)} 'Device N:' lines name no single GPU for it; not read"
    if not block.memory:
        return None, f"{where}: pinned or pageable memory is not stated, so no floor applies; not read"
    size, value = max(block.rows)
    gpu = next(iter(run.devices))
    conditions = {"memory": block.memory, "transfer_size_bytes": str(size), "mode": run.mode or "not stated"}
    if block.write_combined:
        conditions["write_combined"] = "yes"
    error = None
    if run.result not in (None, "PASS"):
        error = f"{WRONG_DATA}: bandwidthTest printed 'Result = {run.result}' (the copied data was checked and wrong)"
    figure = HostLinkMeasurement(
        gpu, block.kind, value, method="ce", error=error, source=f"bandwidthTest: {file}", conditions=conditions
    )
    return figure, ""


# --- the evidence format ----------------------------------------------------------------------------

KIND = "bandwidth_test"


def _detect(text: str) -> str | None:
    if re.search(r"\[CUDA Bandwidth Test\]", text) or re.search(r"bandwidthTest-(?:H2D|D2H|D2D)\b", text):
        return KIND
    if _BLOCK.search(text) and _MEMORY.search(text):
        return KIND  # the banner was trimmed
    return None


def _merge(into: Into, result: BandwidthTestResult) -> None:
    merger, file = into.merger, into.part.name
    for run in result.runs:
        for index, name in run.devices.items():
            merger.gpu_fact(index, "name", name, file)
        if run.devices:
            merger.lower_bound(max(run.devices) + 1, file)  # it names only the GPUs it ran on
    figures, notes = measurements(result, file, into.first_line)
    merger.add_host_link(figures, file)
    for note in dict.fromkeys(notes):
        into.note(note)


FORMAT = register(
    Format(
        name="bandwidth_test",
        kinds=(KIND,),
        order=45,
        detect=_detect,
        parse=parse,
        families=("inventory", "host_link"),
        label="cuda-samples bandwidthTest",
        merge=_merge,
        start=re.compile(r"^\s*\[CUDA Bandwidth Test\]"),
        commands=(r"bandwidthTest\b",),
    )
)
