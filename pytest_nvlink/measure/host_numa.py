"""Binding a measuring process to a GPU's NUMA node, and checking where its host buffers really landed.

nvbandwidth allocates the host buffer from a thread on the GPU's own CPU socket; a buffer on the far
socket crosses the inter-socket link and measures that link, not the GPU's. No libnuma is needed: the
child pins its CPU affinity to the node's CPUs (``os.sched_setaffinity``) before any host buffer
exists, and the kernel's default memory policy ("local": the node of the CPU that first touches a
page) then places the pinned buffers there. Whether it did is read back from ``/proc/self/numa_maps``
(pages per node of the mapping that holds each buffer): the figure records the node the pages are
on, or None with the reason when the binding or the check could not be made.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SYSFS_NODES = "/sys/devices/system/node"
PROC_SELF = "/proc/self"


@dataclass(frozen=True)
class Binding:
    """The outcome of binding to a node: ``node`` when the affinity is set, else None and why."""

    node: int | None
    note: str


def parse_cpulist(text: str) -> set[int]:
    """The kernel's cpulist format: ``0-3,8,10-11``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


@dataclass(frozen=True)
class NumaBinder:
    """Picklable; binds the calling process (all its future threads) to a node's CPUs.

    ``sysfs_nodes`` and ``proc_self`` are the places read (tests point them at files of their own).
    """

    sysfs_nodes: str = SYSFS_NODES
    proc_self: str = PROC_SELF

    def bind(self, node: int | None) -> Binding:
        if node is None:
            return Binding(None, "not bound: the probe knows no NUMA node for this GPU")
        path = Path(self.sysfs_nodes) / f"node{node}" / "cpulist"
        try:
            cpus = parse_cpulist(path.read_text(encoding="ascii"))
        except (OSError, ValueError) as exc:
            return Binding(None, f"not bound: {path} unreadable: {exc}")
        allowed = cpus & os.sched_getaffinity(0)
        if not allowed:
            return Binding(None, f"not bound: none of node {node}'s CPUs is allowed to this process (cgroup/cpuset)")
        try:
            os.sched_setaffinity(0, allowed)
        except OSError as exc:
            return Binding(None, f"not bound: sched_setaffinity failed: {exc}")
        return Binding(node, f"CPU affinity set to node {node}'s {len(allowed)} CPUs; buffers placed by first touch")

    def pages_on(self, addresses: tuple[int, ...]) -> dict[int, int] | str:
        """Pages per NUMA node of the mappings holding ``addresses``, or why that could not be read."""
        try:
            maps = (Path(self.proc_self) / "maps").read_text(encoding="ascii")
            numa_maps = (Path(self.proc_self) / "numa_maps").read_text(encoding="ascii")
        except OSError as exc:
            return f"placement not checked: {exc}"
        return pages_of_mappings(maps, numa_maps, addresses)


def pages_of_mappings(maps: str, numa_maps: str, addresses: tuple[int, ...]) -> dict[int, int] | str:
    """``N<node>=<pages>`` summed over the numa_maps entries of the mappings that contain ``addresses``."""
    starts = set()
    for address in addresses:
        start = _mapping_start(maps, address)
        if start is None:
            return f"placement not checked: no mapping holds {address:#x}"
        starts.add(start)
    pages: dict[int, int] = {}
    for line in numa_maps.splitlines():
        fields = line.split()
        if not fields or int(fields[0], 16) not in starts:
            continue
        for field in fields[1:]:
            if field.startswith("N") and "=" in field:
                node, count = field[1:].split("=", 1)
                pages[int(node)] = pages.get(int(node), 0) + int(count)
    return pages or "placement not checked: numa_maps lists no pages for the buffers"


def _mapping_start(maps: str, address: int) -> int | None:
    for line in maps.splitlines():
        span = line.split(" ", 1)[0]
        low, _, high = span.partition("-")
        try:
            if int(low, 16) <= address < int(high, 16):
                return int(low, 16)
        except ValueError:
            continue
    return None


def placement(binding: Binding, pages: dict[int, int] | str | None) -> tuple[int | None, str]:
    """The node to record and the sentence for ``conditions``: the node the pages are on, when known."""
    if binding.node is None:
        return None, binding.note
    if pages is None or isinstance(pages, str):
        why = pages or "placement not checked: the engine has no host address"
        return binding.node, f"{binding.note}; {why}"
    where = max(pages, key=lambda node: pages[node])
    spread = ", ".join(f"node {node}: {count} pages" for node, count in sorted(pages.items()))
    if where != binding.node:
        return where, f"{binding.note}; but the buffers' pages are on node {where} ({spread})"
    return where, f"{binding.note}; pages verified ({spread})"
