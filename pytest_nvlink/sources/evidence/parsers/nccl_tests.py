"""Parser for the text output of any nccl-tests binary (all_reduce_perf, all_gather_perf, ...).

Result rows are read from the right: the last eight tokens are always the out-of-place and in-place
``time algbw busbw #wrong`` groups, whatever optional ``redop``/``root`` columns the version prints
before them. NCCL INFO/WARN lines can be interleaved anywhere when NCCL_DEBUG is set; they are
skipped, WARN lines are kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_nvlink.model import CollectiveMeasurement
from pytest_nvlink.sources.evidence.parsers.common import ParseError, bad_line, parse_float, parse_int, split_lines
from pytest_nvlink.sources.evidence.parsers.nccl_ranks import (
    BUS_FACTORS,
    ELISION,
    median_ratio,
    rank_facts,
    rank_gpus,
    ranks_fitting,
    ranks_from_ratio,
    ratio_conflict,
    scope_conditions,
    scope_text,
)
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

if TYPE_CHECKING:
    from pytest_nvlink.sources.evidence.merge import Merger

# Binary name stem -> collective name as the model spells it (others keep their own name).
OP_NAMES: dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "alltoall": "all_to_all",
    "sendrecv": "sendrecv",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}
_BINARY = re.compile(
    r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|sendrecv|reduce|gather|scatter|hypercube)_perf\b"
)
_DEVICE = re.compile(
    r"#\s*Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*"
)
_NCCL_LOG_LINE = re.compile(r"\bNCCL\s+(INFO|WARN|TRACE|ABORT)\b")


@dataclass(frozen=True)
class Timing:
    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int | None  # None when printed as N/A (validation off) or when the column is "error"
    error: float | None = None  # older nccl-tests print a max error instead of a #wrong count


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: Timing
    in_place: Timing
    line_no: int


@dataclass(frozen=True)
class Device:
    rank: int
    group: int
    pid: int
    host: str
    device: int
    bus: str  # "0x0f" (older) or "0000:0f:00" (newer)
    name: str


@dataclass(frozen=True)
class NcclTestsResult:
    op: str | None  # model spelling: "all_reduce", "all_to_all", ...; None if not determinable
    binary: str | None  # e.g. "all_reduce_perf" when the text names it
    nranks: int | None
    nthreads: int | None
    ngpus: int | None
    devices: tuple[Device, ...]
    rows: tuple[Row, ...]
    wrong_total: int | None  # None when no row printed a #wrong count
    out_of_bounds: int | None
    avg_busbw_gbps: float | None
    warnings: tuple[str, ...]
    version: str | None = None
    # When the header was trimmed: the collectives the rows fit (op is None when more than one) and
    # how the op or rank count was inferred, in words, for the evidence notes.
    op_candidates: tuple[str, ...] = ()
    inferred: str | None = None
    log_ranks: tuple[int, ...] = ()  # ranks named by NCCL INFO "rank R nranks N" lines
    rank_conflict: str | None = None  # why nranks is None although the text names ranks (sources disagree)
    ranks_elided: bool = False  # '# Using devices' leaves ranks out
    nodes: int | None = None  # NCCL's "nNodes N" (or srun -N N) when the text states it
    log_hosts: tuple[str, ...] = ()  # hosts of NCCL log lines' "host:pid:tid" prefixes
    empty_rows: int = 0  # rows of size 0 (nccl-tests -b 0): normal output, but no bandwidth to judge
    tables: int = 1  # >1: that many single-rank runs, one table each (nccl-tests without MPI, N processes)

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.host for d in self.devices))

    @property
    def all_hosts(self) -> tuple[str, ...]:
        """The hosts of the device list, then those of NCCL log lines."""
        return tuple(dict.fromkeys((*self.hosts, *self.log_hosts)))

    @property
    def multi_node(self) -> bool:
        """The ranks ran on more than one server; NCCL's nNodes wins over host names (pods of one server)."""
        if self.nodes is not None:
            return self.nodes > 1
        return len(self.all_hosts) > 1


