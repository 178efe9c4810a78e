"""Which GPUs of a node cannot be judged on their own facts, whichever source listed them.

A GPU's identity (UUID, serial number, PCI bus id, CUDA index) names one device. Two entries that share
one name one GPU counted twice (a section pasted twice into a capture, a snapshot edited by hand, a probe
fault), so the later entry's facts are another GPU's. A probe error that names a GPU ("GPU 3: Xid 79,
GPU has fallen off the bus") says that GPU is not usable even where the GPU list is complete.
The live probe, a replayed snapshot and evidence files all reach the judges through :func:`gpu_problems`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_nvlink.model import Gpu, Node, normalize_pci_bus_id

# (field, what it is called, whether it is unique on its host only). A rack's trays are built alike, so
# each host numbers its GPUs from CUDA device 0 and may use the same bus ids; UUIDs and serial numbers
# are unique across every host.
IDENTITY_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("uuid", "UUID", False),
    ("serial", "serial number", False),
    ("pci_bus_id", "PCI bus id", True),
    ("cuda_index", "CUDA index", True),
)

# "GPU 3: ...", "GPU 3 (bus ...) is lost", "tray h7: GPU 3 ...", "GPU 0000:5d:00.0 ...": the GPU an error names.
_NAMED_GPU = re.compile(
    r"^(?:tray (?P<host>\S+): )?GPU (?:(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])|(?P<index>\d+)\b)"
)


@dataclass(frozen=True)
class DuplicateIdentity:
    """A GPU entry that carries identities an earlier entry already has."""

    gpu: int  # the later entry, whose facts are not judged
    first: int  # the entry that holds the identities first
    shared: tuple[tuple[str, str], ...]  # (field of IDENTITY_FIELDS, value as the later entry states it)

    def text(self) -> str:
        labels = [next(label for name, label, _ in IDENTITY_FIELDS if name == field) for field, _ in self.shared]
        named = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
        values = ", ".join(f"{field} {value}" for field, value in self.shared)
        return f"GPU {self.gpu} has the {named} of GPU {self.first} ({values}): one GPU counted twice, not two GPUs"


def duplicate_identities(gpus: Sequence[Gpu]) -> list[DuplicateIdentity]:
    """Every later entry that repeats an earlier one's UUID, serial, bus id or CUDA index, with each field
    it shares with the first such entry."""
    holders: dict[tuple[str, str | None, str], Gpu] = {}
    found: list[DuplicateIdentity] = []
    for gpu in gpus:
        keys = [
            (name, gpu.host if per_host else None, value)
            for name, _, per_host in IDENTITY_FIELDS
            if (value := _identity(gpu, name)) is not None
        ]
        first = next((holders[key] for key in keys if key in holders and holders[key].index != gpu.index), None)
        for key in keys:
            holders.setdefault(key, gpu)
        if first is not None:
            shared = tuple(
                (name, str(getattr(gpu, name)).strip())
                for name, _, per_host in IDENTITY_FIELDS
                if _identity(gpu, name) is not None
                and _identity(gpu, name) == _identity(first, name)
                and (not per_host or gpu.host == first.host)
            )
            found.append(DuplicateIdentity(gpu.index, first.index, shared))
    return found


def gpus_named_in(errors: Sequence[str], gpus: Sequence[Gpu]) -> dict[int, str]:
    """Per GPU index, the first probe error that names that GPU (by index, or by bus id; on a rack, by tray),
    without the words that name it."""
    named: dict[int, str] = {}
    for error in errors:
        match = _NAMED_GPU.match(error)
        if match is None:
            continue
        gpu = _named_gpu(gpus, match.group("host"), match.group("bus"), match.group("index"))
        if gpu is not None:
            named.setdefault(gpu.index, f"probe error: {error[match.end() :].lstrip(' :')}")
    return named


def gpu_problems(node: Node) -> dict[int, str]:
    """Per GPU index, why its facts cannot be judged: its own problem, a probe error naming it, or a
    duplicated identity. GPUs absent from the mapping are usable."""
    problems = {gpu.index: gpu.problem for gpu in node.gpus if gpu.problem}
    for index, error in gpus_named_in(node.probe_errors, node.gpus).items():
        problems.setdefault(index, error)
    for duplicate in duplicate_identities(node.gpus):
        problems.setdefault(duplicate.gpu, duplicate.text())
    return problems


def _identity(gpu: Gpu, name: str) -> str | None:
    value = getattr(gpu, name)
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    if not text:
        return None
    if name == "pci_bus_id":
        try:
            return normalize_pci_bus_id(text)
        except ValueError:
            return text.lower()
    return text.lower() if name == "uuid" else text


def _named_gpu(gpus: Sequence[Gpu], host: str | None, bus: str | None, index: str | None) -> Gpu | None:
    for gpu in gpus:
        if host is not None and gpu.host != host:
            continue
        if bus is not None:
            if gpu.pci_bus_id is not None and _identity(gpu, "pci_bus_id") == normalize_pci_bus_id(bus):
                return gpu
        elif index is not None and int(index) == (gpu.local_index if host is not None else gpu.index):
            return gpu
    return None
