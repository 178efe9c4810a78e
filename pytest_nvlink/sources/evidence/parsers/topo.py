"""Parser for ``nvidia-smi topo -m`` / ``topo -mp`` path matrices, and the table reading ``topo -p2p`` shares.

Both print one header line of device columns and one row per device. Real captures arrive with tabs
or runs of spaces, indentation from markdown, trailing tabs, blank cells and, after copy-paste,
neighbouring cells glued together (``NV18NV18``, ``NV12 X`` inside one tab cell). Each cell is matched
against the closed vocabulary of the matrix, which is what makes glued cells recoverable: the
vocabulary is prefix-free, so a glued token splits in exactly one way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_nvlink.sources.evidence.parsers.common import (
    ParseError,
    bad_line,
    is_non_finite,
    non_finite_error,
    quote,
    split_lines,
)
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

# Old drivers print SOC for what newer ones call SYS (traversing the inter-socket link).
_PATH_CELL = r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC"
P2P_STATUS_NAMES: dict[str, str] = {
    "OK": "ok",
    "CNS": "chipset_not_supported",
    "GNS": "gpu_not_supported",
    "TNS": "topology_not_supported",
    "NS": "not_supported",
    "U": "unknown",
}
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_GPU_LABEL = re.compile(r"GPU(\d+)")
_HEADER_WORDS = {"CPU", "NUMA", "Affinity", "GPU", "ID"}
_ROW_LABEL = re.compile(r"\s*(GPU\d+|NIC\d+|mlx5_\d+)\s+(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|OK|CNS|GNS|TNS|NS|U)\b")


@dataclass(frozen=True)
class TopoMatrix:
    """``nvidia-smi topo -m`` (or ``-mp`` with ``pcie_only``): path class per unordered GPU pair."""

    gpu_count: int
    paths: dict[tuple[int, int], str]  # (a, b) with a < b -> "NV18", "PIX", ..., "SYS"
    nic_columns: tuple[str, ...] = ()  # "NIC0" or, from older drivers, "mlx5_0"
    nic_paths: dict[tuple[int, str], str] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)  # NIC Legend: "NIC0" -> "mlx5_0"
    cpu_affinity: dict[int, str | None] = field(default_factory=dict)
    numa_affinity: dict[int, str | None] = field(default_factory=dict)
    gpu_numa_id: dict[int, int | None] = field(default_factory=dict)
    pcie_only: bool = False  # topo -mp: NV# is never printed, so absence of NV# says nothing
    has_legend: bool = False
    # (line, text) for paste damage outside the GPU x GPU block: NIC cells, affinity columns.
    notes: tuple[tuple[int, str], ...] = ()


@dataclass
class Table:
    columns: list[str]
    extra_columns: list[str]
    rows: dict[str, tuple[list[str], list[str], int]]  # label -> (matrix cells, extra cells, line_no)
    header_line: int
    notes: list[tuple[int, str]] = field(default_factory=list)
    damaged_extras: set[str] = field(default_factory=set)  # rows whose affinity cells cannot be aligned
    headerless: bool = False  # columns inferred from the row labels; values after them are not read

    @property
    def gpu_columns(self) -> int:
        return sum(1 for c in self.columns if _GPU_LABEL.fullmatch(c))


def parse(text: str, *, pcie_only: bool | None = None) -> TopoMatrix:
    """Parse ``topo -m``; ``pcie_only`` overrides the detection of ``topo -mp`` when the caller knows."""
    lines = split_lines(text)
    table = read_table(lines, _PATH_CELL)
    gpus = gpu_indices(table)
    cells = gpu_cells(table, gpus)
    paths = {
        pair: ("SYS" if value == "SOC" else value)
        for pair, value in _symmetric(cells, gpus, _row_lines(table, gpus)).items()
    }
    nic_columns = tuple(c for c in table.columns if not _GPU_LABEL.fullmatch(c))
    cpu, numa, numa_id = _affinities(table, gpus)
    pcie = _detect_pcie_only(text, paths) if pcie_only is None else pcie_only
    legend_note = _legend_note(lines, pcie, paths)
    return TopoMatrix(
        gpu_count=len(gpus),
        paths=paths,
        nic_columns=nic_columns,
        nic_paths=_nic_paths(table, gpus, nic_columns),
        nic_names=_nic_legend(lines),
        cpu_affinity=cpu,
        numa_affinity=numa,
        gpu_numa_id=numa_id,
        pcie_only=pcie,
        has_legend=any(line.strip() == "Legend:" for line in lines),
        notes=(*table.notes, *([legend_note] if legend_note else [])),
    )


# topo -mp's legend: every PCIe class and no NV#. A topo -m legend cut before its NV# line lacks some of these.
_PCIE_LEGEND = (r"(?:SYS|SOC)", "PHB", "PXB", "PIX")


def _detect_pcie_only(text: str, paths: dict[tuple[int, int], str]) -> bool:
    """Only the -mp command line, or a whole legend without NV#, says -mp: a cut legend says nothing."""
    if re.search(r"topo\s+(?:-mp\b|--matrix_pci)", text):
        return True
    if any(p.startswith("NV") for p in paths.values()):
        return False
    legend = re.search(r"^\s*Legend:\s*$", text, re.MULTILINE)
    if legend is None or re.search(r"^\s*NV#\s*=", text, re.MULTILINE):
        return False
    after = text[legend.end() :]
    return all(re.search(rf"^\s*{name}\s*=", after, re.MULTILINE) for name in _PCIE_LEGEND)