@dataclass
class _State:
    binary: str | None = None
    version: str | None = None
    nthreads: int | None = None
    ngpus: int | None = None
    error_column: bool = False
    column_header: bool = False  # "#  size  count  type ..." seen: a run without rows hung or was killed
    log_nranks: int | None = None
    log_ranks: dict[int, None] = field(default_factory=dict)
    out_of_bounds: int | None = None
    avg_busbw: float | None = None
    elision: bool = False  # an elision line ("...", "<snip>") inside the device list
    tables: int = 1  # single-rank tables printed one after another (a build without MPI under a launcher)
    empty_rows: int = 0


def parse(text: str, *, op: str | None = None) -> NcclTestsResult:
    """Parse one nccl-tests run; ``op`` ("all_reduce", "all_gather_perf", ...) overrides detection."""
    state = _State()
    devices: list[Device] = []
    rows: list[Row] = []
    warnings: list[str] = []
    for line_no, raw in enumerate(split_lines(text), start=1):
        line = raw.strip()
        if not line:
            continue
        log = _NCCL_LOG_LINE.search(line)
        if log:
            if log.group(1) == "WARN":
                warnings.append(line)
            _read_rank_line(line, state)
            continue
        if ELISION.fullmatch(line):
            state.elision = state.elision or (bool(devices) and not state.column_header)
        elif line.startswith("#"):
            _read_comment(line, raw, line_no, state, devices, after_rows=bool(rows))
        elif re.match(r"\d+\s", line):
            _add_row(_read_row(line, raw, line_no, state.error_column), rows, state)
        elif (binary := _BINARY.search(line)) and state.binary is None:
            state.binary = binary.group(0)  # the command line, e.g. "./build/all_reduce_perf -b 8"
    if not rows and not state.empty_rows and not (state.column_header and (state.binary or devices or state.ngpus)):
        raise ParseError("expected nccl-tests result rows (size count type ... busbw #wrong); none found", 0)
    per_process = state.ngpus * state.nthreads if state.ngpus and state.nthreads else None
    facts = rank_facts(text, [d.rank for d in devices], per_process, state.log_nranks, marker=state.elision)
    nranks = facts.nranks
    how: list[str] = list(facts.how)
    wrongs = [t.wrong for r in rows for t in (r.out_of_place, r.in_place) if t.wrong is not None]
    detected: str | None
    candidates: tuple[str, ...]
    if op:
        detected, candidates = _op_from_hint(op), ()
    else:
        detected, candidates, nranks = _detect_op(state.binary, rows, nranks, how)
    conflict = facts.conflict
    nranks = None if conflict else nranks  # not solved from the ratio either: the text contradicts itself
    if conflict is None and detected is not None and nranks is not None:
        conflict = ratio_conflict(detected, rows, nranks)
        nranks = None if conflict else nranks
    return NcclTestsResult(
        op=detected,
        binary=state.binary,
        nranks=nranks,
        nthreads=state.nthreads,
        ngpus=state.ngpus,
        devices=tuple(devices),
        rows=tuple(rows),
        wrong_total=sum(wrongs) if wrongs else None,
        out_of_bounds=state.out_of_bounds,
        avg_busbw_gbps=state.avg_busbw,
        warnings=tuple(warnings),
        version=state.version,
        op_candidates=candidates,
        inferred="; ".join(how) or None,
        log_ranks=tuple(sorted(state.log_ranks)),
        rank_conflict=conflict,
        ranks_elided=facts.elided,
        nodes=facts.nodes,
        log_hosts=facts.log_hosts,
        empty_rows=state.empty_rows,
        tables=state.tables,
    )


def _add_row(row: Row, rows: list[Row], state: _State) -> None:
    if row.size_bytes == 0:
        state.empty_rows += 1  # -b 0: timed, but no bytes moved, so no bandwidth
    else:
        rows.append(row)


def _read_rank_line(line: str, state: _State) -> None:
    # "ncclCommInitRank comm 0x.. rank 3 nranks 8 cudaDev 3 ..." and "... Destroy COMPLETE ... nranks 8".
    match = re.search(r"\brank\s+(\d+)\s+nranks\s+(\d+)", line, re.IGNORECASE)
    if match:
        state.log_ranks[int(match.group(1))] = None
        state.log_nranks = max(state.log_nranks or 0, int(match.group(2)))


