"""One nvlink item's verdict as its check made it, read from the item's pytest report (a plain object).

The verdict travels in the report's ``user_properties`` (so it survives pytest-xdist); nothing here is
scraped from pytest's text, and nothing imports pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from pytest_nvlink.model import CollectiveMeasurement
from pytest_nvlink.record.audit import UNJUDGED

# Properties the plugin adds to every verdict's own ones (plugin._record), kept out of ``properties``.
RUN_PROPERTIES: frozenset[str] = frozenset({"suite", "source", "outcome", "message"})
IMPROVED_PROPERTY = "baseline_improved"  # judges.baseline's note of a figure better than the baseline


@dataclass
class ItemResult:
    """One nvlink-marked item: its verdict as recorded, and what pytest made of it."""

    nodeid: str
    check: str  # the check function: "test_p2p_unidirectional"
    area: str  # the check module: "bandwidth" (nvlink/test_bandwidth.py)
    outcome: str  # a verdict Outcome value, or "unjudged"
    pytest_outcome: str  # "passed" | "failed" | "skipped" | "error"
    message: str
    properties: dict[str, str] = field(default_factory=dict)
    # Every baseline improvement the verdict noted: one item (a GPU pair) can improve on several figures,
    # where ``properties`` keeps one value per name.
    improvements: list[str] = field(default_factory=list)
    # A per-source item (``gpu17->*``): every pair's verdict (src, dst, outcome, message, measured, expected,
    # unit) in a run that writes the JSON or HTML report, else only the pairs of a group that did not pass;
    # None for an item judging one GPU or pair, or a passing group in a run that writes neither.
    pairs: list[dict[str, Any]] | None = None

    @property
    def failed(self) -> bool:
        return self.pytest_outcome in ("failed", "error")


def pair_outcomes(items: Iterable[ItemResult], check: str) -> dict[tuple[int, int], str]:
    """Each ordered pair's verdict outcome under ``check``: a per-pair item's own (its ``gpu_src``/``gpu_dst``),
    or the pair records a per-source item carries; a pair with no verdict in the record is absent."""
    found: dict[tuple[int, int], str] = {}
    for item in items:
        if item.check != check:
            continue
        if item.pairs is not None:
            found.update(((int(pair["src"]), int(pair["dst"])), str(pair["outcome"])) for pair in item.pairs)
        elif "worst_pair" not in item.properties and "gpu_src" in item.properties and "gpu_dst" in item.properties:
            found[(int(item.properties["gpu_src"]), int(item.properties["gpu_dst"]))] = item.outcome
    return found


COLLECTIVE_CHECK = "test_collective_busbw"


def collective_outcomes(measurements: Sequence[CollectiveMeasurement], items: Iterable[ItemResult]) -> dict[int, str]:
    """``id(row)`` -> its verdict's outcome, for each collective row a verdict judged; other rows are absent.

    The row is the one the verdict's own properties describe (operation by its threshold key, size, ranks,
    time, algbw, data check), so the table marks the verdict's row and never picks one itself.
    """
    found: dict[int, str] = {}
    for item in items:
        props = item.properties
        if item.check != COLLECTIVE_CHECK or "size_bytes" not in props:
            continue
        described = (
            props["size_bytes"],
            props.get("world_size"),
            props.get("time_us"),
            props.get("algbw_gbps"),
            props.get("correct"),
        )
        for m in measurements:
            key = f"collectives.{m.op}.busbw_min_gbps"
            row = (str(m.size_bytes), str(m.world_size), str(m.time_us), str(m.algbw_gbps), str(m.correct))
            if props.get("threshold_key") == key and row == described:
                found[id(m)] = item.outcome
                break  # rows alike in every recorded field: the verdict's is the first of them
    return found


def check_name(nodeid: str) -> str:
    return nodeid.rsplit("::", maxsplit=1)[-1].split("[", maxsplit=1)[0]


def area_of(nodeid: str) -> str:
    module = nodeid.split("::", maxsplit=1)[0].rsplit("/", 1)[-1]
    return module.removesuffix(".py").removeprefix("test_")


@dataclass
class ItemLog:
    """Every nvlink item's result by node id, fed with pytest's reports as they arrive."""

    items: dict[str, ItemResult] = field(default_factory=dict)

    def add(self, report: Any) -> None:
        """Take one TestReport; only the call, or a setup that failed or skipped (the call never ran), counts."""
        if "nvlink" not in getattr(report, "keywords", {}):
            return
        when = getattr(report, "when", None)
        if when == "call" or (when == "setup" and not getattr(report, "passed", False)):
            self.items[str(report.nodeid)] = item_result(report)

    def add_all(self, stats: Mapping[str, Sequence[Any]]) -> ItemLog:
        for reports in stats.values():
            for report in reports:
                self.add(report)
        return self

    def results(self) -> list[ItemResult]:
        return list(self.items.values())


def item_result(report: Any) -> ItemResult:
    nodeid = str(report.nodeid)
    props = text_properties(getattr(report, "user_properties", []))
    recorded = dict(props)  # a later value wins, as for a verdict judged twice
    outcome = recorded.get("outcome", UNJUDGED)
    message = recorded.get("message") or _crash_line(report)
    improved = IMPROVED_PROPERTY in recorded
    return ItemResult(
        nodeid=nodeid,
        check=check_name(nodeid),
        area=area_of(nodeid),
        outcome=outcome,
        pytest_outcome=_pytest_outcome(report),
        message=message,
        properties={k: v for k, v in props if k not in RUN_PROPERTIES},
        improvements=list(dict.fromkeys(v for k, v in props if k == IMPROVED_PROPERTY)) if improved else [],
        pairs=getattr(report, "nvlink_pairs", None),
    )


def text_properties(properties: Sequence[tuple[Any, Any]]) -> Sequence[tuple[str, str]]:
    """A report's ``user_properties`` as text: as they are when every name and value is a str (ours are)."""
    if {*map(type, chain.from_iterable(properties))} <= _STR:
        return properties
    return [(str(name), str(value)) for name, value in properties]


_STR = frozenset({str})


def _pytest_outcome(report: Any) -> str:
    outcome = str(getattr(report, "outcome", "failed"))
    return "error" if getattr(report, "when", None) == "setup" and outcome == "failed" else outcome


def _crash_line(report: Any) -> str:
    """Why an item without a verdict ended as it did (a setup error, a check that never judged)."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = str(getattr(crash, "message", "") or getattr(report, "longreprtext", ""))
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line.removeprefix("Failed: ").removeprefix("Skipped: ")
