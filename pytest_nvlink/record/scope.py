"""How much of the suite a run judged: its full set of nvlink checks, and what it left out and why.

A run that judged only part of the suite proves nothing about the rest, so no output of it may say
PASS: the checks a ``-k``/``-m``/``--deselect``/``--lf`` selection left out, those never run after
``-x``/``--maxfail`` stopped the session, and those an interruption (Ctrl-C, SIGTERM) cut off are
counted here, by check, for every renderer. The plugin feeds it node ids (plain strings), so this
module needs no pytest import.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_nvlink.record.items import check_name

PARTIAL, INTERRUPTED = "PARTIAL", "INTERRUPTED"
CHECKS_NAMED = 4  # a line names the checks most left out; the JSON names them all


@dataclass(frozen=True)
class Interruption:
    """The run was stopped from outside: by which signal, and the check running then (None: between checks)."""

    by: str  # "SIGINT (Ctrl-C)" | "SIGTERM" | "pytest.exit"
    during: str | None


@dataclass
class RunScope:
    """The suite's full set of nvlink checks for this run, and the node ids left out of it, by reason."""

    full: int = 0
    deselected: list[str] = field(default_factory=list)  # by -k, -m, --deselect or --lf
    not_run: list[str] = field(default_factory=list)  # selected, never run: -x/--maxfail, or an interruption
    stopped_by: str | None = None  # pytest's own reason for stopping early ("stopping after 1 failures")
    modules_skipped: int = 0  # whole check modules --lf did not collect (their checks cannot be counted)
    interrupted: Interruption | None = None

    @property
    def complete(self) -> bool:
        return not (self.deselected or self.not_run or self.modules_skipped or self.interrupted)

    @property
    def verdict(self) -> str | None:
        """INTERRUPTED, PARTIAL, or None for a complete run (whose verdict is its checks')."""
        if self.interrupted is not None:
            return INTERRUPTED
        return None if self.complete else PARTIAL

    @property
    def ran(self) -> int:
        return max(self.full - len(self.deselected) - len(self.not_run), 0)

    def line(self) -> str:
        """``PARTIAL run: 12 of 372 nvlink checks ran; left out: 360 deselected (...)``; '' for a complete run."""
        if self.complete:
            return ""
        parts = []
        if self.deselected:
            parts.append(f"{len(self.deselected)} deselected by -k/-m/--deselect/--lf ({_by_check(self.deselected)})")
        if self.modules_skipped:
            parts.append(f"{self.modules_skipped} check module(s) not collected by --lf")
        if self.not_run:
            why = self._not_run_reason()
            parts.append(f"{len(self.not_run)} not run ({why}: {_by_check(self.not_run)})")
        of = f"{self.ran} of {self.full}" + (" or more" if self.modules_skipped else "")
        head = f"{self.verdict} run: {of} nvlink checks ran"
        if self.interrupted is not None:
            where = f"during {self.interrupted.during}" if self.interrupted.during else "between checks"
            head += f"; interrupted by {self.interrupted.by} {where}"
        return head + ("; left out: " + "; ".join(parts) if parts else "")

    def _not_run_reason(self) -> str:
        if self.interrupted is not None:
            return f"interrupted by {self.interrupted.by}"
        return self.stopped_by or "the session stopped early (-x/--maxfail)"

    def document(self) -> dict[str, Any] | None:
        """The results JSON's ``left_out``; None for a complete run (the key is then absent)."""
        if self.complete:
            return None
        interrupted = self.interrupted
        return {
            "full_set": self.full,
            "ran": self.ran,
            "deselected": dict(_counts(self.deselected)),
            "not_run": dict(_counts(self.not_run)),
            "not_run_reason": self._not_run_reason() if self.not_run else None,
            "modules_not_collected": self.modules_skipped,
            "interrupted": None if interrupted is None else {"by": interrupted.by, "during": interrupted.during},
            "line": self.line(),
        }


def _counts(nodeids: Iterable[str]) -> list[tuple[str, int]]:
    return Counter(check_name(nodeid) for nodeid in nodeids).most_common()


def _by_check(nodeids: list[str]) -> str:
    counts = _counts(nodeids)
    shown = ", ".join(f"{check} x{count}" for check, count in counts[:CHECKS_NAMED])
    return shown + (f" and {len(counts) - CHECKS_NAMED} more checks" if len(counts) > CHECKS_NAMED else "")


def scope_verdict(verdict: str, scope: RunScope | None) -> str:
    """The run's verdict once its scope is known: an interruption is said first; a failure stays FAIL;
    a run of part of the suite is never PASS (nor INCOMPLETE, which would hide why)."""
    if scope is None or scope.complete:
        return verdict
    if scope.interrupted is not None:
        return INTERRUPTED
    return verdict if verdict == "FAIL" else PARTIAL