def _read_comment(line: str, raw: str, line_no: int, state: _State, devices: list[Device], *, after_rows: bool) -> None:
    body = line.lstrip("#").strip()
    if match := _DEVICE.fullmatch(line):
        rank, group, pid, host, device, bus, name = match.groups()
        if state.tables == 1:  # a repeated single-rank table names its own process's "Rank 0" again
            devices.append(Device(int(rank), int(group), int(pid), host, int(device), bus, name))
    elif body.startswith("nThread"):
        if after_rows and not _single_rank(devices, state):
            raise bad_line("one nccl-tests run per file; a second run starts here, split the file", raw, line_no)
        state.tables += after_rows
        state.nthreads = _int_after(body, "nThread")
        state.ngpus = _int_after(body, "nGpus")
    elif match := re.match(r"Collective test starting:\s*(\S+)", body):
        state.binary = match.group(1)
    elif match := re.match(r"nccl-tests version\s+(\S+)", body):
        state.version = match.group(1)
    elif re.match(r"Rank\s+\d+\b", body):  # a cut rank line: which GPU and host the rank ran on is lost
        raise bad_line("'#  Rank  N Group  N Pid  N on HOST device  N [BUS] NAME'", raw, line_no)
    elif re.match(r"size\s+count\s+type\b", body):
        state.column_header = True
        state.error_column = "error" in body.split() and "#wrong" not in body
    else:
        _read_footer(body, raw, line_no, state)


def _read_footer(body: str, raw: str, line_no: int, state: _State) -> None:
    if match := re.match(r"Out of bounds values\s*:\s*(\S+)", body):
        state.out_of_bounds = parse_int(match.group(1))
        if state.out_of_bounds is None:
            raise bad_line("'# Out of bounds values : N OK'", raw, line_no)
    elif match := re.match(r"Avg bus bandwidth\s*:\s*(\S+)", body):
        state.avg_busbw = parse_float(match.group(1))
        if state.avg_busbw is None:
            raise bad_line("'# Avg bus bandwidth : X'", raw, line_no)


def _single_rank(devices: list[Device], state: _State) -> bool:
    """One process, one GPU, and the device list names rank 0 only: a run of one rank."""
    return len(devices) == 1 and devices[0].rank == 0 and (state.ngpus or 1) * (state.nthreads or 1) == 1


def _continues(lines: list[str]) -> bool:
    """nccl-tests prints several header lines; one after result rows starts a second run, unless the lines so
    far are single-rank tables, which a build without MPI prints once per process."""
    if not any(re.match(r"\s*\d+\s+\d+\s+[a-z]\w*\s+\S+", line) for line in lines):
        return True
    ranks = [m.group(1) for line in lines if (m := _DEVICE.fullmatch(line.strip()))]
    header = any(re.match(r"\s*#\s*nThread\s+1\s+nGpus\s+1\b", line) for line in lines)
    return header and ranks == ["0"] * len(ranks) and bool(ranks)


def _int_after(body: str, word: str) -> int | None:
    match = re.search(rf"\b{word}\s+(\d+)", body)
    return int(match.group(1)) if match else None


def _read_row(line: str, raw: str, line_no: int, error_column: bool) -> Row:
    tokens = line.split()
    expected = "size count type [redop] [root] then time algbw busbw #wrong twice"
    if not 11 <= len(tokens) <= 13:
        raise bad_line(f"{expected} ({len(tokens)} fields)", raw, line_no)
    size, count = parse_int(tokens[0]), parse_int(tokens[1])
    middle = tokens[3:-8]
    redop = next((t for t in middle if parse_int(t) is None), None)
    roots = [parse_int(t) for t in middle if parse_int(t) is not None]
    if size is None or count is None or len(middle) - (redop is not None) != len(roots) or len(roots) > 1:
        raise bad_line(expected, raw, line_no)
    oop = _timing(tokens[-8:-4], raw, line_no, error_column)
    inp = _timing(tokens[-4:], raw, line_no, error_column)
    return Row(size, count, tokens[2], redop, roots[0] if roots else None, oop, inp, line_no)


