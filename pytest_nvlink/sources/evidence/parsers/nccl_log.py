"""Parser for ``NCCL_DEBUG=INFO`` logs: the transports NCCL picked and the warnings it gave.

Lines look like ``host:pid:tid [dev] NCCL INFO msg`` or ``host:pid:tid [dev] file.cc:123 NCCL WARN msg``;
NCCL 2.30 adds the function (``paths.cc:396 (ncclTopoCheckP2p) NCCL WARN``) and may prefix a timestamp.
Non-NCCL lines (the application's own output) are skipped, but a ``Channel ... via`` line that does
not have the expected shape is an error: those lines are the evidence for P2P vs SHM/NET fallback.
Used both on logs users hand in and on the per-rank logs (NCCL_DEBUG_FILE) of our own runs.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pytest_nvlink.model import MnnvlClique, NcclAudit, NcclRank, TransportChannel
from pytest_nvlink.sources.evidence.merge import EvidenceError, Merger
from pytest_nvlink.sources.evidence.parsers.common import ParseError, bad_line, split_lines
from pytest_nvlink.sources.evidence.parsers.registry import Format, Text, register

# ``search``, not ``match``: NCCL >= 2.23 may put a timestamp before the host (NCCL_DEBUG_TIMESTAMP_FORMAT,
# on by default for WARN). Between ``[dev]`` and ``NCCL`` come, each optional, a TRACE time in ms, the
# source ``file:line`` and, since NCCL 2.30, the ``(function)`` (NVIDIA/nccl src/debug.cc).
# The look-behind starts the host at a token boundary, where the leftmost match starts anyway; without it a
# long line with no blanks costs quadratic time.
_PREFIX = re.compile(
    r"(?<![^\s:\[\]])(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[(?P<dev>\d+)\]\s+"
    r"(?:\d+(?:\.\d+)?\s+)?(?:(?P<file>[^\s()]+:\d+)\s+)?(?:\((?P<function>[^()\s]*)\)\s+)?"
    r"NCCL\s+(?P<level>INFO|WARN|TRACE|ABORT)\s?(?P<msg>.*)"
)
_CHANNEL = re.compile(
    r"Channel\s+(\d+)(?:/(\d+))?\s*:\s*(\d+)\[(\d+)\]\s*->\s*(\d+)\[(\d+)\]\s*(?:\[(send|receive)\]\s*)?via\s+(\S.*?)\s*"
)
_TRANSPORTS = {"P2P": "P2P", "SHM": "SHM", "NET": "NET", "NVLS": "NVLS", "COLLNET": "COLLNET"}
_NVLS = re.compile(r"NVLS multicast support is (not )?available on dev (\d+)")
_CHANNEL_COUNTS = re.compile(r"(\d+)\s+([a-z0-9 ]+?)\s+channels(?=,|$)")
_COMM = re.compile(r"nRanks\s+(\d+)\s+nNodes\s+(\d+)\s+localRanks\s+(\d+)")
_INIT = re.compile(
    r"ncclCommInitRank.*?\brank\s+(\d+)\s+nranks\s+(\d+)\s+cudaDev\s+(\d+)(?:\s+nvmlDev\s+(\d+))?"
    r"(?:\s+busId\s+([0-9a-fA-F]+))?"
)
_ENV = re.compile(r"(NCCL_\w+|CUDA_\w+)\s+set by environment to\s+(.*?)\.?\s*")
_P2P_PROBLEMS = re.compile(
    r"Could not enable P2P between dev|P2P is disabled between NVLINK connected GPUs|peer query failed between dev"
)


@dataclass(frozen=True)
class Channel:
    channel: int
    src_rank: int
    src_dev: int
    dst_rank: int
    dst_dev: int
    transport: str  # "P2P", "SHM", "NET", "NVLS", "COLLNET", or the upper-cased word NCCL printed
    detail: str  # text after "via", e.g. "P2P/CUMEM/read"
    direction: str | None = None  # "send" / "receive" for NET connections


@dataclass(frozen=True)
class RankInfo:
    rank: int
    nranks: int
    cuda_dev: int
    nvml_dev: int | None
    bus_id: str | None
    host: str


# NVML's fabric health mask: 2 bits per field, 1 = the condition is present, 2 = absent, 0 = not
# supported (nvml.h, NVML_GPU_FABRIC_HEALTH_MASK_*). A mask of 0 and "fabric UUID 0.0 cliqueId 0x0"
# is what a single HGX node without multi-node NVLink prints: not a fault.
_MNNVL = re.compile(
    r"MNNVL busId\s+(?P<bus>\S+)\s+fabric UUID\s+(?P<uuid>\S+)\s+cliqueId\s+(?P<clique>\S+)"
    r"\s+state\s+(?P<state>\d+)\s+healthMask\s+(?P<mask>0x[0-9a-fA-F]+|\d+)"
)
# NCCL's decision after the fabric checks (init.cc): "MNNVL 1 cliqueId 2786 cliqueSize 4 cliqueRank 0 nvlDomainSize 4";
# the clique id is printed with %x, without "0x"; nvlDomainSize is absent before NCCL 2.27.
_MNNVL_DECISION = re.compile(r"MNNVL\s+([01])\s+cliqueId\b")
_MNNVL_FIELDS = re.compile(
    r"MNNVL\s+([01])\s+cliqueId\s+(?:0x)?([0-9a-fA-F]+)\s+cliqueSize\s+(\d+)\s+cliqueRank\s+(\d+)"
    r"(?:\s+nvlDomainSize\s+(\d+))?(?:\s+\w+\s+\w+)*\s*"  # later versions may append "key value" pairs
)
_HEALTH_FIELDS = ("degraded_bandwidth", "route_recovery", "route_unhealthy", "access_timeout_recovery")


@dataclass(frozen=True)
class MnnvlFabric:
    bus_id: str
    fabric_uuid: str
    clique_id: int
    state: int
    health_mask: int

    @property
    def health(self) -> dict[str, bool | None]:
        """Each health field: True when NVML reports the condition, False when not, None if unsupported."""
        decoded: dict[str, bool | None] = {}
        for position, name in enumerate(_HEALTH_FIELDS):
            bits = (self.health_mask >> (2 * position)) & 0x3
            decoded[name] = {1: True, 2: False}.get(bits)
        return decoded

    @property
    def problems(self) -> list[str]:
        return [name for name, present in self.health.items() if present]


@dataclass(frozen=True)
class NcclLog:
    version: str | None
    channels: tuple[Channel, ...]
    nvls_available: bool | None  # False if any device said "not available"
    channel_counts: dict[str, int]  # "coll", "collnet", "nvls", "p2p", ... (the largest seen)
    nnodes: int | None
    local_ranks: int | None
    nranks: int | None
    ranks: dict[int, RankInfo]
    p2p_problems: tuple[str, ...]
    env: dict[str, str]
    warnings: tuple[str, ...]
    hosts: tuple[str, ...]
    mnnvl: tuple[MnnvlFabric, ...] = ()  # NCCL 2.2x "MNNVL busId ... healthMask ..." lines
    cliques: tuple[MnnvlClique, ...] = ()  # "MNNVL 1 cliqueId ... cliqueSize ..." lines, one per rank

    @property
    def last_warn(self) -> str | None:
        return self.warnings[-1] if self.warnings else None

    @property
    def nvls_channels(self) -> int | None:
        return self.channel_counts.get("nvls")


@dataclass
class _Builder:
    version: str | None = None
    channels: dict[Channel, None] = field(default_factory=dict)  # ordered set
    nvls: dict[int, bool] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    comm: tuple[int, int, int] | None = None
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    hosts: dict[str, None] = field(default_factory=dict)
    nccl_lines: int = 0
    mnnvl: list[MnnvlFabric] = field(default_factory=list)
    # (host, pid, the line's fields) -> the record: an ordered set, a communicator re-created logs the line again
    cliques: dict[tuple[str, ...], tuple[str, str, MnnvlClique]] = field(default_factory=dict)
    rank_of_process: dict[tuple[str, str], int] = field(default_factory=dict)  # (host, pid) -> rank


def reads_prefix(line: str) -> bool:
    """Whether ``line`` has a prefix this parser understands (the device check counts misses)."""
    return _PREFIX.search(line) is not None


def parse(text: str) -> NcclLog:
    out = _Builder()
    _read_into(text, out)
    if out.nccl_lines == 0:
        raise ParseError("expected NCCL_DEBUG log lines ('host:pid:tid [dev] NCCL INFO ...'); none found", 0)
    return _freeze(out)


def parse_many(texts: Iterable[str]) -> NcclLog:
    """Merge the logs of several ranks (one file each) into one view; every text must be a log."""
    out = _Builder()
    for number, text in enumerate(texts, start=1):
        before = out.nccl_lines
        try:
            _read_into(text, out)
        except ParseError as exc:
            raise ParseError(f"log {number}: {exc.message}", exc.line_no) from None
        if out.nccl_lines == before:
            raise ParseError(f"log {number}: expected NCCL_DEBUG log lines; none found", 0)
    if out.nccl_lines == 0:
        raise ParseError("no NCCL logs given", 0)
    return _freeze(out)


def to_audit(log: NcclLog, source: str | None) -> NcclAudit:
    channels = [
        TransportChannel(c.channel, c.src_rank, c.src_dev, c.dst_rank, c.dst_dev, c.transport, c.detail)
        for c in log.channels
    ]
    return NcclAudit(
        channels=channels,
        nvls_available=log.nvls_available,
        nvls_channels=log.nvls_channels,
        p2p_disabled_warnings=list(log.p2p_problems),
        env=dict(log.env),
        last_warn=log.last_warn,
        source=source,
        ranks=[NcclRank(info.rank, info.host or None, info.nvml_dev) for info in log.ranks.values()],
        mnnvl=list(log.cliques),
        nodes=log.nnodes,
    )


def _freeze(out: _Builder) -> NcclLog:
    nvls = None if not out.nvls else all(out.nvls.values())
    nranks, nnodes, local = out.comm if out.comm else (None, None, None)
    if nranks is None and out.ranks:
        nranks = next(iter(out.ranks.values())).nranks
    return NcclLog(
        version=out.version,
        channels=tuple(out.channels),
        nvls_available=nvls,
        channel_counts=dict(out.counts),
        nnodes=nnodes,
        local_ranks=local,
        nranks=nranks,
        ranks=dict(sorted(out.ranks.items())),
        p2p_problems=tuple(dict.fromkeys(out.problems)),
        env=dict(out.env),
        warnings=tuple(out.warnings),
        hosts=tuple(out.hosts),
        mnnvl=tuple(out.mnnvl),
        cliques=tuple(_with_rank(clique, host, pid, out) for host, pid, clique in out.cliques.values()),
    )


def _with_rank(clique: MnnvlClique, host: str, pid: str, out: _Builder) -> MnnvlClique:
    rank = out.rank_of_process.get((host, pid)) if pid else None
    return clique if rank is None else dataclasses.replace(clique, rank=rank)


# Grepped or reformatted logs, where the "host:pid:tid [dev]" prefix is gone, cut to "pid:tid [dev]" or
# replaced: "NCCL INFO Channel 00 : ...", "[2025-01-31 12:00:00] NCCL INFO ...", "2025-01-31 12:00:00.123 [0]
# NCCL INFO ..." (NCCL_DEBUG_TIMESTAMP_FORMAT), "transport.cc:123 (ncclTransportP2pSetup) NCCL INFO ...".
# Tried only when _PREFIX does not match.
_TIME = r"(?:\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?\s*)?"
_STRIPPED = re.compile(
    rf"^\s*{_TIME}(?:\d+:\d+\s+)?(?:\[(?P<dev>\d+)\]\s+)?"
    r"(?:(?P<file>[\w.]+:\d+)(?:\s+\(\w+\))?\s+)?NCCL\s+(?P<level>INFO|WARN|TRACE|ABORT)\s?(?P<msg>.*)"
)


# Whatever a framework's logger put before it, "NCCL INFO <message>" is NCCL's line: only the message is read.
_ANY_PREFIX = re.compile(r"(?<!\S)NCCL\s+(?P<level>INFO|WARN|TRACE|ABORT)\s(?P<msg>.*)")


def _match_line(raw: str) -> tuple[str, str, str, str] | None:
    """(host, pid, level, message) of an NCCL log line, with or without the usual prefix; None otherwise."""
    match = _PREFIX.search(raw)
    if match is not None:
        return match.group("host"), match.group("pid"), match.group("level"), match.group("msg")
    stripped = _STRIPPED.match(raw) or _ANY_PREFIX.search(raw)
    if stripped is not None:
        return "", "", stripped.group("level"), stripped.group("msg")
    return None


# Where an NCCL line starts inside a physical line: a lost newline glues it to the end of the line before.
_LINE_START = re.compile(
    r"(?<![^\s:\[\]])(?P<host>[^\s:\[\]]+):\d+:\d+\s+\[\d+\]\s+(?:\d+(?:\.\d+)?\s+)?(?:[^\s()]+:\d+\s+)?"
    r"(?:\([^()\s]*\)\s+)?NCCL\s+(?:INFO|WARN|TRACE|ABORT)\b"
)
_MARKER = re.compile(r"(?:\d+:\d+\s+)?(?:\[\d+\]\s+)?NCCL\s+(?:INFO|WARN|TRACE|ABORT)\b")


def _host_counts(lines: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for raw in lines:
        for match in _LINE_START.finditer(raw):
            counts[match.group("host")] = counts.get(match.group("host"), 0) + 1
    return counts


def _glued_start(match: re.Match[str], hosts: dict[str, int]) -> int:
    """Where the NCCL line of ``match`` starts: its host token may carry the end of the line before it.

    "...via P2P/CUMEMnode1:12:34 [0] NCCL INFO" reads host "P2P/CUMEMnode1"; a host the log names more often
    that ends the token ("node1") is the real one, and what precedes it belongs to the line before.
    """
    token = match.group("host")
    real = [h for h, n in hosts.items() if h != token and token.endswith(h) and n > hosts.get(token, 0)]
    return match.start() + len(token) - len(max(real, key=len)) if real else match.start()


def _pieces(raw: str, hosts: dict[str, int]) -> list[str]:
    """The NCCL lines a physical line holds: more than one where newlines were lost (each read on its own)."""
    starts = [_glued_start(m, hosts) for m in _LINE_START.finditer(raw)]
    if not starts:
        starts = [m.start() for m in _MARKER.finditer(raw)][1:]  # a log without host prefixes: cut at each marker
    cuts = sorted({0, *(start for start in starts if raw[:start].strip())})
    return [raw[a:b] for a, b in zip(cuts, [*cuts[1:], len(raw)], strict=True)]


def _read_into(text: str, out: _Builder) -> None:
    lines = split_lines(text)
    hosts = _host_counts(lines)
    for line_no, raw in enumerate(lines, start=1):
        for piece in _pieces(raw, hosts) if "NCCL" in raw else ():
            _read_piece(piece, line_no, out)


def _read_piece(raw: str, line_no: int, out: _Builder) -> None:
    found = _match_line(raw)
    if found is None:
        return
    out.nccl_lines += 1
    host, pid, level, msg = found[0], found[1], found[2], found[3].strip()
    if host:
        out.hosts[host] = None
    if level == "WARN":
        out.warnings.append(msg)
    _read_clique(msg, (host, pid), raw, line_no, out)
    _read_message(msg, host, raw, line_no, out)
    if pid and (init := _INIT.search(msg)):
        out.rank_of_process[(host, pid)] = int(init.group(1))


def _read_mnnvl(msg: str, out: _Builder) -> None:
    match = _MNNVL.search(msg)
    if match is not None:
        clique = match.group("clique")
        out.mnnvl.append(
            MnnvlFabric(
                match.group("bus"),
                match.group("uuid"),
                int(clique, 0) if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", clique) else -1,
                int(match.group("state")),
                int(match.group("mask"), 0),
            )
        )


def _read_clique(msg: str, process: tuple[str, str], raw: str, line_no: int, out: _Builder) -> None:
    if _MNNVL_DECISION.match(msg) is None:
        return
    match = _MNNVL_FIELDS.fullmatch(msg)
    if match is None:  # cut or damaged: the one line that says whether the rack's NVLink was used
        raise bad_line("'MNNVL 0|1 cliqueId HEX cliqueSize N cliqueRank N [nvlDomainSize N]'", raw, line_no)
    enabled, clique, size, clique_rank, domain = match.groups()
    host, pid = process
    record = MnnvlClique(
        host or None,
        enabled == "1",
        clique_id=int(clique, 16),
        clique_size=int(size),
        clique_rank=int(clique_rank),
        nvl_domain_size=int(domain) if domain else None,
    )
    key = (host, pid, *match.groups(default=""))
    out.cliques[key] = (host, pid, record)


def _read_message(msg: str, host: str, raw: str, line_no: int, out: _Builder) -> None:
    _read_mnnvl(msg, out)
    # A transport line has "R[D] -> R[D] via ..."; one cut or garbled before "via" still shows the arrow (the
    # ring listings "Channel 00/02 : 0 1 ..." have none), and is refused rather than lost with its transport.
    if msg.startswith("Channel") and (" via " in f" {msg} " or "->" in msg):
        out.channels[_channel(msg, raw, line_no)] = None
    elif match := re.match(r"NCCL version\s+(\S+)", msg):
        _set_once_version(out, match.group(1), raw, line_no)
    elif match := _NVLS.search(msg):
        dev = int(match.group(2))
        out.nvls[dev] = out.nvls.get(dev, True) and match.group(1) is None
    elif "channels" in msg and (counts := _CHANNEL_COUNTS.findall(msg)):
        for number, name in counts:
            key = name.strip().replace(" ", "_")
            out.counts[key] = max(out.counts.get(key, 0), int(number))
    elif match := _COMM.search(msg):
        out.comm = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
    elif match := _INIT.search(msg):
        rank, nranks, cuda_dev, nvml_dev, bus = match.groups()
        info = RankInfo(int(rank), int(nranks), int(cuda_dev), int(nvml_dev) if nvml_dev else None, bus, host)
        out.ranks.setdefault(info.rank, info)
    elif match := _ENV.fullmatch(msg):
        out.env[match.group(1)] = match.group(2)
    if _P2P_PROBLEMS.search(msg):
        out.problems.append(msg)


def _set_once_version(out: _Builder, version: str, raw: str, line_no: int) -> None:
    if out.version is not None and out.version != version:
        raise bad_line(f"one NCCL version per log (saw {out.version} before)", raw, line_no)
    out.version = version


def _channel(msg: str, raw: str, line_no: int) -> Channel:
    match = _CHANNEL.fullmatch(msg)
    if match is None:
        raise bad_line("'Channel NN/N : R[D] -> R[D] via TRANSPORT/...'", raw, line_no)
    channel, _, src, src_dev, dst, dst_dev, direction, detail = match.groups()
    word = re.split(r"[/\s]", detail, maxsplit=1)[0].upper()
    transport = _TRANSPORTS.get(word, word)
    return Channel(int(channel), int(src), int(src_dev), int(dst), int(dst_dev), transport, detail, direction)


# --- the evidence format: how this output is told apart and merged ----------------------------------

KIND = "nccl_log"
# An NCCL log with its "host:pid:tid [dev]" prefix grepped away or replaced by a timestamp.
_STRIPPED_LOG = re.compile(
    rf"^\s*(?:\[[\d\- :T.,]+\]\s*)?{_TIME}(?:\d+:\d+\s+)?(?:\[\d+\]\s+)?(?:[\w.]+:\d+(?:\s+\(\w+\))?\s+)?"
    r"NCCL\s+(?:INFO|WARN)\s",
    re.MULTILINE,
)


def _detect(text: str) -> str | None:
    # (?<!\S): the host name starts a token; otherwise a long line without blanks costs quadratic time.
    if re.search(r"(?<!\S)\S+:\d+:\d+\s+\[\d+\]\s+(?:\S+:\d+\s+)?NCCL\s+(?:INFO|WARN)", text) or _STRIPPED_LOG.search(
        text
    ):
        return KIND
    return KIND if _mostly_nccl_lines(text) else None


def _mostly_nccl_lines(text: str) -> bool:
    """A framework's log whose own prefix precedes "NCCL INFO" on most lines: NCCL's lines all the same."""
    lines = [line for line in split_lines(text) if line.strip()]
    nccl = sum(1 for line in lines if _ANY_PREFIX.search(line))
    return nccl >= max(2, len(lines) / 2)


def merge_logs(merger: Merger, logs: Sequence[Text], *, one_host: bool = True) -> None:
    """All logs as one NCCL audit: one log per rank is common, and ranks are only whole together.

    ``one_host``: the evidence is of one server, so logs that all name one host name the server's host, which
    must agree with the other files' (a rack's logs name its trays). Logs naming several hosts (ranks in pods
    of one server have their own host names) say nothing about which is the server's.
    """
    for log in logs:  # parse one by one first, so that an error names its file
        try:
            parse(log.text)
        except ParseError as exc:
            raise EvidenceError(f"{log.where(exc.line_no)}: {exc.message} (read as {KIND})") from None
    names = ", ".join(log.name for log in logs)
    merged = parse_many([log.text for log in logs])
    if one_host and len(merged.hosts) == 1:
        merger.host(merged.hosts[0], names)
    merger.add_nccl_audit(to_audit(merged, names), [log.name for log in logs])


FORMAT = register(
    Format(
        name=KIND,
        kinds=(KIND,),
        order=70,
        detect=_detect,
        parse=parse,
        families=("nccl_transport",),
        label="an NCCL_DEBUG=INFO log",
        merge_together=merge_logs,
    )
)
