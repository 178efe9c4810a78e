"""Nodes that pass their floors but are slower than their peers, per figure family.

A node's value in a family is its worst figure: the slowest P2P pair (unidirectional,
bidirectional), the highest pair latency, each collective's lowest bus bandwidth at the largest
message size it ran. A node is an outlier when either rule flags it:

- the modified z-score 0.6745·(x - median)/MAD is at or beyond -3.5 (+3.5 for latency, where
  higher is worse). Source: Iglewicz & Hoaglin, "How to Detect and Handle Outliers" (1993), via
  the NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.5.17
  (https://www.itl.nist.gov/div898/handbook/eda/section3/eda35h.htm). With MAD = 0 (more than
  half the nodes identical) the score is undefined and only the next rule applies.
- the value is 3.5 % or more worse than the fleet median ("warn"), 7 % or more ("replace").
  Source: Azure/ai-infrastructure-on-azure, skills/slurm/cluster_outlier_detection
  (https://github.com/Azure/ai-infrastructure-on-azure).

Fewer than 10 nodes with a value say nothing about a fleet (the same source asks for 10).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class NodeSummary(Protocol):
    """What outlier detection reads of a node: its host, suite and figures (the merge's summary has them)."""

    @property
    def host(self) -> str: ...

    @property
    def suite(self) -> str: ...

    @property
    def figures(self) -> list[NodeFigure]: ...


MODIFIED_Z_FACTOR = 0.6745  # the 0.75 quantile of the standard normal: MAD/0.6745 estimates sigma


@dataclass(frozen=True)
class OutlierSettings:
    # Source: NIST/SEMATECH e-Handbook 1.3.5.17 (Iglewicz & Hoaglin): |modified z| > 3.5 is a potential outlier.
    z_threshold: float = 3.5
    # Source: Azure/ai-infrastructure-on-azure cluster_outlier_detection: 3.5 % below expected warns.
    warn_percent: float = 3.5
    # Source: same: 7 % below expected files the node for replacement.
    replace_percent: float = 7.0
    # Source: same: the statistics need at least 10 nodes.
    min_nodes: int = 10


@dataclass(frozen=True)
class Figure:
    value: float
    where: str  # "GPU 2 -> GPU 6", "4 GiB"


@dataclass
class Family:
    name: str  # "p2p unidirectional", "all_reduce busbw @ 4 GiB"
    unit: str
    higher_is_better: bool
    figures: dict[str, Figure] = field(default_factory=dict)  # host -> the node's worst figure
    median: float | None = None
    mad: float | None = None
    note: str | None = None  # why the family was not judged

    @property
    def judged(self) -> bool:
        return self.note is None


@dataclass(frozen=True)
class Outlier:
    host: str
    family: str
    value: float
    unit: str
    where: str
    median: float
    z: float | None  # None when MAD = 0
    percent_worse: float
    level: str  # "warn" | "replace"

    def sentence(self) -> str:
        direction = "below" if not self.family.endswith("latency") else "above"
        z = "MAD = 0, no z-score" if self.z is None else f"modified z {self.z:+.1f}"
        return (
            f"{self.host}: {self.family} {self.value:g} {self.unit} at {self.where} is "
            f"{abs(self.percent_worse):.1f} % {direction} the fleet median {self.median:g} {self.unit} "
            f"({z}; {self.level})"
        )


def find_outliers(
    files: Sequence[NodeSummary], settings: OutlierSettings, *, by_suite: bool = False
) -> tuple[list[Family], list[Outlier]]:
    """Outliers per family; ``by_suite`` (a fleet mixing suites) keeps one family per suite, as an A100 is no
    outlier among H100s."""
    families = collect_families(files, by_suite=by_suite)
    outliers: list[Outlier] = []
    for family in families:
        outliers.extend(judge_family(family, settings))
    outliers.sort(key=lambda o: (o.level != "replace", -o.percent_worse, o.host, o.family))
    return families, outliers


def collect_families(files: Sequence[NodeSummary], *, by_suite: bool = False) -> list[Family]:
    families: dict[str, Family] = {}
    for node in files:
        for figure_family, unit, higher_is_better, figure in node.figures:
            name = f"{node.suite}: {figure_family}" if by_suite else figure_family
            family = families.setdefault(name, Family(name, unit, higher_is_better))
            family.figures[node.host] = figure
    return sorted(families.values(), key=lambda f: f.name)


P2P_FAMILIES = (("unidirectional", "GB/s", True), ("bidirectional", "GB/s", True), ("latency", "us", False))


NodeFigure = tuple[str, str, bool, Figure]  # family, unit, higher is better, the node's worst figure


def node_figures(measurements: dict[str, Any]) -> list[NodeFigure]:
    """The node's worst figure in each family it measured."""
    found: list[NodeFigure] = []
    worst: dict[str, tuple[float, str]] = {}
    for entry in measurements.get("p2p", []):
        kind, value = entry.get("kind"), entry.get("value")
        if value is None or entry.get("error") or kind not in {"unidirectional", "bidirectional", "latency"}:
            continue
        higher_is_better = kind != "latency"
        current = worst.get(kind)
        if current is None or (value < current[0] if higher_is_better else value > current[0]):
            worst[kind] = (float(value), f"GPU {entry.get('src')} -> GPU {entry.get('dst')}")
    for kind, unit, higher_is_better in P2P_FAMILIES:
        if kind in worst:
            value, where = worst[kind]
            found.append((f"p2p {kind}", unit, higher_is_better, Figure(value, where)))
    found.extend(_collective_figures(measurements.get("collectives", [])))
    found.extend(_host_link_figures(measurements.get("host_link", [])))
    return found


HOST_LINK_FAMILIES = ("h2d", "d2h", "bidir_h2d", "bidir_d2h")


def _host_link_figures(entries: list[dict[str, Any]]) -> list[NodeFigure]:
    """Each direction's slowest GPU: a node whose worst GPU lags the fleet's is the outlier, the GPU named."""
    worst: dict[str, tuple[float, str]] = {}
    for entry in entries:
        direction, value = entry.get("direction"), entry.get("value")
        if value is None or entry.get("error") or direction not in HOST_LINK_FAMILIES:
            continue
        if direction not in worst or value < worst[direction][0]:
            worst[direction] = (float(value), f"GPU {entry.get('gpu')}")
    return [
        (f"host link {direction}", "GB/s", True, Figure(*worst[direction]))
        for direction in HOST_LINK_FAMILIES
        if direction in worst
    ]


def _collective_figures(entries: list[dict[str, Any]]) -> list[NodeFigure]:
    largest: dict[str, int] = {}
    for entry in entries:
        if entry.get("busbw_gbps") is not None and not entry.get("error"):
            largest[entry["op"]] = max(largest.get(entry["op"], 0), int(entry["size_bytes"]))
    worst: dict[str, float] = {}
    for entry in entries:
        op, value = entry.get("op"), entry.get("busbw_gbps")
        if value is None or entry.get("error") or op not in largest or entry["size_bytes"] != largest[op]:
            continue
        worst[op] = min(worst.get(op, float(value)), float(value))
    return [
        (f"{op} busbw @ {size_text(largest[op])}", "GB/s", True, Figure(value, size_text(largest[op])))
        for op, value in sorted(worst.items())
    ]


def size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def judge_family(family: Family, settings: OutlierSettings) -> list[Outlier]:
    values = [figure.value for figure in family.figures.values()]
    if len(values) < settings.min_nodes:
        family.note = f"too few nodes ({len(values)} < {settings.min_nodes}) to judge outliers"
        return []
    median = statistics.median(values)
    mad = statistics.median(abs(value - median) for value in values)
    family.median, family.mad = median, mad
    if median <= 0:
        family.note = f"the fleet median is {median:g} {family.unit}; no percentage can be taken of it"
        return []
    outliers = []
    for host, figure in family.figures.items():
        outlier = _judge(host, figure, family, (median, mad), settings)
        if outlier is not None:
            outliers.append(outlier)
    return outliers


def _judge(
    host: str, figure: Figure, family: Family, centre: tuple[float, float], settings: OutlierSettings
) -> Outlier | None:
    median, mad = centre
    sign = 1.0 if family.higher_is_better else -1.0
    percent_worse = sign * (median - figure.value) / median * 100.0
    z = None if mad == 0 else MODIFIED_Z_FACTOR * (figure.value - median) / mad
    z_flagged = z is not None and sign * z <= -settings.z_threshold
    if percent_worse >= settings.replace_percent:
        level = "replace"
    elif percent_worse >= settings.warn_percent or z_flagged:
        level = "warn"
    else:
        return None
    return Outlier(host, family.name, figure.value, family.unit, figure.where, median, z, percent_worse, level)