def _timing(tokens: list[str], raw: str, line_no: int, error_column: bool) -> Timing:
    values = [None if t.upper() == "N/A" else parse_float(t) for t in tokens[:3]]
    if any(v is None and t.upper() != "N/A" for v, t in zip(values, tokens[:3], strict=True)):
        raise bad_line("numbers (or N/A) for time, algbw and busbw", raw, line_no)
    last = tokens[3]
    if error_column:
        error = None if last.upper() == "N/A" else parse_float(last)
        if error is None and last.upper() != "N/A":
            raise bad_line("a number or N/A in the error column", raw, line_no)
        return Timing(values[0], values[1], values[2], None, error)
    wrong = None if last.upper() == "N/A" else parse_int(last)
    if wrong is None and last.upper() != "N/A":
        raise bad_line("an integer or N/A in the #wrong column", raw, line_no)
    return Timing(values[0], values[1], values[2], wrong)


def _op_from_hint(hint: str) -> str:
    stem = hint.strip().removesuffix("_perf").replace("-", "_")
    return OP_NAMES.get(stem, stem)


def _detect_op(
    binary: str | None, rows: list[Row], nranks: int | None, how: list[str]
) -> tuple[str | None, tuple[str, ...], int | None]:
    """(op, candidates when ambiguous, nranks) from the binary name or, failing that, the rows."""
    if binary:
        match = _BINARY.search(binary) or re.fullmatch(r"(\w+)_perf(?:_mpi)?", binary)
        if match:
            op = _op_from_hint(match.group(1))
            return op, (), nranks if nranks is not None else ranks_from_ratio(op, rows, how)
    return _op_from_columns(rows, nranks, how)


def _op_from_columns(
    rows: list[Row], nranks: int | None, how: list[str]
) -> tuple[str | None, tuple[str, ...], int | None]:
    """Guess from redop/root and the busbw/algbw factor (nccl-tests doc/PERFORMANCE.md)."""
    if not rows:
        return None, (), nranks
    first = rows[0]
    reduces = first.redop not in (None, "none")
    if first.root is not None and first.root >= 0:
        op = "reduce" if reduces else "broadcast"
        how.append(f"{op} from the redop/root columns ({first.redop}, root {first.root})")
        return op, (), nranks
    candidates = ["all_reduce", "reduce_scatter", "sendrecv"] if reduces else ["all_gather", "all_to_all", "sendrecv"]
    if first.redop is None:
        candidates = list(BUS_FACTORS)  # no redop column printed: anything
    ratio = median_ratio(rows)
    if ratio is None:
        return None, tuple(candidates), nranks
    fitting = [(c, n) for c in candidates if (n := ranks_fitting(c, ratio, nranks)) is not None]
    if len(fitting) != 1:
        return None, tuple(c for c, _ in fitting) or tuple(candidates), nranks
    op, ranks = fitting[0]
    if nranks is None and op != "sendrecv":
        how.append(f"{op} on {ranks} ranks from the busbw/algbw ratio {ratio:.3f} and redop {first.redop}")
        return op, (), ranks
    how.append(f"{op} from the busbw/algbw ratio {ratio:.3f} and redop {first.redop}")
    return op, (), nranks


# --- the evidence format: how this output is told apart and merged ----------------------------------

KIND = "nccl_tests"
_M = re.MULTILINE


def _detect(text: str) -> str | None:
    if re.search(
        r"^\s*#\s*nThread\s+\d+\s+nGpus|Avg bus bandwidth\s*:|Collective test starting:"
        r"|^\s*#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid",
        text,
        _M,
    ):
        return KIND
    # Without the header block: the column header or the binary's command line, then a result row.
    start = re.search(r"^\s*#\s*size\s+count\s+type\b|\b[a-z_]+_perf\b", text, _M)
    if start is not None and re.search(r"^\s*\d+\s+\d+\s+[a-z]\w*\s+\S+", text[start.end() :], _M) is not None:
        return KIND
    return None


