"""Slurm hostlist expressions: ``gpu[001-064,070],cpu-a[1-3]`` -> ``gpu001`` ... ``cpu-a3``.

The grammar is the one ``scontrol show hostnames`` expands: names separated by commas outside
brackets; each bracket holds comma-separated numbers or ``low-high`` ranges, zero-padded to the
width of ``low`` as written; several brackets in one name multiply (``r[1-2]n[1-2]`` -> r1n1,
r1n2, r2n1, r2n2); text after a bracket is kept (``node[1-2]-ib``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

# A typo such as gpu[1-100000000] must not exhaust memory; the largest Slurm clusters have ~10^5 nodes.
MAX_HOSTS = 1_000_000


class HostlistError(ValueError):
    """An expression that is not a Slurm hostlist; the message is one sentence naming it."""


def expand(expression: str) -> list[str]:
    """Every host of ``expression`` in order, duplicates dropped."""
    hosts = list(dict.fromkeys(iter_hosts(expression)))
    if not hosts:
        raise HostlistError(f"the hostlist {expression!r} names no host")
    return hosts


def first_host(expression: str) -> str:
    """The first host without expanding the rest (a rendezvous needs only that one)."""
    for host in iter_hosts(expression):
        return host
    raise HostlistError(f"the hostlist {expression!r} names no host")


def iter_hosts(expression: str) -> Iterator[str]:
    """The hosts of ``expression`` lazily, in order (duplicates kept)."""
    count = 0
    for name in _split_names(expression):
        for host in _expand_name(name, expression):
            count += 1
            if count > MAX_HOSTS:
                raise HostlistError(f"the hostlist {expression!r} names more than {MAX_HOSTS} hosts")
            yield host


def _split_names(expression: str) -> list[str]:
    """Split at the commas outside brackets."""
    names: list[str] = []
    depth = 0
    current: list[str] = []
    for char in expression.strip():
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"the hostlist {expression!r} nests brackets")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"the hostlist {expression!r} has ']' without '['")
        if char == "," and depth == 0:
            names.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if depth:
        raise HostlistError(f"the hostlist {expression!r} has '[' without ']'")
    names.append("".join(current).strip())
    if any(not name for name in names):
        raise HostlistError(f"the hostlist {expression!r} has an empty name (two commas, or one at an end)")
    return names


def _expand_name(name: str, expression: str) -> Iterator[str]:
    """``pre[1-2]mid[3,5]post`` -> the product of its literal parts and bracket ranges."""
    parts: list[list[str] | str] = []
    rest = name
    while "[" in rest:
        before, _, after = rest.partition("[")
        inside, _, rest = after.partition("]")
        parts.append(before)
        parts.append(_bracket_numbers(inside, expression))
    parts.append(rest)
    if any(char.isspace() for part in parts if isinstance(part, str) for char in part):
        raise HostlistError(f"the hostlist {expression!r} has a host name with a space in {name!r}")
    choices = [[part] if isinstance(part, str) else part for part in parts]
    for combination in itertools.product(*choices):
        yield "".join(combination)


def _bracket_numbers(inside: str, expression: str) -> list[str]:
    numbers: list[str] = []
    for element in inside.split(","):
        low, dash, high = (piece.strip() for piece in element.partition("-"))
        if not low.isdigit() or (dash and not high.isdigit()):
            raise HostlistError(
                f"the hostlist {expression!r} has [{inside}]; a bracket holds numbers and low-high ranges"
            )
        if not dash:
            numbers.append(low)
            continue
        start, stop = int(low), int(high)
        if stop < start:
            raise HostlistError(f"the hostlist {expression!r} has the range {element.strip()} running backwards")
        if stop - start >= MAX_HOSTS:
            raise HostlistError(f"the hostlist {expression!r} names more than {MAX_HOSTS} hosts")
        width = len(low)
        numbers.extend(str(number).zfill(width) for number in range(start, stop + 1))
    return numbers
