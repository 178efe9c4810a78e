"""Figures already in the node (a replayed snapshot, parsed evidence), and the one rule for a pair's worst.

The checks ask a :class:`MeasurementProvider` and never learn whether the answer was measured a second
ago on this machine (:class:`pytest_nvlink.measure.provider.LiveMeasurements`) or read from a snapshot
or a vendor's burn-in log (:class:`RecordedMeasurements`).
"""

from __future__ import annotations

import copy
import dataclasses
import operator
from typing import Protocol

from pytest_nvlink.model import CollectiveMeasurement, NcclAudit, Node, P2PMeasurement
from pytest_nvlink.model.host_link import HostLinkMeasurement


class MeasurementProvider(Protocol):
    def p2p(self, src: int, dst: int, kind: str) -> P2PMeasurement | None: ...

    def p2p_for_comparison(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        """p2p()'s figure with the same numbers, its source perhaps without the note naming the pair's other
        figures: for tests of many pairs at once, which read numbers only."""

    def collectives(self) -> list[CollectiveMeasurement]: ...

    def nccl(self) -> NcclAudit | None: ...

    def host_link(self) -> list[HostLinkMeasurement]:
        """Every GPU's host-link figures (each direction, as recorded or measured now)."""

    def complete(self) -> None:
        """Run every measurement campaign this session will run, so per-run facts are final."""


class RecordedMeasurements:
    """Figures already in the node: a replayed snapshot or parsed evidence."""

    def __init__(self, node: Node) -> None:
        self._node = node
        # One answer per pair and kind, worked out together on the first question: the bandwidth check and
        # the proof of path ask for the same figure, and a 72-GPU node holds ~15,000 of them. A pair recorded
        # several times (both ways, or in several files) is named "worst of N" only when p2p() asks for it.
        self._answers: dict[tuple[int, int, str], P2PMeasurement] | None = None
        self._several: dict[tuple[int, int, str], list[P2PMeasurement]] = {}

    def p2p(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        key, answers = _pair_key(src, dst, kind), self._recorded()
        several = self._several.pop(key, None)
        if several is not None:  # the worst, picked when the figures were read, now named with the others
            answers[key] = _named_as_worst(sorted(several, key=_recorded_high_first), answers[key])
        return answers.get(key)

    def p2p_for_comparison(self, src: int, dst: int, kind: str) -> P2PMeasurement | None:
        return self._recorded().get(_pair_key(src, dst, kind))  # a pair recorded several times: its worst

    def _recorded(self) -> dict[tuple[int, int, str], P2PMeasurement]:
        if self._answers is None:
            self._answers, self._several = _worst_per_pair(self._node.measurements.p2p)
        return self._answers

    def collectives(self) -> list[CollectiveMeasurement]:
        return list(self._node.measurements.collectives)

    def nccl(self) -> NcclAudit | None:
        return self._node.measurements.nccl

    def host_link(self) -> list[HostLinkMeasurement]:
        return list(self._node.measurements.host_link)

    def complete(self) -> None:
        return  # recorded figures are final already


def _pair_key(src: int, dst: int, kind: str) -> tuple[int, int, str]:
    # A bidirectional figure belongs to the pair, whichever order recorded it.
    return (dst, src, kind) if kind == "bidirectional" and src > dst else (src, dst, kind)


def _worst_per_pair(
    figures: list[P2PMeasurement],
) -> tuple[dict[tuple[int, int, str], P2PMeasurement], dict[tuple[int, int, str], list[P2PMeasurement]]]:
    """Each pair and kind's worst recorded figure as recorded, and all figures of the pairs recorded several
    times (in order), which p2p() names in the worst one's source when asked."""
    keys = list(zip(map(_SRC, figures), map(_DST, figures), map(_KIND, figures), strict=True))
    for at in [at for at, (src, dst, kind) in enumerate(keys) if src > dst and kind == "bidirectional"]:
        keys[at] = _pair_key(*keys[at])
    answers: dict[tuple[int, int, str], P2PMeasurement] = {}
    several: dict[tuple[int, int, str], list[P2PMeasurement]] = {}  # most pairs have one figure: no list
    for key, m in zip(keys, figures, strict=True):
        first = answers.setdefault(key, m)
        if first is not m:
            several.setdefault(key, [first]).append(m)
    for key, found in several.items():
        answers[key] = _worst_of(found)
    return answers, several


def _worst_of(found: list[P2PMeasurement]) -> P2PMeasurement:
    """The figure worst_figure() picks, as recorded: those recorded low-index first lead, the first of equals wins."""
    if len(found) != 2:
        return min(sorted(found, key=_recorded_high_first), key=_badness_order)
    first, second = found  # a pair recorded both ways, ~2,500 of them at 72 GPUs: the same choice without sorts
    if first.src > first.dst and not second.src > second.dst:
        first, second = second, first
    return second if _badness_order(second) < _badness_order(first) else first


def _recorded_high_first(m: P2PMeasurement) -> bool:
    return m.src > m.dst


def worst_figure(found: list[P2PMeasurement]) -> P2PMeasurement | None:
    """The worst of several figures for one pair (a failed measurement first), naming the others.

    Files that disagree about a pair are not averaged or read in the pair's favour: the pair is only
    as good as its worst figure, and the verdict names the file that figure came from.
    """
    if len(found) <= 1:
        return found[0] if found else None
    return _named_as_worst(found, min(found, key=_badness_order))


def _named_as_worst(found: list[P2PMeasurement], worst: P2PMeasurement) -> P2PMeasurement:
    """A copy of ``worst`` whose source names the other figures of ``found``, in their order."""
    others = "; ".join(f"{_shown(m)} from {m.source or 'unknown source'}" for m in found if m is not worst)
    return _with_source(worst, f"{worst.source or 'unknown source'} (worst of {len(found)} figures; also {others})")


def _with_source(m: P2PMeasurement, source: str) -> P2PMeasurement:
    """A copy of ``m`` naming another source; the node's own record is left as it was read."""
    # dataclasses.replace reads every field by name (~3 us, for each of thousands of pairs recorded both
    # ways); the record's values are read in one call and passed by position.
    copied = P2PMeasurement(*_FIELD_VALUES(m)) if type(m) is P2PMeasurement else copy.copy(m)  # a subclass's own
    copied.source = source
    return copied


_FIELD_VALUES = operator.attrgetter(*(f.name for f in dataclasses.fields(P2PMeasurement)))
_SRC, _DST, _KIND = operator.attrgetter("src"), operator.attrgetter("dst"), operator.attrgetter("kind")


def _badness_order(m: P2PMeasurement) -> tuple[int, float]:
    if m.value is None:
        return (0, 0.0)
    return (1, -m.value if m.kind == "latency" else m.value)


def _shown(m: P2PMeasurement) -> str:
    return f"{m.value:g} {m.unit}" if m.value is not None else f"no figure ({m.error or 'failed'})"


def worst_measured(figures: list[P2PMeasurement], kind: str) -> P2PMeasurement | None:
    """The node's worst figure of ``kind`` that was measured (lowest bandwidth, highest latency); None if none was.

    The one rule the renderers name a "worst pair" by; the first of equal figures, in recorded order, wins.
    """
    measured = [m for m in figures if m.kind == kind and m.value is not None]
    if not measured:
        return None
    pick = max if kind == "latency" else min
    return pick(measured, key=lambda m: m.value or 0.0)
