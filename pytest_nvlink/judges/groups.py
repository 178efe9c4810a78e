"""One verdict for every pair of one source GPU, from the per-pair verdicts the judges give.

Above a few dozen GPUs one test item per pair is noise to a person (a 72-GPU domain has 5,112
ordered pairs per check), so a source GPU's pairs are judged together: each pair by the same
judge as a per-pair item, the group passing only when every pair passes. A failure names each
failing peer with its own sentence and the worst figure; the group is "does not apply" only when
every pair is waived or excused for the same explicit reason; any other mixture fails (fail
closed). The per-pair verdicts travel with the group into the results record.

A pair the judge could not tell about (UNKNOWN) counts as the run's plugin says (``PairSet.unknown_is``:
a failure, or "no evidence" when judging files) before the group ranks it, as one item per pair would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_nvlink.model import pair_id
from pytest_nvlink.verdict import Outcome, Verdict, resolved

Pair = tuple[int, int]
FAILURES_NAMED = 8  # failing peers spelled out in the message; the rest are counted (all are in the record)
# A judge's quick pass over a group: each pair's ranking figure (None: the pass has none) when every pair
# surely passes the judge, or None when one might not (the group is then judged pair by pair).
AllPass = Callable[[Sequence[Pair]], "list[float | None] | None"]


@dataclass(frozen=True)
class PairSet:
    """The pairs one test item judges: one pair (per-pair items) or every pair of one source GPU."""

    pairs: tuple[Pair, ...]
    ordered: bool
    grouped: bool  # True: a per-source item (``gpu17->*``), False: one pair
    suite_file: str = ""  # where [suite] pair_items is set, named when a group fails for mixed outcomes
    unknown_is: Outcome = Outcome.FAIL  # what a pair's UNKNOWN verdict counts as: FAIL, or NO_EVIDENCE (files)

    @property
    def source(self) -> int:
        return self.pairs[0][0]

    @property
    def label(self) -> str:
        """The item's parameter id: ``gpu0-gpu1`` for one pair, ``gpu17->*`` / ``gpu17-*`` for a source."""
        if not self.grouped:
            return pair_id(*self.pairs[0])
        return f"gpu{self.source}{'->' if self.ordered else '-'}*"

    def verdict(self, judge: Callable[[int, int], Verdict], all_pass: AllPass | None = None) -> Verdict:
        """The one pair's verdict, or the group's verdict over every pair.

        ``all_pass`` is the judge's own pass test run over the whole group in one loop: when it says every
        pair passes, only the worst pair's verdict is worked out at once, the others when the results
        record reads them; any doubt, and every pair is judged one by one.
        """
        if not self.grouped:
            return resolved(judge(*self.pairs[0]), self.unknown_is)
        if all_pass is not None:
            figures = all_pass(self.pairs)
            quick = None if figures is None else _passed_together(self, judge, figures)
            if quick is not None:
                return quick
        return combine(self, [(pair, judge(*pair)) for pair in self.pairs])


@dataclass(eq=False)
class GroupVerdict(Verdict):
    """A source GPU's verdict, with every pair's verdict for the results record.

    A quickly passed group (``later``) judges its pairs when ``pairs`` is first read. The pairs
    count in equality, and ``dataclasses.replace`` keeps them (or the promise of them).
    """

    _pairs: list[tuple[Pair, Verdict]] | None = field(default=None, repr=False)
    later: Callable[[], list[tuple[Pair, Verdict]]] | None = field(default=None, repr=False)

    @property
    def pairs(self) -> list[tuple[Pair, Verdict]]:
        if self._pairs is None:
            self._pairs, self.later = (self.later() if self.later is not None else []), None
        return self._pairs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupVerdict):
            return NotImplemented
        mine, theirs = (self.outcome, self.message, self.properties), (other.outcome, other.message, other.properties)
        return mine == theirs and self.pairs == other.pairs

    __hash__ = None  # type: ignore[assignment]  # mutable, as Verdict

    def __reduce__(self) -> tuple[type[GroupVerdict], tuple[Any, ...]]:
        # Copied or pickled with every pair judged, as a group judged pair by pair: not the judge behind them.
        return GroupVerdict, (self.outcome, self.message, list(self.properties), list(self.pairs))


