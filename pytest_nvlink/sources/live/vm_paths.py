"""NVLinks whose far end names no GPU of this node: a VM guest's remapped bus ids (part of the live probe).

A hypervisor gives a passed-through GPU a guest bus id of its own, but NVML inside the guest may report a
link's far end by the host's bus id (or by none at all). Matching those ids against the guest's GPUs finds
no peer, and the pair would be called PCIe though it is NVLink. For such a pair the probe asks
``nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK)`` before it takes the PCIe class, and records
which way the path was decided (issue 25, item 11).
"""

from __future__ import annotations

from collections.abc import Collection

from pytest_nvlink.model import Gpu

# Node.unknown_reasons key of the note saying how a pair's path was decided without its links' bus ids.
DECIDED_KEY = "pair{a}-{b}.path_decided_by"


def unresolved_links(gpu: Gpu, gpu_bus_ids: Collection[str]) -> dict[str | None, int]:
    """Active links to a GPU whose far end is none of ``gpu_bus_ids``: how many per reported far-end bus id.

    A link of unknown remote type with a far end that is no GPU counts as a switch link already
    (``probe.nvlink_count_between``), so only those with no far end at all are unresolved here.
    """
    groups: dict[str | None, int] = {}
    for link in gpu.nvlinks or []:
        if not link.active or link.remote_type not in ("gpu", None):
            continue
        remote = link.remote_pci_bus_id
        unresolved = remote is None or (link.remote_type == "gpu" and remote not in gpu_bus_ids)
        if unresolved:
            groups[remote] = groups.get(remote, 0) + 1
    return groups


def far_end_ids(unresolved: dict[int, dict[str | None, int]]) -> dict[int, str]:
    """Per GPU, the bus id its peers' links report for it, where the links tell it.

    In a full mesh every peer's links name the GPU, and the GPU's own links name every peer but itself: the
    one reported id missing from its own links is its own. Where more than one is missing (a GPU not linked
    to every peer) the GPU's id stays untold.
    """
    reported = {bus for groups in unresolved.values() for bus in groups if bus is not None}
    found: dict[int, str] = {}
    for index, groups in unresolved.items():
        missing = reported - set(groups)
        if groups and len(missing) == 1:
            found[index] = missing.pop()
    return found


def shared_link_count(
    a: int, b: int, unresolved: dict[int, dict[str | None, int]], far_ends: dict[int, str]
) -> int | None:
    """The NV# of a pair whose links name no GPU of the node, when their far ends tell it; else None.

    ``a``'s links to ``b`` are those whose far end is ``b``'s reported id, and ``b``'s links back must be as
    many. On a node of two GPUs, links that report no far end at all can only lead to the other GPU.
    """
    groups_a, groups_b = unresolved.get(a, {}), unresolved.get(b, {})
    if len(unresolved) == 2 and set(groups_a) == set(groups_b) == {None}:
        count_a, count_b = groups_a[None], groups_b[None]
    elif a in far_ends and b in far_ends:
        count_a, count_b = groups_a.get(far_ends[b], 0), groups_b.get(far_ends[a], 0)
    else:
        return None
    return count_a if count_a == count_b and count_a > 0 else None
