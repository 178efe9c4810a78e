"""The outcome of one check, independent of pytest: pass, fail or not-applicable, with evidence.

Checks build a :class:`Verdict`; the plugin turns it into a pass, ``pytest.fail`` or
``pytest.skip`` and copies its properties into the JUnit report. A judge that cannot tell says
UNKNOWN (:func:`unknown`), from the node's facts alone; what an unknown counts as in a run (a
failure, or "no evidence" when judging files) is decided once by the plugin and applied with
:func:`resolved` before anything records the verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from pytest_nvlink.config.thresholds import Threshold, Waiver


class Outcome(Enum):
    PASS = "pass"  # noqa: S105 - an outcome name, not a secret
    FAIL = "fail"
    NOT_APPLICABLE = "not_applicable"  # the suite says this check does not apply
    NO_EVIDENCE = "no_evidence"  # evidence files do not cover it; fails unless the user allows skips
    # A fact the source could not give; never recorded: resolved() turns it into FAIL or NO_EVIDENCE first.
    UNKNOWN = "unknown"


@dataclass
class Verdict:
    """A check's outcome, its one sentence, and the properties its JUnit case carries.

    ``badness`` is the verdict's figure as a group ranks pairs by it (smaller is worse: the figure against a
    floor, its negative against a ceiling), set by the judge that compared it; None where the verdict has no
    figure with a direction. It is data for the judges, not a JUnit property, and leaves equality alone.
    """

    outcome: Outcome
    message: str
    properties: list[tuple[str, str]] = field(default_factory=list)
    badness: float | None = field(default=None, compare=False, kw_only=True)

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.PASS


Words = Callable[[], tuple[str, list[tuple[str, str]]]]


class PassedLater(Verdict):
    """A pass whose sentence and properties are written the first time anything reads them.

    A 72-GPU domain judges about 30,000 pairs per run and nearly all pass; a per-source item shows
    only its worst pair's words, so writing the others' costs most of the judging. The outcome is
    decided before this is built; ``badness`` is the figure the group ranks pairs by (as Verdict's),
    None where the pass has no figure.
    """

    def __init__(
        self,
        words: Words | None = None,
        badness: float | None = None,
        *,
        outcome: Outcome = Outcome.PASS,
        message: str = "",
        properties: list[tuple[str, str]] | None = None,
    ) -> None:
        # The keywords are Verdict's fields, so that dataclasses.replace() works on one of these too.
        self.outcome = outcome
        self.badness = badness
        self._words: Words | None = words
        self._written: tuple[str, list[tuple[str, str]]] = (message, properties if properties is not None else [])

    def __reduce__(self) -> tuple[Callable[..., Verdict], tuple[Outcome, str, list[tuple[str, str]], float | None]]:
        # Copied or pickled as the plain Verdict it reads as, without the judge's context behind its words.
        return _plain_verdict, (self.outcome, self.message, list(self.properties), self.badness)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Verdict):
            return NotImplemented
        return (self.outcome, self.message, self.properties) == (other.outcome, other.message, other.properties)

    __hash__ = None  # type: ignore[assignment]  # mutable, as Verdict

    def _write(self) -> tuple[str, list[tuple[str, str]]]:
        if self._words is not None:
            self._written, self._words = self._words(), None
        return self._written

    @property  # Verdict's field, written on first read
    def message(self) -> str:
        return self._write()[0]

    @message.setter
    def message(self, value: str) -> None:
        self._written, self._words = (value, self._write()[1]), None

    @property
    def properties(self) -> list[tuple[str, str]]:
        return self._write()[1]

    @properties.setter
    def properties(self, value: list[tuple[str, str]]) -> None:
        self._written, self._words = (self._write()[0], value), None


def _plain_verdict(outcome: Outcome, message: str, properties: list[tuple[str, str]], badness: float | None) -> Verdict:
    return Verdict(outcome, message, properties, badness=badness)


# What every failing JUnit test case carries: the figures, and where the expectation comes from.
REQUIRED_ON_FAILURE: tuple[str, ...] = ("measured", "expected", "unit")
EXPECTATION_KEYS: tuple[tuple[str, str], ...] = (
    ("threshold_key", "threshold_file"),
    ("suite_key", "suite_file"),
    ("baseline_key", "baseline_file"),  # a fact that must equal the node's own earlier run (--nvlink-baseline)
)


def measured_properties(
    measured: object,
    expected: str,
    unit: str,
    threshold: Threshold | None = None,
    suite: tuple[Path, str] | None = None,
) -> list[tuple[str, str]]:
    """The JUnit properties of a verdict; ``suite`` is (suite file, key) when the suite sets the expectation."""
    props = [("measured", _text(measured)), ("expected", expected), ("unit", unit)]
    if threshold is not None:
        props += [("threshold_key", threshold.key), ("threshold_file", str(threshold.file))]
    if suite is not None:
        props += suite_key_properties(*suite)
    return props


def suite_key_properties(file: Path, key: str) -> list[tuple[str, str]]:
    return [("suite_key", key), ("suite_file", str(file))]


def missing_report_properties(props: list[tuple[str, str]]) -> list[str]:
    """The names a failing verdict lacks of ``measured``, ``expected``, ``unit`` and a threshold or suite key."""
    names = {name for name, _ in props}
    missing = [name for name in REQUIRED_ON_FAILURE if name not in names]
    if not any(key in names and file in names for key, file in EXPECTATION_KEYS):
        missing.append("threshold_key/threshold_file or suite_key/suite_file")
    return missing


def _text(value: object) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def passed(message: str, props: list[tuple[str, str]], badness: float | None = None) -> Verdict:
    return Verdict(Outcome.PASS, message, props, badness=badness)


def failed(message: str, props: list[tuple[str, str]], badness: float | None = None) -> Verdict:
    return Verdict(Outcome.FAIL, message, props, badness=badness)


def not_applicable(message: str) -> Verdict:
    return Verdict(Outcome.NOT_APPLICABLE, message)


def waived(waiver: Waiver) -> Verdict:
    """Not applicable because a threshold or site file waives the key the check needs, with its reason."""
    return Verdict(
        Outcome.NOT_APPLICABLE,
        f"waived by {waiver.where()}: {waiver.reason}",
        [("waived_key", waiver.key), ("waiver_file", str(waiver.file)), ("waiver_reason", waiver.reason)],
    )


@dataclass
class Unknown(Verdict):
    """An UNKNOWN verdict: what could not be determined and why, worded only when it is resolved.

    ``failure`` is the sentence it reads as when it counts as a failure, where that is not the usual
    "could not determine {what}: {reason}"; ``reason`` None: the "no evidence" sentence names ``what`` only.
    """

    what: str = ""
    reason: str | None = None
    failure: str | None = None


def unknown(what: str, reason: str | None, props: list[tuple[str, str]], *, failure: str | None = None) -> Verdict:
    """A fact the source could not give: UNKNOWN, whichever source it is (see :func:`resolved`)."""
    message = f"{what} unknown" + (f": {reason}" if reason is not None else "")
    return Unknown(Outcome.UNKNOWN, message, props, what=what, reason=reason, failure=failure)


def resolved(verdict: Verdict, unknown_is: Outcome) -> Verdict:
    """``verdict``, or for an UNKNOWN one what it counts as in this run: ``unknown_is`` is FAIL or NO_EVIDENCE.

    Any other verdict is returned as it is. Outcomes are compared by value and the answer's taken from the
    verdict's own enum: pytester's in-process runs re-import these modules.
    """
    if verdict.outcome.value != Outcome.UNKNOWN.value:
        return verdict
    outcomes = type(verdict.outcome)
    what = getattr(verdict, "what", "") or verdict.message
    reason: str | None = getattr(verdict, "reason", None)
    props, because = list(verdict.properties), (f": {reason}" if reason is not None else "")
    if unknown_is.value == Outcome.NO_EVIDENCE.value:
        return Verdict(outcomes.NO_EVIDENCE, f"no evidence for {what}{because}", props)
    if unknown_is.value != Outcome.FAIL.value:
        raise ValueError(f"an unknown counts as a failure or as no evidence, not {unknown_is.value}")
    failure: str | None = getattr(verdict, "failure", None)
    return Verdict(outcomes.FAIL, failure or f"could not determine {what}{because}", props)
