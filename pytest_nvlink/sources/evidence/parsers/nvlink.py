"""Parser for ``nvidia-smi nvlink`` outputs: ``-s/--status``, ``-e`` (error counters), ``-c`` (capabilities)
and ``-R`` (remote link info), detected line by line so that concatenated captures also read.

All four print ``GPU n: NAME (UUID: GPU-...)`` headers followed by indented ``Link n...`` lines.
Scripts that loop over GPUs often add ``=== GPU n ... ===`` banners between blocks; those are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_nvlink.sources.evidence.parsers.common import (
    ParseError,
    bad_line,
    parse_float,
    parse_int,
    quote,
    split_lines,
)
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

STATUS = "nvlink_status"
ERRORS = "nvlink_errors"
CAPS = "nvlink_caps"
REMOTE = "nvlink_remote"
MIXED = "nvlink_mixed"  # several nvidia-smi nvlink options captured into one file

_GPU_HEADER = re.compile(r"GPU\s+(\d+):\s*(.*?)\s*(?:\(UUID:\s*([^)\s]+)\s*\))?\s*")
_BANNER = re.compile(r"={3,}.*={3,}|-{3,}")
_ALL_INACTIVE = re.compile(r"all\s+links\s+are\s+inactive", re.IGNORECASE)
_STATUS_LINE = re.compile(r"Link\s+(\d+):\s*(?:([-+\d.eE]+)\s*GB/s|<?\s*(inactive|down|disabled)\s*>?)", re.IGNORECASE)
_REMOTE_LINE = re.compile(
    r"Link\s+(\d+):\s*Remote\s+Device(?:\s+Type)?[:\s]+([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?|[A-Za-z]\w*)"
    r"(?:\s*[:,]?\s*Link\s+(\d+))?\s*",
    re.IGNORECASE,
)
_CAP_LINE = re.compile(r"Link\s+(\d+)\s*,\s*(.+?)\s*:\s*(true|false)\s*", re.IGNORECASE)
_COUNTER_LINE = re.compile(r"Link\s+(\d+):\s*(.+?)\s*:\s*(\S+)\s*")
# What people write where they cut a paste short: the lines around it are not all of the output.
_ELISION = re.compile(
    r"\.{3,}|…+|\[\s*(?:\.{2,}|…|snip(?:ped)?)\s*\]|<\s*(?:snip(?:ped)?|\.{2,}|…)\s*>|-+\s*snip(?:ped)?\s*-+"
    r"|\(?\s*(?:output\s+)?(?:truncated|snipped|cut)(?:\s+here)?\s*\)?|\(\s*\d+\s+more\s+lines?.*\)",
    re.IGNORECASE,
)

# nvidia-smi's counter names, lower-cased, mapped to the model's ERROR_COUNTER_NAMES and, for the NVLink5
# set of newer drivers (R560+, Blackwell), NVLINK5_ERROR_COUNTER_NAMES. Names not listed (Tx/Rx packets and
# bytes, BER, FEC bins, Tx discards) are kept as raw counters only.
_ERROR_KEYS: dict[str, str] = {
    "malformed packet errors": "malformed_packet",
    "buffer overrun errors": "buffer_overrun",
    "rx errors": "rcv",
    "rx remote errors": "rcv_remote",
    "rx general errors": "rcv_general",
    "local link integrity errors": "local_link_integrity",
    "link recovery failed events": "link_recovery_failed",
    "total link recovery events": "link_recovery",
    "effective errors": "effective",
    "symbol errors": "symbol",
    "replay errors": "replay",
    "replay": "replay",
    "recovery errors": "recovery",
    "recovery": "recovery",
    "crc errors": "crc_flit",
    "crc flit errors": "crc_flit",
    "flit crc errors": "crc_flit",
    "crc flit": "crc_flit",
    "crc data errors": "crc_data",
    "data crc errors": "crc_data",
    "crc data": "crc_data",
    "ecc data errors": "ecc_data",
    "ecc errors": "ecc_data",
    "ecc data": "ecc_data",
}


@dataclass(frozen=True)
class LinkInfo:
    link: int
    active: bool | None = None
    speed_gbps: float | None = None  # per direction, as nvidia-smi prints it
    errors: dict[str, int] = field(default_factory=dict)  # model.(NVLINK5_)ERROR_COUNTER_NAMES keys
    counters: dict[str, str] = field(default_factory=dict)  # every counter line, name -> raw value
    capabilities: dict[str, bool] = field(default_factory=dict)  # "p2p_is_supported" -> True
    remote: str | None = None  # remote PCI bus id as printed, or a device type word
    remote_link: int | None = None


@dataclass(frozen=True)
class GpuLinks:
    index: int
    name: str | None
    uuid: str | None
    links: tuple[LinkInfo, ...]
    all_inactive: bool = False  # "Unable to retrieve NVLink information as all links are inActive"
    cut: tuple[int, str] | None = None  # (line, why) when the block is cut short: its link count is unknown


@dataclass(frozen=True)
class NvlinkReport:
    kinds: frozenset[str]  # subset of STATUS, ERRORS, CAPS, REMOTE
    gpus: tuple[GpuLinks, ...]
    notes: tuple[tuple[int, str], ...] = ()  # (line, text): cut-short blocks, listed under the file

    @property
    def kind(self) -> str:
        """The single output kind, or "nvlink_mixed" for concatenated outputs of several options."""
        return next(iter(self.kinds)) if len(self.kinds) == 1 else MIXED

    def gpu(self, index: int) -> GpuLinks | None:
        return next((g for g in self.gpus if g.index == index), None)


@dataclass
class _LinkBuilder:
    link: int
    active: bool | None = None
    speed: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    counters: dict[str, str] = field(default_factory=dict)
    caps: dict[str, bool] = field(default_factory=dict)
    remote: str | None = None
    remote_link: int | None = None

    def freeze(self) -> LinkInfo:
        return LinkInfo(
            self.link, self.active, self.speed, self.errors, self.counters, self.caps, self.remote, self.remote_link
        )


@dataclass
class _GpuBuilder:
    index: int
    name: str | None
    uuid: str | None
    line_no: int
    links: dict[int, _LinkBuilder] = field(default_factory=dict)
    all_inactive: bool = False
    cut: tuple[int, str] | None = None

    def link(self, number: int) -> _LinkBuilder:
        return self.links.setdefault(number, _LinkBuilder(number))


@dataclass
class _Block:
    """One ``GPU n:`` header and the lines under it, to tell a block that ends early."""

    gpu: _GpuBuilder
    kinds: set[str] = field(default_factory=set)
    lines: int = 0  # link lines
    last_line: int = 0


def parse(text: str) -> NvlinkReport:
    gpus: dict[int, _GpuBuilder] = {}
    current: _GpuBuilder | None = None
    kinds: set[str] = set()
    blocks: list[_Block] = []
    for line_no, raw in enumerate(split_lines(text), start=1):
        line = raw.strip()
        if _ELISION.fullmatch(line):
            if current is not None and current.cut is None:
                current.cut = (line_no, f"cut short at {quote(line)}")
            continue
        if not line or _BANNER.fullmatch(line):
            continue
        header = _GPU_HEADER.fullmatch(line)
        if header:
            current = _start_gpu(header, gpus, line_no)
            blocks.append(_Block(current, last_line=line_no))
            continue
        if _ALL_INACTIVE.search(line):
            if current is None:
                raise bad_line("a 'GPU n: NAME' header before the all-links-inactive message", raw, line_no)
            current.all_inactive = True
            kinds.add(STATUS)
            blocks[-1].kinds.add(STATUS)
            continue
        if re.match(r"link\b", line, re.IGNORECASE):
            if current is None:
                raise bad_line("a 'GPU n: NAME (UUID: ...)' header before the first Link line", raw, line_no)
            kind = _read_link_line(line, raw, line_no, current)
            kinds.add(kind)
            blocks[-1].kinds.add(kind)
            blocks[-1].lines += 1
            blocks[-1].last_line = line_no
            continue
        if re.match(r"GPU\s*\d", line):
            raise bad_line("a GPU header like 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)'", raw, line_no)
        # Anything else (prompts, job-log noise) carries no link facts and is skipped.
    if not gpus:
        raise ParseError("expected nvidia-smi nvlink output with 'GPU n: NAME' headers; none found", 0)
    if not kinds:
        raise ParseError("GPU headers found but no Link lines and no all-links-inactive message", 0)
    _check_last_block(blocks)
    frozen = tuple(_freeze(g) for g in sorted(gpus.values(), key=_index))
    notes = tuple(
        (g.cut[0], f"GPU {g.index}: the nvidia-smi nvlink block is {g.cut[1]}; its link count is not known")
        for g in frozen
        if g.cut is not None
    )
    return NvlinkReport(kinds=frozenset(kinds), gpus=frozen, notes=notes + _missing_counter_notes(gpus))


def _missing_counter_notes(gpus: dict[int, _GpuBuilder]) -> tuple[tuple[int, str], ...]:
    """Links that lack counter lines the other links of their GPU model print: a line lost from the output.

    ``nvidia-smi nvlink -e`` prints the same counters for every link of one GPU model, so a link without
    one of them lost a line (an edited or damaged paste), even where the lost line is not an error count.
    """
    names_by_model: dict[str | None, set[str]] = {}
    for gpu in gpus.values():
        for link in gpu.links.values():
            names_by_model.setdefault(gpu.name, set()).update(link.counters)
    notes: list[tuple[int, str]] = []
    for gpu in sorted(gpus.values(), key=_index):
        if gpu.cut is not None:
            continue  # a cut block is noted as cut already
        expected = names_by_model.get(gpu.name, set())
        for link in sorted(gpu.links.values(), key=lambda built: built.link):
            missing = sorted(expected - set(link.counters)) if link.counters else []
            if missing:
                lost = ", ".join(repr(name) for name in missing)
                notes.append(
                    (
                        gpu.line_no,
                        f"GPU {gpu.index} link {link.link} lacks counter line(s) {lost} that the "
                        f"other {gpu.name or 'GPU'} links print: the output is incomplete there",
                    )
                )
    return tuple(notes)


def _check_last_block(blocks: list[_Block]) -> None:
    """The output's last block with fewer link lines than its like: the paste ended inside it.

    nvidia-smi prints every link of a GPU (active or not), so GPUs of one model list as many; only the
    last block can have lost its end without a marker, and only its siblings can say how long it was.
    """
    if not blocks:
        return
    last = blocks[-1]
    if last.gpu.all_inactive or last.gpu.cut is not None:
        return
    like = [b.lines for b in blocks[:-1] if b.gpu.name == last.gpu.name and b.kinds == last.kinds and b.kinds]
    if (like and last.lines < max(like)) or (not last.kinds and len(blocks) > 1):
        seen = f"{last.lines} link line(s) where the other {last.gpu.name or 'GPU'} blocks have {max(like, default=0)}"
        last.gpu.cut = (last.last_line, f"cut short: the output ends after {seen}")


def _index(gpu: _GpuBuilder) -> int:
    return gpu.index


def _freeze(gpu: _GpuBuilder) -> GpuLinks:
    links = tuple(gpu.links[n].freeze() for n in sorted(gpu.links))
    return GpuLinks(gpu.index, gpu.name, gpu.uuid, links, gpu.all_inactive, gpu.cut)


def _start_gpu(header: re.Match[str], gpus: dict[int, _GpuBuilder], line_no: int) -> _GpuBuilder:
    index = int(header.group(1))
    name = header.group(2) or None
    uuid = header.group(3)
    known = gpus.get(index)
    if known is None:
        gpus[index] = _GpuBuilder(index, name, uuid, line_no)
        return gpus[index]
    # Concatenated -s and -e outputs repeat each header; that is fine as long as they agree.
    if (known.name, known.uuid) != (name, uuid):
        raise ParseError(
            f"GPU {index} is {name!r} ({uuid}) here but {known.name!r} ({known.uuid}) on line {known.line_no}",
            line_no,
        )
    return known


def _read_link_line(line: str, raw: str, line_no: int, gpu: _GpuBuilder) -> str:
    if match := _STATUS_LINE.fullmatch(line):
        _set_status(gpu, match, raw, line_no)
        return STATUS
    if match := _REMOTE_LINE.fullmatch(line):
        link = gpu.link(int(match.group(1)))
        link.remote = match.group(2)
        link.remote_link = int(match.group(3)) if match.group(3) else None
        return REMOTE
    if match := _CAP_LINE.fullmatch(line):
        key = re.sub(r"\W+", "_", match.group(2).strip().lower()).strip("_")
        gpu.link(int(match.group(1))).caps[key] = match.group(3).lower() == "true"
        return CAPS
    if match := _COUNTER_LINE.fullmatch(line):
        _set_counter(gpu, match, raw, line_no)
        return ERRORS
    raise bad_line(
        "'Link N: 26.562 GB/s', 'Link N: <inactive>', 'Link N: Replay Errors: 0', "
        "'Link N, P2P is supported: true' or 'Link N: Remote Device ...'",
        raw,
        line_no,
    )


def _set_status(gpu: _GpuBuilder, match: re.Match[str], raw: str, line_no: int) -> None:
    link = gpu.link(int(match.group(1)))
    if link.active is not None:
        raise bad_line(f"one status line per link; GPU {gpu.index} link {link.link} appears twice", raw, line_no)
    if match.group(2) is not None:
        speed = parse_float(match.group(2))
        if speed is None:
            raise bad_line("a link speed in GB/s", raw, line_no)
        link.active, link.speed = True, speed
    else:
        link.active = False


def _set_counter(gpu: _GpuBuilder, match: re.Match[str], raw: str, line_no: int) -> None:
    link = gpu.link(int(match.group(1)))
    name, value = match.group(2).strip(), match.group(3)
    if value.upper() != "N/A" and parse_float(value) is None:
        raise bad_line(f"a number or N/A for counter {name!r}", raw, line_no)
    if name in link.counters:
        raise bad_line(f"counter {name!r} once per link; GPU {gpu.index} link {link.link} repeats it", raw, line_no)
    link.counters[name] = value
    key = _ERROR_KEYS.get(re.sub(r"\s+", " ", name.lower()))
    count = parse_int(value)
    if key is not None and count is not None:
        link.errors[key] = count


# --- the evidence format: how this output is told apart and merged ----------------------------------

_M = re.MULTILINE
# The view of a file: the first that matches, in this order, when only one does.
_VIEW_LINES = {
    STATUS: re.compile(r"^\s*Link\s+\d+:\s*(?:[\d.]+\s*GB/s|<\s*inactive\s*>)|all\s+links\s+are\s+inactive", _M | re.I),
    REMOTE: re.compile(r"^\s*Link\s+\d+:\s*Remote\s+Device", _M),
    CAPS: re.compile(r"^\s*Link\s+\d+\s*,.*:\s*(?:true|false)\s*$", _M | re.I),
    ERRORS: re.compile(r"^\s*Link\s+\d+:\s*(?!Remote)[A-Za-z][^:]*:\s*\S+\s*$", _M),
}


def _detect(text: str) -> str | None:
    if not re.search(r"^\s*GPU\s+\d+:.*\(UUID:", text, _M):
        return None
    found = [kind for kind, pattern in _VIEW_LINES.items() if pattern.search(text)]
    if not found:
        return None
    return found[0] if len(found) == 1 else MIXED


def _merge(into: Into, report: NvlinkReport) -> None:
    merger, file = into.merger, into.part.name
    merger.lower_bound(max(g.index for g in report.gpus) + 1, file)
    for gpu in report.gpus:
        merger.gpu_fact(gpu.index, "name", gpu.name, file)
        merger.gpu_fact(gpu.index, "uuid", gpu.uuid, file)
        cut = None if gpu.cut is None else f"{into.part.where(gpu.cut[0])}: GPU {gpu.index}'s block is {gpu.cut[1]}"
        merger.link_list(gpu.index, file, cut)
        if gpu.all_inactive:
            merger.links_inactive(gpu.index, file)
        for link in gpu.links:
            merger.link(
                gpu.index,
                link.link,
                file,
                active=link.active,
                speed_gbps=link.speed_gbps,
                remote=link.remote,
                errors=link.errors,
            )
    if report.kinds - {ERRORS}:
        merger.note("nvlinks", file)
    if ERRORS in report.kinds:
        merger.note("nvlink_errors", file)


FORMAT = register(
    Format(
        name="nvlink",
        kinds=(STATUS, ERRORS, CAPS, REMOTE, MIXED),
        order=60,
        detect=_detect,
        parse=parse,
        families=("inventory", "nvlinks", "nvlink_errors"),
        label="nvidia-smi nvlink -s/-e/-c/-R",
        merge=_merge,
        start=re.compile(r"^\s*GPU\s+\d+:.*\(UUID:"),
        continues=lambda _so_far: True,  # nvidia-smi nvlink prints one such block per GPU
        commands=(r"nvidia-smi\b",),
    )
)
