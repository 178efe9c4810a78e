"""Parser for kernel logs (``dmesg``, ``dmesg -T``, ``journalctl -k``, ``/var/log/kern.log``): Xid, SXid and
Fabric Manager lines, and the window the log covers.

The NVIDIA driver reports a GPU error as ``NVRM: Xid (PCI:0000:48:00): 74, pid=..., name=..., <text>``
(NVIDIA, "Xid Errors": "grep for NVRM: Xid"), naming the GPU by its PCI bus id; a GPU can also fall off the
bus with no Xid line (``NVRM: GPU 0000:48:00.0: GPU has fallen off the bus.``), read as Xid 79. NVSwitches
report ``nvidia-nvswitchN: SXid (PCI:0000:05:00.0): 20034, ...`` (NVIDIA Fabric Manager User Guide, SXid
errors), and Fabric Manager logs link training failures and a degraded fabric through the journal. Lines that
only load the module (``NVRM: loading NVIDIA UNIX ... Kernel Module``) are no events.

Each line's time is read from its prefix: dmesg's seconds since boot (``[  123.456789]``), dmesg -T's local
time (``[Mon Jul  1 10:00:00 2026]``), an ISO time (``journalctl -o short-iso``, rsyslog, Talos kmsg) or the
syslog/journalctl short form (``Jul 01 10:00:00 host kernel: ...``, no year). An event's time is counted from
the log's first stamped line: the log is judged for the window between its first and last stamps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from pytest_nvlink.model import EventWindow, XidEvent, normalize_pci_bus_id
from pytest_nvlink.sources.evidence.parsers.common import ParseError, split_lines, strip_ansi
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

KIND = "kernel_log"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_BOOT = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
_CTIME = re.compile(rf"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ({_MONTH} +\d+ \d\d:\d\d:\d\d \d{{4}})\]\s?(.*)$")
_ISO_LINE = re.compile(rf"^({_ISO})\s+\S+\s+(.*)$")
_SYSLOG = re.compile(rf"^({_MONTH} +\d+ \d\d:\d\d:\d\d)\s+\S+\s+(.*)$")
_TALOS = re.compile(rf"^\S+: kern:\s+\w+: \[({_ISO})\]: (.*)$")
_JOURNAL_NOTE = re.compile(r"^-- (?:Logs begin|Journal begins|Boot |No entries|Reboot)")
_COMMAND = re.compile(r"^\s*(?:\S*[$#>%]\s+)?(?:sudo\s+)?(?:\S*/)?(?:dmesg|journalctl|cat|grep|zgrep|tail)\b")
_KERNEL_TAG = re.compile(r"^kernel:\s*(?:\[\s*\d+\.\d+\]\s*)?")

_BUS = r"(?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
_XID = re.compile(rf"NVRM: Xid \({_BUS}\): (\d+),?\s*(.*)$")
_FELL_OFF = re.compile(rf"NVRM: GPU (?:at )?{_BUS}: GPU has fallen off the bus")
_SXID = re.compile(rf"nvidia-nvswitch\d*: SXid \({_BUS}\): (\d+),?\s*(.*)$")
_FM_TAG = re.compile(r"\b(?:nv-|nvidia-)fabricmanager[a-z]*(?:\[\d+\])?:\s*(.*)$", re.IGNORECASE)
_FM_FAILURE = re.compile(r"training failed|degraded|fatal|link down|failed to train", re.IGNORECASE)


@dataclass(frozen=True)
class LogEvent:
    """One event line: an Xid (``number`` = the Xid), an SXid, or a Fabric Manager failure (no number)."""

    kind: str  # "xid" | "sxid" | "fabric_manager"
    number: int | None
    pci_bus_id: str | None  # normalized ``dddd:bb:dd.f``
    at_s: float | None  # seconds from the log's first stamped line
    stamp: str | None  # the line's time as printed
    text: str  # the line, without its time prefix
    line_no: int


@dataclass(frozen=True)
class KernelLog:
    """The events of a kernel log and the window its stamped lines cover."""

    events: tuple[LogEvent, ...]
    first_stamp: str | None
    last_stamp: str | None
    length_s: float | None  # None when the stamps give no duration (one stamped line)
    stamped_lines: int


def parse(text: str) -> KernelLog:
    """Read every line with a kernel-log time prefix; ParseError when no line has one."""
    times: list[tuple[float, str]] = []
    events: list[LogEvent] = []
    for line_no, raw in enumerate(split_lines(strip_ansi(text)), start=1):
        read = _stamped(raw.rstrip())
        if read is None:
            continue
        seconds, stamp, rest = read
        times.append((seconds, stamp))
        event = _event(rest, line_no)
        if event is not None:
            events.append(_placed(event, seconds - times[0][0], stamp))
    if not times:
        raise ParseError("no line with a kernel log time prefix (dmesg, dmesg -T, journalctl -k, syslog)")
    return KernelLog(
        events=tuple(_fallen_off_without_xid(events)),
        first_stamp=times[0][1],
        last_stamp=times[-1][1],
        length_s=times[-1][0] - times[0][0] if len(times) > 1 else None,
        stamped_lines=len(times),
    )


def _stamped(line: str) -> tuple[float, str, str] | None:
    """(seconds on the log's clock, the stamp as printed, the rest of the line), or None for other lines."""
    boot = _BOOT.match(line)
    if boot:
        return float(boot.group(1)), f"[{boot.group(1)}]", boot.group(2)
    for pattern, parse_time in ((_CTIME, _ctime), (_TALOS, _iso), (_ISO_LINE, _iso), (_SYSLOG, _syslog)):
        match = pattern.match(line)
        if match:
            seconds = parse_time(match.group(1))
            if seconds is not None:
                return seconds, match.group(1), _KERNEL_TAG.sub("", match.group(2))
    return None


def _ctime(text: str) -> float | None:
    return _timestamp(" ".join(text.split()), "%b %d %H:%M:%S %Y")


def _syslog(text: str) -> float | None:
    # No year: 2000 is a leap year, so Feb 29 reads; durations within one log come out right.
    return _timestamp("2000 " + " ".join(text.split()), "%Y %b %d %H:%M:%S")


def _iso(text: str) -> float | None:
    cleaned = text.replace(",", ".").replace(" ", "T")
    try:
        moment = datetime.fromisoformat(cleaned.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp()


def _timestamp(text: str, form: str) -> float | None:
    try:
        return datetime.strptime(text, form).timestamp()
    except ValueError:
        return None


def _event(rest: str, line_no: int) -> LogEvent | None:
    xid = _XID.search(rest)
    if xid:
        return LogEvent("xid", int(xid.group(2)), _bus(xid.group(1)), None, None, rest, line_no)
    fell = _FELL_OFF.search(rest)
    if fell:
        return LogEvent("xid", 79, _bus(fell.group(1)), None, None, rest, line_no)
    sxid = _SXID.search(rest)
    if sxid:
        return LogEvent("sxid", int(sxid.group(2)), _bus(sxid.group(1)), None, None, rest, line_no)
    fabric = _FM_TAG.search(rest)
    if fabric and _FM_FAILURE.search(fabric.group(1)):
        return LogEvent("fabric_manager", None, None, None, None, rest, line_no)
    return None


def _placed(event: LogEvent, at_s: float, stamp: str) -> LogEvent:
    return LogEvent(event.kind, event.number, event.pci_bus_id, at_s, stamp, event.text, event.line_no)


def _bus(raw: str) -> str | None:
    try:
        return normalize_pci_bus_id(raw)
    except ValueError:
        return None


def _fallen_off_without_xid(events: list[LogEvent]) -> list[LogEvent]:
    """A "fallen off the bus" line counts as Xid 79 only when no Xid 79 line names the same GPU."""
    with_xid = {e.pci_bus_id for e in events if e.kind == "xid" and e.number == 79 and "NVRM: Xid" in e.text}
    return [e for e in events if "NVRM: Xid" in e.text or e.kind != "xid" or e.pci_bus_id not in with_xid]


# --- the evidence format: how this output is told apart and merged ----------------------------------


def _detect(text: str) -> str | None:
    """Most lines carry a kernel log time prefix (command lines and journalctl's "-- ..." notes aside)."""
    lines = [line.rstrip() for line in split_lines(strip_ansi(text)[:200_000]) if line.strip()]
    lines = [line for line in lines if not (_JOURNAL_NOTE.match(line) or _COMMAND.match(line) or line[0] == "#")]
    stamped = sum(1 for line in lines[:2000] if _stamped(line) is not None)
    return KIND if stamped and stamped >= 0.8 * len(lines[:2000]) else None


def _merge(into: Into, log: KernelLog) -> None:
    file = into.part.name
    window = EventWindow(
        source=f"kernel log {file}",
        start=log.first_stamp,
        length_s=log.length_s,
        end=log.last_stamp,
    )
    events = [
        XidEvent(
            gpu=None,  # the merger maps bus ids to GPUs once every file is read
            xid=e.number,
            at_s=e.at_s,
            text=e.text,
            kind=e.kind,
            pci_bus_id=e.pci_bus_id,
            stamp=e.stamp,
        )
        for e in log.events
    ]
    into.merger.add_events(events, window, file)
    if log.length_s is None:
        into.note(f"one stamped line only (line {into.first_line}): the window it covers has no length")


FORMAT = register(
    Format(
        name=KIND,
        kinds=(KIND,),
        order=100,  # last: a time prefix per line is the loosest marker of all
        detect=_detect,
        parse=parse,
        families=("xid_events",),
        label="a kernel log (dmesg, journalctl -k, kern.log)",
        merge=_merge,
        commands=(r"dmesg\b", r"journalctl\b"),
    )
)
