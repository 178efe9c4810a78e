"""Merge two models of the same node field by field, so that no fact of either side is dropped.

A snapshot handed in as evidence must be judged exactly as its replay is: every field it holds
(a lost GPU, the fabric state, PCIe links, the NVLink bandwidth mode, probe errors, the NCCL
audit, and any field added to the model later) is carried into the evidence node. Walking the
dataclass fields, instead of listing the ones to copy, is what keeps later fields from being
dropped silently.

Rules, per field: a side that holds the field's default (``None``, empty) takes the other side's
value; equal values stay; records that name one thing (a GPU, a link, a pair) merge with the
record of the same key; other list items (measurements, channels, messages) are all kept; two
different values for one fact are a :class:`MergeConflict`, except where ``_COMBINE`` states how
the two readings agree (error counters only grow, so two reads taken at different times differ).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

from pytest_nvlink.model import Gpu, NcclAudit, Node, NvLinkInfo, P2PStatus, PairPath


class MergeConflict(Exception):
    """Both sides state a value for the same fact and the values differ."""

    def __init__(self, where: str, ours: object, theirs: object) -> None:
        super().__init__(f"{where}: {ours!r} vs {theirs!r}")
        self.where = where
        self.ours = ours
        self.theirs = theirs


# Records that describe one thing are merged with the other side's record of the same key.
_KEYS: dict[type, tuple[str, ...]] = {
    Gpu: ("index",),
    NvLinkInfo: ("link",),
    PairPath: ("a", "b"),
    P2PStatus: ("src", "dst"),
}

Combine = Callable[[Any, Any, str], Any]


def _counters_grow(ours: dict[str, int], theirs: dict[str, int], where: str) -> dict[str, int]:
    # NVLink error counters only grow from driver load: the higher reading is the later one.
    return {key: max(ours.get(key, 0), theirs.get(key, 0)) for key in {**ours, **theirs}}


def _same_usability(ours: str, theirs: str, where: str) -> str:
    # "disabled_by_regkey" and "not_supported" both say P2P is unusable; only ok-vs-not is a conflict.
    if (ours == "ok") != (theirs == "ok"):
        raise MergeConflict(where, ours, theirs)
    return ours


def _ours_first(ours: dict[str, str], theirs: dict[str, str], where: str) -> dict[str, str]:
    return {**theirs, **ours}


def _both_named(ours: str, theirs: str, where: str) -> str:
    return f"{ours}, {theirs}"


_COMBINE: dict[tuple[type, str], Combine] = {
    (NvLinkInfo, "errors"): _counters_grow,
    **{(P2PStatus, capability): _same_usability for capability in ("read", "write", "nvlink", "atomics")},
    (Node, "unknown_reasons"): _ours_first,
    (NcclAudit, "source"): _both_named,
}


def merge_into(ours: Any, theirs: Any, where: str, skip: frozenset[str] = frozenset()) -> None:
    """Fill dataclass ``ours`` with every fact of ``theirs`` (same type); MergeConflict where they differ."""
    for spec in dataclasses.fields(ours):
        if spec.name in skip:
            continue
        mine, other = getattr(ours, spec.name), getattr(theirs, spec.name)
        setattr(ours, spec.name, _merge_field(type(ours), spec, mine, other, f"{where}.{spec.name}"))


def _default(spec: dataclasses.Field[Any]) -> object:
    if spec.default is not dataclasses.MISSING:
        return spec.default
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return _NO_DEFAULT


_NO_DEFAULT = object()


def _merge_field(owner: type, spec: dataclasses.Field[Any], mine: object, other: object, where: str) -> object:
    default = _default(spec)
    if other in (default, mine):
        return mine
    if mine == default:
        return copy.deepcopy(other)
    combine = _COMBINE.get((owner, spec.name))
    if combine is not None:
        return combine(mine, other, where)
    return _merge_values(mine, other, where)


def _merge_values(mine: object, other: object, where: str) -> object:
    if dataclasses.is_dataclass(mine) and type(mine) is type(other):
        merge_into(mine, other, where)
        return mine
    if isinstance(mine, list) and isinstance(other, list):
        return _merge_lists(mine, other, where)
    if isinstance(mine, dict) and isinstance(other, dict):
        merged = dict(mine)
        for key, value in other.items():
            if key not in merged:
                merged[key] = copy.deepcopy(value)
            elif merged[key] != value:
                merged[key] = _merge_values(merged[key], value, f"{where}.{key}")
        return merged
    raise MergeConflict(where, mine, other)


def _merge_lists(mine: list[Any], other: list[Any], where: str) -> list[Any]:
    merged = list(mine)
    for item in other:
        key = _key(item)
        match = next((m for m in merged if key is not None and type(m) is type(item) and _key(m) == key), None)
        if match is not None:
            merge_into(match, item, f"{where}[{'-'.join(map(str, key or ()))}]")
        elif item not in merged:
            merged.append(copy.deepcopy(item))
    return merged


def _key(item: object) -> tuple[object, ...] | None:
    names = _KEYS.get(type(item))
    return tuple(getattr(item, name) for name in names) if names else None
