"""What the plugin's modules and the shipped checks share: the session's run, its keys, the check kit.

Kept apart from the hooks (:mod:`pytest_nvlink.plugin`) so that the collection modules and the checks
import it without importing the hooks back: no import cycle inside the plugin.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, NoReturn

import pytest

if TYPE_CHECKING:
    from pytest_nvlink.judges.context import Context
    from pytest_nvlink.model.figures import MeasurementProvider
    from pytest_nvlink.record.run import Given, Run
    from pytest_nvlink.verdict import Outcome, Verdict

CHECKS_DIR = Path(__file__).resolve().parents[1] / "checks"
RUN_KEY = pytest.StashKey["Run"]()


def run_of(config: pytest.Config) -> Run | None:
    """The run of this pytest session; None without --nvlink-suite, before it is built, or once let go."""
    return config.stash.get(RUN_KEY, None)


def unknown_is(source: str) -> Outcome:
    """What a judge's UNKNOWN verdict counts as in a run of ``source`` (``Node.source``), decided here only:
    "no evidence" when the run judges evidence files (a failure unless --nvlink-evidence-missing=skip), else
    a failure. The judges never read the source; the plugin resolves their verdicts with this."""
    from pytest_nvlink.verdict import Outcome

    return Outcome.NO_EVIDENCE if source == "evidence" else Outcome.FAIL


# The sessions running in this process, innermost last (pytester runs one inside another). The session
# fixtures read their config here: pytest resolves a cached fixture's arguments again for every item, and
# builds ``request`` (under ``pytestconfig`` too) anew each time, a cost per item that these do not pay.
SESSIONS: list[pytest.Session] = []


def current_session() -> pytest.Session:
    if not SESSIONS:
        pytest.fail("pytest-nvlink fixtures are used outside a pytest session", pytrace=False)
    return SESSIONS[-1]


NEED_SUITE = "pytest-nvlink fixtures need --nvlink-suite=NAME|PATH|auto"


def not_parametrized(name: str) -> NoReturn:
    """The body of a fixture a run parametrizes directly (_parametrize), reached only when it did not.

    Direct parametrization replaces the fixture's function, so the function asks for no ``request``
    (which would stay in every item's closure, built anew per item) and never reads ``request.param``.
    """
    if run_of(current_session().config) is None:
        pytest.fail(NEED_SUITE, pytrace=False)
    pytest.fail(f"{name} takes its values from the suite only as an argument of a test function", pytrace=False)


class CheckKit(NamedTuple):
    """What a shipped check reads: the judges' context, the session's measurements and the judge."""

    context: Context
    measurements: MeasurementProvider
    judge: Callable[[Verdict], None]


def given_setting(config: pytest.Config, name: str) -> Given | None:
    """Setting ``name`` ("pair-mode") from the command line, else the ini file; None when not given."""
    from pytest_nvlink.record.run import Given

    dest = "nvlink_" + name.replace("-", "_")
    value = config.getoption(dest, default=None)
    if value is not None:
        return Given(str(value), f"--nvlink-{name}")
    value = config.getini(dest)
    return None if value is None else Given(str(value), _ini_label(config, dest))


def _ini_label(config: pytest.Config, key: str) -> str:
    return f"{config.inipath.name}:{key}" if config.inipath else key


def evidence_given(config: pytest.Config) -> list[Given]:
    from pytest_nvlink.record.run import Given

    given = config.getoption("nvlink_evidence")
    if given:
        return [Given(str(value), "--nvlink-evidence") for value in given]
    return [Given(str(path), _ini_label(config, "nvlink_evidence")) for path in config.getini("nvlink_evidence")]


def baseline_any_label(config: pytest.Config) -> str | None:
    """How --nvlink-baseline-any was given (the option, or the ini key), or None when it was not."""
    if config.getoption("nvlink_baseline_any"):
        return "--nvlink-baseline-any"
    return _ini_label(config, "nvlink_baseline_any") if config.getini("nvlink_baseline_any") else None