def _passed_together(
    group: PairSet, judge: Callable[[int, int], Verdict], figures: list[float | None]
) -> Verdict | None:
    """The passing group's verdict, as combine() words it, judging only its worst pair now; None if that
    pair's own verdict disagrees with the quick pass (then every pair is judged)."""
    if not figures or len(figures) != len(group.pairs):
        return None
    ranked = [(figure, at) for at, figure in enumerate(figures) if figure is not None]
    at = min(ranked)[1] if ranked else 0  # the first of equally bad pairs, as _worst() picks it
    worst_pair, worst = group.pairs[at], judge(*group.pairs[at])
    if worst.outcome is not Outcome.PASS or _badness(worst) != figures[at]:
        return None
    message = f"{_peers(group)}: all {len(figures)} pairs pass; worst {_named(group, worst_pair, worst.message)}"
    everyone = functools.partial(_judged_one_by_one, group, judge)
    return GroupVerdict(Outcome.PASS, message, _group_properties(worst_pair, worst, []), later=everyone)


def _judged_one_by_one(group: PairSet, judge: Callable[[int, int], Verdict]) -> list[tuple[Pair, Verdict]]:
    return [(pair, resolved(judge(*pair), group.unknown_is)) for pair in group.pairs]


def _arrow(group: PairSet, pair: Pair) -> str:
    return f"GPU {pair[0]} {'->' if group.ordered else '<->'} GPU {pair[1]}"


def _named(group: PairSet, pair: Pair, message: str) -> str:
    """A pair's sentence led by the pair, unless the judge's sentence already starts with it."""
    arrow = _arrow(group, pair)
    return message if message.startswith(arrow) else f"{arrow}: {message}"


def _peers(group: PairSet) -> str:
    return f"GPU {group.source} {'->' if group.ordered else 'and'} {len(group.pairs)} peer(s)"


def combine(group: PairSet, verdicts: Sequence[tuple[Pair, Verdict]]) -> GroupVerdict:
    """Pass when every pair passes; otherwise fail naming each pair that did not, unless all are excused alike.

    Each UNKNOWN pair is first resolved as ``group.unknown_is`` says, so it ranks as its own item would.
    """
    results = [(pair, resolved(verdict, group.unknown_is)) for pair, verdict in verdicts]
    if not results:
        return GroupVerdict(Outcome.FAIL, f"{_peers(group)}: no pair was judged", [], results)
    outcomes = {verdict.outcome for _, verdict in results}
    if outcomes == {Outcome.PASS}:
        worst_pair, worst = _worst(results)
        message = f"{_peers(group)}: all {len(results)} pairs pass; worst {_named(group, worst_pair, worst.message)}"
        return GroupVerdict(Outcome.PASS, message, _group_properties(worst_pair, worst, []), results)
    failing = [(pair, v) for pair, v in results if v.outcome is Outcome.FAIL]
    if failing:
        return _failed(group, results, failing)
    if outcomes == {Outcome.NO_EVIDENCE}:
        first_pair, first = results[0]
        message = f"{_peers(group)}: no pair has evidence; e.g. {_named(group, first_pair, first.message)}"
        return GroupVerdict(Outcome.NO_EVIDENCE, message, list(first.properties), results)
    excused = _common_excuse(results)
    if excused is not None:
        return GroupVerdict(Outcome.NOT_APPLICABLE, excused.message, list(excused.properties), results)
    return _mixed(group, results)


def _common_excuse(results: list[tuple[Pair, Verdict]]) -> Verdict | None:
    """The one not-applicable verdict every pair shares (same waiver, or same sentence), else None."""
    if any(verdict.outcome is not Outcome.NOT_APPLICABLE for _, verdict in results):
        return None
    reasons = {_excuse(verdict) for _, verdict in results}
    return results[0][1] if len(reasons) == 1 else None


def _excuse(verdict: Verdict) -> str:
    props = dict(verdict.properties)
    if "waived_key" in props:
        return f"waived {props['waived_key']}: {props.get('waiver_reason', '')}"
    return verdict.message


def _failed(group: PairSet, results: list[tuple[Pair, Verdict]], failing: list[tuple[Pair, Verdict]]) -> GroupVerdict:
    worst_pair, worst = _worst(failing)
    named = "; ".join(_named(group, pair, verdict.message) for pair, verdict in failing[:FAILURES_NAMED])
    more = f"; and {len(failing) - FAILURES_NAMED} more failing pair(s)" if len(failing) > FAILURES_NAMED else ""
    others = _other_outcomes(results)
    message = (
        f"{_peers(group)}: {len(failing)} of {len(results)} pair(s) fail (worst {_arrow(group, worst_pair)}, "
        f"measured {dict(worst.properties).get('measured', 'unknown')}): {named}{more}{others}"
    )
    failing_ids = [pair_id(*pair) for pair, _ in failing]
    return GroupVerdict(Outcome.FAIL, message, _group_properties(worst_pair, worst, failing_ids), results)