def _legend_note(lines: list[str], pcie_only: bool, paths: dict[tuple[int, int], str]) -> tuple[int, str] | None:
    """A legend without NV# that is not the -mp form: it was cut, and the table is read as topo -m."""
    at = next((n for n, line in enumerate(lines, start=1) if line.strip() == "Legend:"), None)
    if at is None or pcie_only or any(p.startswith("NV") for p in paths.values()):
        return None
    if any(re.match(r"\s*NV#\s*=", line) for line in lines[at:]):
        return None
    return at, "the Legend stops before its NV# line (cut short): read as topo -m, not as the PCIe-only topo -mp"


# --- table reading -----------------------------------------------------------------------------


def read_table(lines: list[str], cell_pattern: str) -> Table:
    try:
        header_at = _find_header(lines)
    except ParseError:
        return _read_headerless(lines, cell_pattern)
    notes: list[tuple[int, str]] = []
    columns, extra = _header_columns(lines[header_at], header_at + 1, notes)
    table = Table(columns=columns, extra_columns=extra, rows={}, header_line=header_at + 1, notes=notes)
    cell_re = re.compile(cell_pattern)
    for index in range(header_at + 1, len(lines)):
        line = lines[index]
        if line.strip() in ("Legend:", "NIC Legend:"):
            break
        parsed = _read_row(line, index + 1, table, cell_re)
        if parsed is None:
            continue
        label, cells, extras = parsed
        if label in table.rows:
            raise ParseError(f"row {label} appears twice (first on line {table.rows[label][2]})", index + 1)
        table.rows[label] = (cells, extras, index + 1)
    return table


def _read_headerless(lines: list[str], cell_pattern: str) -> Table:
    """A matrix whose header line was lost: the columns are the row labels, in the order printed."""
    labels = [(index, m.group(1)) for index, line in enumerate(lines) if (m := _ROW_LABEL.match(line))]
    gpus = [label for _, label in labels if label.startswith("GPU")]
    if not gpus or gpus != [f"GPU{i}" for i in range(len(gpus))]:
        raise ParseError("expected a header line starting with GPU0 (nvidia-smi topo matrix); none found", 0)
    first = labels[0][0]
    columns = list(dict.fromkeys(label for _, label in labels))
    note = (
        first + 1,
        f"header line missing; columns taken from the row labels ({', '.join(columns)}), affinity not read",
    )
    table = Table(columns=columns, extra_columns=[], rows={}, header_line=first + 1, notes=[note], headerless=True)
    cell_re = re.compile(cell_pattern)
    for index, _ in labels:
        parsed = _read_row(lines[index], index + 1, table, cell_re)
        if parsed is not None:
            table.rows[parsed[0]] = (parsed[1], parsed[2], index + 1)
            _check_no_lost_gpu_column(parsed[0], parsed[1][len(gpus) :], index + 1)
    return table


def _check_no_lost_gpu_column(label: str, beyond_gpus: list[str], line_no: int) -> None:
    # Only GPU pairs are NV#: an NV# after the last GPU row's column means a GPU row was lost too.
    if label.startswith("GPU") and any(cell.startswith("NV") for cell in beyond_gpus):
        raise ParseError(
            f"header line missing and row {label} has an NVLink cell beyond the GPU rows present: a GPU row "
            "is missing as well, so the columns cannot be told",
            line_no,
        )


