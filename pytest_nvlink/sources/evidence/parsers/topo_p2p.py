"""Parser for ``nvidia-smi topo -p2p <cap>`` status matrices; the table is read as topo -m's is."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_nvlink.sources.evidence.parsers.common import ParseError, quote, split_lines
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register
from pytest_nvlink.sources.evidence.parsers.topo import (
    P2P_STATUS_NAMES,
    gpu_cells,
    gpu_indices,
    is_topo_table,
    read_table,
)

KIND = "topo_p2p"
_CELL = r"X|OK|CNS|GNS|TNS|NS|U"
_CAPABILITY_FLAGS: dict[str, tuple[str, ...]] = {
    "r": ("read",),
    "w": ("write",),
    "rw": ("read", "write"),
    "n": ("nvlink",),
    "a": ("atomics",),
    "p": ("pcie",),
}


@dataclass(frozen=True)
class TopoP2P:
    """``nvidia-smi topo -p2p <cap>``: NVML P2P status per ordered pair (row = src, column = dst)."""

    gpu_count: int
    status: dict[tuple[int, int], str]  # values from P2P_STATUS_NAMES
    # "read", "write", "nvlink", "atomics", "pcie"; empty when the text does not say which was asked.
    capabilities: tuple[str, ...] = ()
    # (line, text): what the table reader could not read as printed (a lost header line), listed under the file.
    notes: tuple[tuple[int, str], ...] = ()


def parse(text: str, *, capability: str | None = None) -> TopoP2P:
    """Parse ``topo -p2p``; ``capability`` ("r", "w", "rw", "n", "a", "p") names the matrix if known."""
    table = read_table(split_lines(text), _CELL)
    gpus = gpu_indices(table)
    cells = gpu_cells(table, gpus)
    status = {}
    for (src, dst), value in cells.items():
        if src != dst:
            if value == "X" or not value:
                row = table.rows[f"GPU{src}"]
                raise ParseError(f"GPU{src}->GPU{dst} has no P2P status in {quote(_join(row))}", row[2])
            status[(src, dst)] = P2P_STATUS_NAMES[value]
    flag = capability if capability is not None else _flag_in_text(text)
    caps = _CAPABILITY_FLAGS.get(flag or "", ())
    if flag is not None and not caps:
        raise ParseError(f"unknown topo -p2p capability {flag!r}; expected one of r, w, rw, n, a, p")
    return TopoP2P(gpu_count=len(gpus), status=status, capabilities=caps, notes=tuple(table.notes))


def _join(row: tuple[list[str], list[str], int]) -> str:
    return " ".join(row[0] + row[1])


# The tail of a command line whose start was cut off ("-p2p n", "p2p n", "p2pstatus rw -i 0"): its flag is
# all the matrix needs, and a line ending in one of the capability letters says nothing else.
_CUT_FLAG = re.compile(r"(?:^|\s)-{0,2}p2p(?:status)?\s+(rw|r|w|n|a|p)(?:\s+-\S.*)?\s*$", re.MULTILINE)


def _flag_in_text(text: str) -> str | None:
    match = re.search(r"topo\s+(?:-p2p|--p2pstatus)\s+([a-z]+)", text) or _CUT_FLAG.search(text)
    return match.group(1) if match else None


# --- the evidence format: how this output is told apart and merged ----------------------------------


def _detect(text: str) -> str | None:
    if is_topo_table(text) and re.search(r"^\s*GPU\d+\s.*\b(?:OK|CNS|GNS|TNS|NS)\b", text, re.MULTILINE):
        return KIND
    return None


def _merge(into: Into, topo: TopoP2P) -> None:
    merger, file = into.merger, into.part.name
    if not topo.capabilities:
        not_ok = [f"GPU{a}->GPU{b} {status}" for (a, b), status in sorted(topo.status.items()) if status != "ok"]
        shown = f" ({len(not_ok)} pair(s) not OK: {', '.join(not_ok[:4])}{', ...' if len(not_ok) > 4 else ''})"
        into.note(
            f"nvidia-smi topo -p2p matrix without its command line (line {into.first_line}): the capability "
            "(r, w, n, a) is not stated, so it gives the GPU count only; its P2P answers are not judged"
            + (shown if not_ok else ""),
        )
    merger.count(topo.gpu_count, file)
    usable = [c for c in topo.capabilities if c in ("read", "write", "nvlink", "atomics")]
    for (src, dst), status in topo.status.items():
        for capability in usable:
            merger.p2p_status(src, dst, capability, status, file)
    if usable:
        merger.note("p2p", file)
    if "nvlink" not in usable:
        merger.unknown_reason(
            "p2p", f"{file} (topo -p2p) does not state NVLink P2P capability; add `nvidia-smi topo -p2p n`"
        )


FORMAT = register(
    Format(
        name=KIND,
        kinds=(KIND,),
        order=80,  # before topo -m: the same table header, told apart by its cells
        detect=_detect,
        parse=parse,
        families=("inventory", "p2p"),
        label="",  # topo -m's label names both
        merge=_merge,
        commands=(r"nvidia-smi\b",),
    )
)