def _mixed(group: PairSet, results: list[tuple[Pair, Verdict]]) -> GroupVerdict:
    """Passes mixed with excused or unevidenced pairs: a group item cannot say both, so it fails."""
    odd = [(pair, v) for pair, v in results if v.outcome is not Outcome.PASS]
    first = odd[0][1]
    named = "; ".join(f"{v.outcome.value}: {_named(group, pair, v.message)}" for pair, v in odd[:FAILURES_NAMED])
    message = (
        f"{_peers(group)}: mixed outcomes ({_counts(results)}), and a per-source item passes only when every pair "
        f'passes: {named}; judge these pairs one by one with [suite] pair_items = "pair"'
    )
    props = [p for p in first.properties if p[0] not in ("measured", "expected", "unit")]
    props += [("measured", _counts(results)), ("expected", "every pair passes"), ("unit", "pairs")]
    if not any(name in ("threshold_key", "suite_key") for name, _ in props):
        props += [("suite_key", "suite.pair_items"), ("suite_file", group.suite_file)]
    props.append(("failing_pairs", ", ".join(pair_id(*pair) for pair, _ in odd)))
    return GroupVerdict(Outcome.FAIL, message, props, results)


def _counts(results: list[tuple[Pair, Verdict]]) -> str:
    tally: dict[str, int] = {}
    for _, verdict in results:
        tally[verdict.outcome.value] = tally.get(verdict.outcome.value, 0) + 1
    return ", ".join(f"{count} {outcome}" for outcome, count in tally.items())


def _other_outcomes(results: list[tuple[Pair, Verdict]]) -> str:
    others = [v for _, v in results if v.outcome not in (Outcome.PASS, Outcome.FAIL)]
    return f" ({_counts([((0, 0), v) for v in others])} among the others)" if others else ""


def _group_properties(pair: Pair, verdict: Verdict, failing: list[str]) -> list[tuple[str, str]]:
    """The worst pair's figures and expectation, naming it and every failing pair."""
    props = [*verdict.properties, ("worst_pair", pair_id(*pair))]
    if failing:
        props.append(("failing_pairs", ", ".join(failing)))
    return props


def _worst(results: list[tuple[Pair, Verdict]]) -> tuple[Pair, Verdict]:
    """The pair whose figure is furthest on the wrong side: lowest against a floor, highest against a ceiling."""
    ranked = [(key, pair, v) for pair, v in results if (key := _badness(v)) is not None]
    if not ranked:
        return results[0]
    _, pair, verdict = min(ranked, key=lambda entry: entry[0])
    return pair, verdict


def _figure(verdict: Verdict) -> tuple[str | None, str | None, str | None]:
    """The verdict's (measured, expected, unit), where it states them."""
    props = verdict.properties
    # measured_properties() puts them first, in this order: most verdicts need no dict built.
    if len(props) >= 3 and props[0][0] == "measured" and props[1][0] == "expected" and props[2][0] == "unit":
        return props[0][1], props[1][1], props[2][1]
    named = dict(props)
    return named.get("measured"), named.get("expected"), named.get("unit")


def _badness(verdict: Verdict) -> float | None:
    """Smaller is worse; None when the judge gave the verdict no figure with a direction (Verdict.badness)."""
    return verdict.badness


def pair_records(verdict: Verdict, every: bool = True) -> list[dict[str, object]] | None:
    """The per-pair verdicts of a group verdict as plain data for the results record; None for one pair.

    ``every=False`` keeps only a group's pairs that did not pass, and nothing of a passing group: what the
    terminal marks, without writing the words of thousands of passing pairs.
    """
    if not every and verdict.outcome is type(verdict.outcome).PASS:
        return None
    # Duck-typed: pytester's in-process runs re-import this module, so isinstance would miss.
    pairs: list[tuple[Pair, Verdict]] | None = getattr(verdict, "pairs", None)
    if pairs is None:
        return None
    return [_pair_record(pair, v) for pair, v in pairs if every or v.outcome is not type(v.outcome).PASS]


def _pair_record(pair: Pair, verdict: Verdict) -> dict[str, object]:
    record: dict[str, object] = {"src": pair[0], "dst": pair[1], "outcome": verdict.outcome.value}
    record["message"] = verdict.message
    for name, value in zip(("measured", "expected", "unit"), _figure(verdict), strict=True):
        if value is not None:
            record[name] = value
    return record