def _find_header(lines: list[str]) -> int:
    for index, line in enumerate(lines):
        tokens = line.split()
        if tokens and re.fullmatch(r"(?:GPU\d+)+", tokens[0]) and tokens[0].startswith("GPU0"):
            # A row label is followed by cells ("X", "NV12"), a header by more column names.
            rest = tokens[0][4:] or (tokens[1] if len(tokens) > 1 else "")
            if not rest or re.match(r"GPU\d|NIC\d|mlx|CPU|NUMA", rest):
                return index
    raise ParseError("expected a header line starting with GPU0 (nvidia-smi topo matrix); none found", 0)


def _header_columns(line: str, line_no: int, notes: list[tuple[int, str]]) -> tuple[list[str], list[str]]:
    tokens = line.split()
    columns: list[str] = []
    for position, token in enumerate(tokens):
        if token in _HEADER_WORDS or re.match(r"(?:CPU|NUMA)", token):
            return columns, _extra_columns(" ".join(tokens[position:]), line_no, notes)
        if re.fullmatch(r"(?:GPU\d+|NIC\d+|mlx5_\d+)+", token):
            columns.extend(re.findall(r"GPU\d+|NIC\d+|mlx5_\d+", token))
        elif re.fullmatch(r"[A-Za-z][A-Za-z0-9]*_?\d+", token):
            columns.append(token)
        else:
            raise bad_line("device column names (GPU0, NIC0, mlx5_0, ...)", line, line_no)
    return columns, []


def _extra_columns(tail: str, line_no: int, notes: list[tuple[int, str]]) -> list[str]:
    found: list[str] = []
    rest = tail
    while rest:
        name = next((n for n in _AFFINITY_COLUMNS if rest.startswith(n)), None)
        if name is None:
            # Affinity is not judged; the GPU block stays readable without it.
            notes.append((line_no, f"affinity column names damaged ({rest!r}); CPU/NUMA affinity not read"))
            return []
        found.append(name)
        rest = rest[len(name) :].strip()
    return found


def _read_row(
    line: str, line_no: int, table: Table, cell_re: re.Pattern[str]
) -> tuple[str, list[str], list[str]] | None:
    stripped = line.strip()
    match = re.match(r"(GPU\d+|[A-Za-z][A-Za-z0-9]*_?\d+)", stripped)
    if not stripped or match is None:
        return None
    label = _longest_known_label(stripped, table.columns) or match.group(1)
    if stripped[len(label) :].lstrip().startswith(":"):
        return None  # "NIC0: mlx5_0" legend entry or "GPU0: NAME" prose, not a matrix row
    if label not in table.columns:
        if label.startswith("GPU"):
            raise ParseError(f"row {label} has no matching column in the header: {quote(line)}", line_no)
        return None  # prose that merely starts with a word-and-number, e.g. "NIC0: mlx5_0" legends
    pieces = _split_cells(stripped[len(label) :], cell_re)
    if pieces is None:
        raise bad_line(f"matrix cells for row {label}", line, line_no)
    cells = pieces[: len(table.columns)]
    extras = [p for p in pieces[len(table.columns) :] if p]
    bad = [position for position, cell in enumerate(cells) if cell and not cell_re.fullmatch(cell)]
    gpu_row, gpus = label.startswith("GPU"), table.gpu_columns
    if gpu_row and bad and bad[0] < gpus:
        position = bad[0]
        raise ParseError(
            f"row {label}, column {table.columns[position]}: expected a matrix cell, got {cells[position]!r} in "
            f"{quote(line)} (cells missing or glued ambiguously)",
            line_no,
        )
    if gpu_row and len(cells) < gpus:
        raise ParseError(f"row {label} has {len(cells)} cells for {gpus} GPU columns: {quote(line)}", line_no)
    if table.headerless:
        extras = []
    if bad or len(cells) < len(table.columns) or len(extras) > len(table.extra_columns):
        return _damaged_outside_gpu_block(label, cells, line, line_no, table)
    return label, cells, extras


