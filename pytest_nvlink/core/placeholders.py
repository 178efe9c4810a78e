"""``{host}`` and ``{date}`` in output paths, so one command line serves every node of a Slurm step.

``srun pytest --nvlink-suite=h100-8gpu --nvlink-json=out/{host}.json`` writes one file per node.
Only these two names are known; anything else in braces, or a lone brace, is a mistake in the
command line and is refused with the option's name (``{{`` and ``}}`` stand for literal braces).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from datetime import datetime, timezone
from string import Formatter

PLACEHOLDERS: tuple[str, ...] = ("host", "date")
# What a host name may keep in a file name: the rest (a "/", spaces, shell metacharacters) becomes "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
UNKNOWN_HOST = "unknown-host"


class PlaceholderError(ValueError):
    """A path template with an unknown placeholder or a stray brace; the message names the option."""


def safe_host(host: str | None) -> str:
    """``host`` fit to be one file or folder name: no ``/``, no ``..``, no leading dot, never empty."""
    cleaned = _UNSAFE.sub("_", host or "").replace("..", "_").lstrip(".")
    return cleaned or UNKNOWN_HOST


def utc_date(now: datetime | None = None) -> str:
    """Today in UTC as ``20261203``: every node of one sweep names the same day, whatever its time zone."""
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%d")


def placeholder_values(host: str | None, now: datetime | None = None) -> dict[str, str]:
    """The values ``{host}`` and ``{date}`` stand for; the host falls back to this machine's name."""
    return {"host": safe_host(host or socket.gethostname()), "date": utc_date(now)}


def expand(template: str, values: Mapping[str, str], label: str) -> str:
    """``template`` with each ``{name}`` replaced; :class:`PlaceholderError` names ``label`` on a mistake."""
    known = ", ".join("{" + name + "}" for name in PLACEHOLDERS)
    try:
        parts = list(Formatter().parse(template))
    except ValueError as exc:  # "Single '}' encountered in format string" and the like
        raise PlaceholderError(
            f"{label}: {template!r}: {exc}; placeholders are {known}, literal braces are written {{{{ and }}}}"
        ) from None
    out = []
    for literal, field, spec, conversion in parts:
        out.append(literal)
        if field is None:
            continue
        if field not in PLACEHOLDERS or spec or conversion:
            shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise PlaceholderError(f"{label}: {template!r}: unknown placeholder {shown}; known placeholders: {known}")
        out.append(values[field])
    return "".join(out)


def check(template: str, label: str) -> None:
    """Refuse a bad template before anything is probed (the values are not known yet)."""
    expand(template, dict.fromkeys(PLACEHOLDERS, "x"), label)
