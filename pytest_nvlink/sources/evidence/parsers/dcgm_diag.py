"""Parser for ``dcgmi diag`` output: the host<->device figures its PCIe plugin states per GPU.

The plugin's ``h2d_d2h_single_pinned`` subtest copies between pinned host memory and each GPU with
``cudaMemcpyAsync`` and, in verbose mode (``dcgmi diag -r 2 -v``), adds one info message per GPU and
direction: ``GPU 0 Host to GPU bandwidth:\\t\\t12.37 GB/s``, ``GPU to Host bandwidth``, ``bidirectional
bandwidth`` (both directions together). A GPU below ``min_bandwidth`` gets the warning ``Bandwidth of GPU 3 in
direction h2d of 9.87 did not exceed minimum required bandwidth of 20.00.`` (NVIDIA/DCGM
``nvvs/plugin_src/pcie/PcieMain.cpp`` addBandwidthInfo, ``dcgmlib/dcgm_errors.h`` DCGM_FR_LOW_BANDWIDTH_MSG).

The table cuts every message into 45-character pieces, one per row, mid-word (``dcgmi/Diag.cpp``
DisplayVerboseInfo); pasted tables often lose the padding too. The pieces of a cell are joined without a
separator and read with a pattern that allows any spacing, which reads both. DCGM 4 names the GPU in the
row's heading (``Info: GPU0``) instead of the message. ``dcgmi diag -j`` output is read from its JSON.
A PCIe result without a figure ("Pass", "Fail") is a note, never a figure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from pytest_nvlink.model.host_link import PINNED, HostLinkMeasurement
from pytest_nvlink.sources.evidence.parsers.common import ParseError, is_non_finite, non_finite_error, split_lines
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

__all__ = ["DcgmDiagResult", "Figure", "parse"]

# Spacing may be lost anywhere a table piece ended, so every gap is optional.
_INFO = re.compile(
    r"(?:GPU\s*(?P<gpu>\d+)\s*)?(?P<what>GPU\s*to\s*Host|Host\s*to\s*GPU|bidirectional)\s*bandwidth\s*:"
    r"\s*(?P<value>[-+]?[\w.]+?)\s*GB\s*/\s*s",
    re.IGNORECASE,
)
_WARNING = re.compile(
    r"Bandwidth\s*of\s*GPU\s*(?P<gpu>\d+)\s*in\s*direction\s*(?P<what>h2d|d2h|bidir)\s*of\s*(?P<value>[-+]?[\w.]+?)"
    r"\s*did\s*not\s*exceed",
    re.IGNORECASE,
)
_ROW = re.compile(r"^\s*\|(?P<cells>.*)\|\s*$")
_RESULT_ROW = re.compile(r"GPU\s*\d+\s*:\s*(?:Pass|Fail|Skip|Warn)\w*", re.IGNORECASE)
_ENTITY = re.compile(r"(?:Info|Warning)\s*:\s*GPU\s*(\d+)", re.IGNORECASE)
_DIRECTIONS = {"gputohost": "d2h", "hosttogpu": "h2d", "bidirectional": "bidir", "h2d": "h2d", "d2h": "d2h"}
_DIRECTIONS["bidir"] = "bidir"


@dataclass(frozen=True)
class Figure:
    gpu: int
    direction: str  # "h2d", "d2h" or "bidir" (both directions at once, summed)
    value: float  # GB/s
    line_no: int
    warning: bool  # from a "did not exceed minimum" warning rather than an info message


@dataclass(frozen=True)
class DcgmDiagResult:
    figures: tuple[Figure, ...]
    pcie_results: tuple[str, ...] = ()  # the PCIe test's result cells ("Pass - All", "Fail", ...)
    notes: tuple[tuple[int, str], ...] = ()


@dataclass
class _Message:
    heading: str
    text: str
    line_no: int


@dataclass
class _Table:
    messages: list[_Message] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    test: str = ""
    continuing: bool = False  # whether a row with no heading goes on with the last message


def parse(text: str) -> DcgmDiagResult:
    if text.lstrip().startswith("{"):
        return _parse_json(text)
    table = _read_table(text)
    figures: list[Figure] = []
    unread: list[tuple[int, str]] = []
    for message in table.messages:
        figures += _figures(message.text, _gpu_of(message.heading), message.line_no)
        unread += _unread(message.text, _gpu_of(message.heading), message.line_no)
    if not figures and not table.results:
        raise ParseError("expected dcgmi diag output with a PCIe test row; none found")
    return DcgmDiagResult(tuple(figures), tuple(table.results), (*_bidirectional_notes(figures), *unread))


# Where a statement of a figure begins: every one must be read, or said to be unreadable.
_ANCHORS = ((_INFO, re.compile(r"bandwidth\s*:", re.IGNORECASE)), (_WARNING, re.compile(r"Bandwidth\s*of\s*GPU", re.I)))


def _unread(text: str, entity: int | None, line_no: int) -> list[tuple[int, str]]:
    """A note for a message that states more bandwidth figures than could be read (damaged, or no GPU named)."""
    read = len(_figures(text, entity, line_no))
    stated = sum(len(anchor.findall(text)) for _, anchor in _ANCHORS)
    if stated <= read:
        return []
    shown = text if len(text) <= 160 else text[:160] + "..."
    return [(line_no, f"{stated - read} PCIe bandwidth statement(s) that cannot be read as a GPU's figure: {shown!r}")]


def _bidirectional_notes(figures: list[Figure]) -> tuple[tuple[int, str], ...]:
    both = [figure for figure in figures if figure.direction == "bidir"]
    if not both:
        return ()
    listed = ", ".join(f"GPU {figure.gpu} {figure.value} GB/s" for figure in both)
    note = f"bidirectional figures ({listed}) are both directions summed, not one direction's share; not read"
    return ((both[0].line_no, note),)


def _read_table(text: str) -> _Table:
    """The PCIe test's messages, each one's pieces joined, and its result cells."""
    table = _Table()
    for line_no, line in enumerate(split_lines(text), start=1):
        match = _ROW.match(line)
        if match is None or set(line.strip()) <= set("+-=| "):
            continue  # a rule line, or text around the table (the command, "Successfully ran diagnostic")
        cells = [cell.strip() for cell in match.group("cells").split("|")]
        heading, content = (cells[0], "".join(cells[1:])) if len(cells) > 1 else ("", cells[0])
        _take_row(table, heading, content, line_no)
    return table


def _take_row(table: _Table, heading: str, content: str, line_no: int) -> None:
    lowered = heading.lower()
    if not heading and content.startswith("---"):
        table.test = ""  # a section rule ("|-----  Hardware  ---+---|"): the test before it has ended
        return
    if not heading:
        if _RESULT_ROW.fullmatch(content):  # DCGM 4: a GPU's own result ("GPU0: Pass") under the test's row
            table.results += [content] if table.test.startswith("pcie") else []
            table.continuing = False
        elif table.continuing and table.test.startswith("pcie"):
            table.messages[-1].text += content  # the next 45-character piece of the same message
        return
    if lowered.startswith(("info", "warning")):
        if table.test.startswith("pcie"):
            table.messages.append(_Message(heading, content, line_no))
            table.continuing = True
        return
    table.test, table.continuing = lowered, False
    if lowered.startswith("pcie"):
        table.results.append(content)


def _gpu_of(heading: str) -> int | None:
    match = _ENTITY.match(heading)
    return int(match.group(1)) if match else None


def _figures(text: str, entity: int | None, line_no: int) -> list[Figure]:
    found = []
    for pattern, warning in ((_INFO, False), (_WARNING, True)):
        for match in pattern.finditer(text):
            gpu = match.group("gpu")
            if gpu is None and entity is None:
                continue  # noted by the merge step: a figure of no named GPU
            number = int(gpu) if gpu is not None else entity
            assert number is not None
            what = re.sub(r"\s+", "", match.group("what")).lower()
            found.append(
                Figure(number, _DIRECTIONS[what], _value(match.group("value"), text, line_no), line_no, warning)
            )
    return found


def _value(token: str, text: str, line_no: int) -> float:
    if is_non_finite(token):
        raise non_finite_error("a dcgmi diag PCIe bandwidth", token, text, line_no)
    try:
        value = float(token)
    except ValueError:
        raise ParseError(f"expected a bandwidth in GB/s, got {token!r} in {text[:120]!r}", line_no) from None
    if value < 0:
        raise ParseError(f"a dcgmi diag PCIe bandwidth is {token}: a bandwidth is never negative", line_no)
    return value


def _parse_json(text: str) -> DcgmDiagResult:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"dcgmi diag JSON that does not parse: {exc}") from None
    figures: list[Figure] = []
    unread: list[tuple[int, str]] = []
    for strings, entity in _pcie_strings(document, False, None):
        for string in strings:
            figures += _figures(string, entity, 0)
            unread += _unread(string, entity, 0)
    if not figures:
        raise ParseError("expected a pcie test with bandwidth info messages in dcgmi diag JSON; none found")
    return DcgmDiagResult(tuple(figures), (), (*_bidirectional_notes(figures), *unread))


def _pcie_strings(node: object, inside: bool, entity: int | None) -> list[tuple[list[str], int | None]]:
    """Every string under a test named pcie, with the GPU entity of the nearest object that names one."""
    if isinstance(node, str):
        return [([node], entity)] if inside else []
    if isinstance(node, list):
        return [found for item in node for found in _pcie_strings(item, inside, entity)]
    if not isinstance(node, dict):
        return []
    name = node.get("name") or node.get("test_name")
    inside = inside or (isinstance(name, str) and name.lower().startswith("pcie"))
    if node.get("entity_group") == "GPU" and isinstance(node.get("entity_id"), int):
        entity = node["entity_id"]
    return [found for value in node.values() for found in _pcie_strings(value, inside, entity)]


# --- host-link figures and the evidence format ------------------------------------------------------

KIND = "dcgm_diag"


def measurements(result: DcgmDiagResult, file: str) -> tuple[list[HostLinkMeasurement], list[str]]:
    """The per-direction figures, one per GPU and direction (an info message and a warning agree or both stay)."""
    found: dict[tuple[int, str, float], HostLinkMeasurement] = {}
    for figure in result.figures:
        if figure.direction == "bidir":
            continue  # the parser notes it
        conditions = {"memory": PINNED, "subtest": "h2d_d2h_single_pinned"}
        source = f"dcgmi diag pcie: {file}"
        found.setdefault(
            (figure.gpu, figure.direction, figure.value),
            HostLinkMeasurement(
                figure.gpu, figure.direction, figure.value, method="ce", source=source, conditions=conditions
            ),
        )
    cells = ", ".join(repr(cell) for cell in result.pcie_results)
    notes = [f"PCIe test result(s) {cells}: Pass/Fail only, no figure; not read as host-link figures"] if cells else []
    return list(found.values()), notes


def _detect(text: str) -> str | None:
    if re.search(
        r"GPU\s*to\s*Host\s*bandwidth\s*:|Host\s*to\s*GPU\s*bandwidth\s*:|Bandwidth of GPU \d+ in direction", text
    ):
        return KIND
    if re.search(r"^\s*\|\s*(?:DCGM Version|Diagnostic)\s*\|", text, re.MULTILINE) and re.search(r"\|\s*PCIe", text):
        return KIND
    return None


def _merge(into: Into, result: DcgmDiagResult) -> None:
    figures, notes = measurements(result, into.part.name)
    into.merger.add_host_link(figures, into.part.name)
    for figure in figures:
        into.merger.lower_bound(figure.gpu + 1, into.part.name)  # it names only the GPUs it ran on
    for note in notes:
        into.note(note)


FORMAT = register(
    Format(
        name="dcgm_diag",
        kinds=(KIND,),
        order=35,
        detect=_detect,
        parse=parse,
        families=("inventory", "host_link"),
        label="dcgmi diag",
        merge=_merge,
        start=re.compile(r"^\s*Successfully ran diagnostic for group"),
        commands=(r"dcgmi\s+diag\b",),
    )
)