def _damaged_outside_gpu_block(
    label: str, cells: list[str], line: str, line_no: int, table: Table
) -> tuple[str, list[str], list[str]] | None:
    """Keep a GPU row's GPU cells when only its NIC or affinity part is damaged; drop a damaged NIC row."""
    if not label.startswith("GPU"):
        table.notes.append((line_no, f"row {label} damaged ({quote(line)}); its NIC paths are not read"))
        return None
    table.notes.append(
        (line_no, f"row {label}: NIC or affinity cells damaged ({quote(line)}); its NIC paths and affinity not read")
    )
    table.damaged_extras.add(label)
    gpus = table.gpu_columns
    return label, cells[:gpus] + [""] * (len(table.columns) - gpus), []


def _longest_known_label(stripped: str, columns: list[str]) -> str | None:
    # "GPU1NV12" is row GPU1 glued to its first cell; "GPU10" must still win over "GPU1".
    known = [c for c in columns if stripped.startswith(c)]
    if not known:
        return None
    best = max(known, key=len)
    rest = stripped[len(best) :]
    return None if rest[:1].isdigit() else best


def _split_cells(rest: str, cell_re: re.Pattern[str]) -> list[str] | None:
    """Cells of one row; "" stands for a blank tab cell. None when the text cannot be cells at all."""
    parts = rest.split("\t") if "\t" in rest else [rest]
    if "\t" in rest and parts and not parts[0].strip():
        parts = parts[1:]  # the separator right after the label
    cells: list[str] = []
    for part in parts:
        tokens = part.split()
        if not tokens:
            cells.append("")
        for token in tokens:
            cells.extend(_unglue(token, cell_re))
    return cells


def _unglue(token: str, cell_re: re.Pattern[str]) -> list[str]:
    if cell_re.fullmatch(token):
        return [token]
    pieces = re.findall(cell_re.pattern, token)
    if "".join(pieces) == token:
        return pieces
    return [token]  # not a matrix cell (affinity value) or damaged; the caller decides


# --- interpretation ----------------------------------------------------------------------------


def gpu_indices(table: Table) -> list[int]:
    gpus = [int(m.group(1)) for c in table.columns if (m := _GPU_LABEL.fullmatch(c))]
    if gpus != list(range(len(gpus))):
        raise ParseError(f"GPU columns must be GPU0..GPU{len(gpus) - 1} in order, got {gpus}", table.header_line)
    for index in gpus:
        if f"GPU{index}" not in table.rows:
            raise ParseError(f"GPU{index} is in the header but its row is missing", table.header_line)
    return gpus


def _row_lines(table: Table, gpus: list[int]) -> dict[int, int]:
    return {gpu: table.rows[f"GPU{gpu}"][2] for gpu in gpus}


def gpu_cells(table: Table, gpus: list[int]) -> dict[tuple[int, int], str]:
    cells: dict[tuple[int, int], str] = {}
    for a in gpus:
        row_cells, _, line_no = table.rows[f"GPU{a}"]
        for b in gpus:
            value = row_cells[b]
            if a == b and value not in ("X", ""):
                raise ParseError(f"GPU{a}->GPU{a} should be X, got {value!r}", line_no)
            cells[(a, b)] = value
    return cells


def _symmetric(
    cells: dict[tuple[int, int], str], gpus: list[int], lines_of: dict[int, int]
) -> dict[tuple[int, int], str]:
    """One value per unordered pair; a blank cell is recovered from its mirror, disagreement is an error."""
    paths: dict[tuple[int, int], str] = {}
    for a in gpus:
        for b in gpus[a + 1 :]:
            upper, lower = cells[(a, b)], cells[(b, a)]
            if upper and lower and upper != lower:
                raise ParseError(
                    f"asymmetric matrix: row GPU{a} column GPU{b} is {upper!r}"
                    f" but row GPU{b} column GPU{a} is {lower!r}",
                    lines_of[a],
                )
            value = upper or lower
            if not value or value == "X":
                raise ParseError(f"no value for GPU{a}/GPU{b} (both cells blank or X)", lines_of[a])
            paths[(a, b)] = value
    return paths