def _merge(into: Into, result: NcclTestsResult) -> None:
    if result.empty_rows and not result.rows:
        into.note(f"nccl-tests: only rows of size 0 ({result.empty_rows}): no bandwidth to judge")
        return
    if not result.rows:
        _merge_hung_run(into, result)
        return
    if result.op is None:
        candidates = " or ".join(result.op_candidates) or "any collective"
        into.note(
            f"nccl-tests rows without the test name: the collective could be {candidates}; its bandwidth is "
            "not judged (keep the '# Collective test starting' or command line to judge it)",
        )
    elif result.inferred:
        into.note(f"nccl-tests {'device list elided' if result.ranks_elided else 'header trimmed'}: {result.inferred}")
    if result.out_of_bounds and not result.wrong_total:
        # nccl-tests' footer counts what its rows' #wrong columns found: rows lost from the paste may hold them.
        into.note(
            f"nccl-tests: the footer counts {result.out_of_bounds} out-of-bounds value(s) but no row shown has a "
            "#wrong count above 0: rows with wrong values may be missing from the text"
        )
    if result.rank_conflict is not None:
        into.note(f"nccl-tests: the rank count is unknown: {result.rank_conflict}; its bandwidth is not judged")
    elif result.nranks is None:
        into.note(
            "nccl-tests output without '# Using devices' rank lines, '# nThread ... nGpus' header or NCCL INFO "
            "rank lines: the number of ranks is unknown, so its bandwidth is not judged",
        )
    if result.op is not None and result.nranks is not None:
        _note_scope(into, result)
        add(into.merger, result, into.part.name)
    # A run with NCCL_DEBUG=INFO also shows which transports NCCL picked.
    if re.search(r"NCCL\s+INFO\s+Channel\s+\d+.*\bvia\b", into.part.text):
        into.merge_later("nccl_log")  # by kind, not by import, so that formats stay one module each


def _merge_hung_run(into: Into, result: NcclTestsResult) -> None:
    """Banner and column header but no row: the run hung or was killed, which is a failed run."""
    error = "the nccl-tests run printed its header and no result row (it hung or was killed)"
    into.note(f"{error}; judged as a failed {result.op or 'collective'} run")
    if result.op is not None:
        into.merger.add_failed_collective(result.op, result.nranks or 0, error, into.part.name)


def _note_scope(into: Into, result: NcclTestsResult) -> None:
    if result.nranks == 1:
        runs = f"{result.tables} single-rank tables (nccl-tests without MPI started {result.tables} times)"
        into.note(
            f"nccl-tests {runs if result.tables > 1 else 'single-rank run (nranks 1)'}: busbw is 0 by definition "
            "and says nothing about NVLink"
        )
    elif result.multi_node:
        into.note(f"nccl-tests multi-node run: {scope_text(result.nranks, result.all_hosts, result.nodes)}")


def add(merger: Merger, result: NcclTestsResult, file: str) -> None:
    """The run's rows as collective measurements; a one-host run also names GPUs of the node."""
    if len(result.hosts) == 1 and not result.multi_node:
        # Device lines of a single-host run name real GPUs of this node; a subset is possible (-g 4).
        merger.host(result.hosts[0], file)
        merger.lower_bound(max(d.device for d in result.devices) + 1, file)
        for device in result.devices:
            merger.gpu_fact(device.device, "name", device.name, file)
    for row in result.rows:
        wrongs = [row.out_of_place.wrong, row.in_place.wrong]
        correct = None if None in wrongs else all(w == 0 for w in wrongs)
        timing = _worse(row)
        merger.collectives.append(
            CollectiveMeasurement(
                op=result.op or "unknown",
                size_bytes=row.size_bytes,
                world_size=result.nranks or 0,
                time_us=timing.time_us,
                algbw_gbps=timing.algbw_gbps,
                busbw_gbps=timing.busbw_gbps,
                correct=correct,
                backend="nccl",
                source=f"nccl-tests: {file}",
                rank_gpus=rank_gpus(result.devices, result.hosts, result.nranks, multi_node=result.multi_node),
                conditions=scope_conditions(result.multi_node, result.all_hosts, result.nodes),
            )
        )
    merger.note("collectives", file)


def _worse(row: Row) -> Timing:
    """The slower of the row's out-of-place and in-place timings: one collective on the same GPUs either way."""
    out, inside = row.out_of_place, row.in_place
    slower = inside.busbw_gbps is not None and (out.busbw_gbps is None or inside.busbw_gbps < out.busbw_gbps)
    return inside if slower else out


FORMAT = register(
    Format(
        name=KIND,
        kinds=(KIND,),
        order=50,
        detect=_detect,
        parse=parse,
        families=("inventory", "collectives"),
        label="nccl-tests",
        merge=_merge,
        start=re.compile(r"^\s*#\s*(?:nccl-tests version|Collective test starting|nThread\s+\d+|size\s+count\s+type)"),
        continues=_continues,
        commands=(r"\w+_perf\b",),
    )
)