def _nic_paths(table: Table, gpus: list[int], nics: tuple[str, ...]) -> dict[tuple[int, str], str]:
    found: dict[tuple[int, str], str] = {}
    for gpu in gpus:
        row_cells = table.rows[f"GPU{gpu}"][0]
        for nic in nics:
            value = row_cells[table.columns.index(nic)]
            mirror = table.rows.get(nic)
            other = mirror[0][gpu] if mirror and gpu < len(mirror[0]) else ""
            if value and other and value != other:
                # NIC placement is not judged: a pasted-over NIC cell must not hide the GPU block.
                table.notes.append(
                    (
                        mirror[2] if mirror else 0,
                        f"GPU{gpu}/{nic} is {value!r} but {nic}/GPU{gpu} is {other!r}; that NIC path is not read",
                    )
                )
                continue
            if value or other:
                found[(gpu, nic)] = "SYS" if (value or other) == "SOC" else (value or other)
    return found


def _affinities(
    table: Table, gpus: list[int]
) -> tuple[dict[int, str | None], dict[int, str | None], dict[int, int | None]]:
    cpu: dict[int, str | None] = {}
    numa: dict[int, str | None] = {}
    numa_id: dict[int, int | None] = {}
    for gpu in gpus:
        _, extras, line_no = table.rows[f"GPU{gpu}"]
        if len(extras) > len(table.extra_columns):
            raise ParseError(
                f"GPU{gpu} row has {len(extras)} values after the matrix for columns {table.extra_columns}: {extras}",
                line_no,
            )
        values = dict(zip(table.extra_columns, extras, strict=False))
        broken = next((column for column, value in values.items() if is_non_finite(value)), None)
        if broken is not None:
            raise non_finite_error(f"GPU{gpu}'s {broken}", values[broken], " ".join(extras), line_no)
        if "CPU Affinity" in table.extra_columns:
            cpu[gpu] = _none_if_na(values.get("CPU Affinity"))
        if "NUMA Affinity" in table.extra_columns:
            numa[gpu] = _none_if_na(values.get("NUMA Affinity"))
        if "GPU NUMA ID" in table.extra_columns:
            raw = _none_if_na(values.get("GPU NUMA ID"))
            numa_id[gpu] = int(raw) if raw is not None and raw.isdigit() else None
    return cpu, numa, numa_id


def _none_if_na(value: str | None) -> str | None:
    return None if value in (None, "", "N/A") else value


def _nic_legend(lines: list[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    for line in lines:
        match = re.fullmatch(r"\s*(NIC\d+):\s*(\S+)\s*", line)
        if match:
            names[match.group(1)] = match.group(2)
    return names


# --- the evidence format: how this output is told apart and merged ----------------------------------

MATRIX = "topo_matrix"
# A topo -m or -p2p table: the header line, or a first row when the header was cut off.
_TABLE = re.compile(r"^\s*GPU0\s*GPU1|^\s*GPU0\s+(?:CPU|NIC|mlx)|^\s*GPU0\s*$|^\s*GPU0\s+X\s", re.MULTILINE)


def is_topo_table(text: str) -> bool:
    return _TABLE.search(text) is not None


def _detect(text: str) -> str | None:
    if is_topo_table(text) and re.search(
        r"^\s*GPU\d+[\sA-Z]*\b(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)\b", text, re.MULTILINE
    ):
        return MATRIX
    return None


def _merge(into: Into, topo: TopoMatrix) -> None:
    merger, file = into.merger, into.part.name
    merger.count(topo.gpu_count, file)
    if topo.pcie_only:
        # topo -mp never prints NV#; its PCIe classes must not be read as "no NVLink".
        merger.unknown_reason("paths", f"{file} is nvidia-smi topo -mp (PCIe paths only, NVLink not shown)")
    else:
        for (a, b), path in topo.paths.items():
            merger.path(a, b, path, file)
        merger.note("paths", file)
    for gpu in range(topo.gpu_count):
        merger.gpu_fact(gpu, "cpu_affinity", topo.cpu_affinity.get(gpu), file)
        numa = topo.numa_affinity.get(gpu)
        merger.gpu_fact(gpu, "numa_node", int(numa) if numa and numa.isdigit() else None, file)


FORMAT = register(
    Format(
        name="topo",
        kinds=(MATRIX,),
        order=90,  # after topo -p2p, whose table has the same header
        detect=_detect,
        parse=parse,
        families=("inventory", "paths"),
        label="nvidia-smi topo -m/-p2p",
        merge=_merge,
        start=re.compile(r"^\s*GPU0(?:\s+GPU1|\s+(?:NIC0|mlx\w+|CPU\s+Affinity)|\s*$)"),
        commands=(r"nvidia-smi\b",),
    )
)
