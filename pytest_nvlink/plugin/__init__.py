"""pytest adapter for pytest-nvlink: options, collection of the shipped checks, fixtures, reports.

Inert unless ``--nvlink-suite`` (or the ``nvlink_suite`` ini key) is given: no probe, no torch
or pynvml import, no extra tests. Everything that is not pytest glue lives in other modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_nvlink.plugin.kit import (
    CHECKS_DIR,
    NEED_SUITE,
    RUN_KEY,
    SESSIONS,
    CheckKit,
    baseline_any_label,
    current_session,
    evidence_given,
    given_setting,
    not_parametrized,
    run_of,
    unknown_is,
)

if TYPE_CHECKING:
    # Only for annotations: an inert plugin (no --nvlink-suite) must import nothing of its own at start-up.
    from pytest_nvlink.judges.context import Context
    from pytest_nvlink.model import Node
    from pytest_nvlink.model.figures import MeasurementProvider
    from pytest_nvlink.record.run import Given, Run, RunOptions
    from pytest_nvlink.verdict import Verdict

T = TypeVar("T")
# Set in a pytest-xdist worker: its node and measurements came from the controller, complete.
HANDED_OVER_KEY = pytest.StashKey[bool]()
JUDGED_KEY = pytest.StashKey[bool]()  # on an item: nvlink_judge was called
PAIRS_KEY = pytest.StashKey["list[dict[str, object]] | None"]()  # on an item: its per-pair verdicts
CURRENT_ITEM_KEY = pytest.StashKey[pytest.Item]()  # on the config: the item under test, for nvlink_judge
# On the config: the session's one measurement provider and judge, which the fixtures and nvlink_check share.
PROVIDER_KEY = pytest.StashKey["MeasurementProvider"]()
JUDGE_KEY = pytest.StashKey["Callable[[Verdict], None]"]()

_OPTIONS: tuple[tuple[str, str], ...] = (
    ("suite", "suite to accept against: a shipped name, a path to a suite .toml, or 'auto'"),
    ("thresholds", "site threshold .toml laid over the suite's shipped thresholds"),
    ("replay", "judge a saved snapshot JSON instead of probing this machine"),
    ("save", "write the probed node (and measurements) as snapshot JSON to this file"),
    ("evidence-missing", "when evidence files do not cover a check: 'fail' (default) or 'skip'"),
    ("pair-mode", "P2P measurement order: 'serial' (default) or 'concurrent' disjoint pairs"),
    ("backend", "collective backend: 'nccl' (GPUs) or 'gloo' (CPU harness check)"),
    ("json", "write the results (every verdict, the node, the measurements) as versioned JSON to this file"),
    ("report", "write a self-contained HTML report (verdict, failures, topology, heatmaps) to this file"),
    ("metrics", "write the verdict and figures as Prometheus text (node_exporter's textfile collector) to this file"),
    ("baseline", "compare with the node's last known good run: a snapshot, or a --nvlink-save-dir folder"),
    ("save-dir", "also save each run as DIR/<host>/<UTC timestamp>.json (a baseline folder)"),
    ("host", "the host name this run reports (results, JUnit, {host} in output paths); default: the node's"),
)
PLACEHOLDER_HELP = "; {host} and {date} (UTC, 20261203) expand"
_EXPANDING = ("save", "json", "report", "metrics", "save-dir")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The hooks a site implements for its own checks and report sections (``plugin.hookspecs``)."""
    from pytest_nvlink.plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nvlink", "pytest-nvlink: NVLink/P2P acceptance of multi-GPU servers")
    for name, help_text in _OPTIONS:
        dest = "nvlink_" + name.replace("-", "_")
        shown = help_text + (PLACEHOLDER_HELP if name in _EXPANDING else "")
        group.addoption(f"--nvlink-{name}", dest=dest, default=None, help=f"{shown} (ini: {dest})")
        parser.addini(dest, help_text, type="string", default=None)
    flags = (
        (
            "quick",
            "health check for Slurm prologs and NHC: facts only (inventory, links, paths, P2P status, fabric), "
            "nothing measured, one line per failure",
        ),
        ("baseline-any", "take a --nvlink-baseline file even when the run that saved it failed or was partial"),
    )
    for name, help_text in flags:
        dest = "nvlink_" + name.replace("-", "_")
        group.addoption(
            f"--nvlink-{name}", dest=dest, action="store_true", default=None, help=f"{help_text} (ini: {dest})"
        )
        parser.addini(dest, help_text, type="bool", default=False)
    group.addoption(
        "--nvlink-evidence",
        dest="nvlink_evidence",
        action="append",
        default=[],
        help="judge tool outputs (files or folders) instead of probing; repeatable (ini: nvlink_evidence)",
    )
    parser.addini("nvlink_evidence", "evidence files or folders", type="paths", default=[])
    group.addoption(
        "--nvlink-evidence-exclude",
        dest="nvlink_evidence_exclude",
        action="append",
        metavar="GLOB",
        help="leave files matching GLOB (name or path under the folder) out of evidence folders; repeatable "
        "(ini: nvlink_evidence_exclude)",
    )
    parser.addini("nvlink_evidence_exclude", "globs of files to leave out of evidence folders", type="linelist")
    group.addoption(
        "--nvlink-list-suites",
        dest="nvlink_list_suites",
        action="store_true",
        help="list the shipped suites with one line each and exit",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Append the shipped check modules when a suite is chosen and the user named no paths."""
    namespace = early_config.known_args_namespace
    # Options are not parsed for real yet: the early namespace has the command line, getini the ini file.
    suite = getattr(namespace, "nvlink_suite", None) or early_config.getini("nvlink_suite")
    if getattr(namespace, "nvlink_list_suites", False) or not suite:
        return
    if not namespace.file_or_dir:
        modules = sorted(CHECKS_DIR.glob("test_*.py"))
        if _quick(early_config):
            from pytest_nvlink.plugin.quick_rules import QUICK_MODULES

            modules = [path for path in modules if path.name in QUICK_MODULES]
        args.extend(str(path) for path in modules)


def _quick(config: pytest.Config) -> bool:
    """--nvlink-quick, else the ini key; read from the early namespace before options are parsed for real."""
    given = getattr(config.option, "nvlink_quick", None)
    if given is None:
        given = getattr(config.known_args_namespace, "nvlink_quick", None)
    return bool(config.getini("nvlink_quick") if given is None else given)


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if not config.getoption("nvlink_list_suites"):
        return None
    from pytest_nvlink.config.suites import suite_summaries

    for name, description in suite_summaries():
        print(f"{name:16} {description}")
    return 0


@pytest.hookimpl(tryfirst=True)  # before the junitxml plugin opens --junitxml, whose {host} is expanded here
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "nvlink(area, gate=False): a pytest-nvlink acceptance check; gate=True keeps it when the node cannot be probed",
    )
    if config.getoption("nvlink_suite", default=None) is None and config.getini("nvlink_suite") is None:
        return  # inert: nothing of pytest-nvlink is imported or registered
    from pytest_nvlink.config.values import ConfigError
    from pytest_nvlink.core.gc_pause import keep_out_of_collections
    from pytest_nvlink.plugin.outputs import check_output_templates, start_outputs
    from pytest_nvlink.plugin.run import build_run, read_options
    from pytest_nvlink.plugin.shape import ShapeFilter

    def setting(name: str) -> Given | None:
        return given_setting(config, name)

    try:
        exclude = config.getoption("nvlink_evidence_exclude") or config.getini("nvlink_evidence_exclude")
        options = read_options(
            setting,
            evidence_given(config),
            [str(g) for g in exclude],
            quick=_quick(config),
            baseline_any=baseline_any_label(config),
        )
        if options is None:
            return
        check_output_templates(config, setting)
        run = build_run(*_worker_source(config, options))
        config.stash[RUN_KEY] = run
        # Cleanups run last-first: pytest's own end-of-run collection (registered after this) then skips the node,
        # and the run is let go while still frozen, so neither the unfreeze nor the exit walks the node.
        config.add_cleanup(keep_out_of_collections())
        config.add_cleanup(lambda: _forget_run(config))
        # Hooks that only a run needs are registered here, so the inert plugin adds no call per test.
        config.pluginmanager.register(ShapeFilter(), "nvlink-shape-filter")
        config.pluginmanager.register(_JudgedCheck(), "nvlink-judged-check")
        config.pluginmanager.register(_SessionObjectsFrozen(), "nvlink-session-objects-frozen")
        start_outputs(config, run, setting)
        from pytest_nvlink.plugin.events import start_listening

        start_listening(config, run)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    if run.options.quick:
        from pytest_nvlink.plugin.quick import start_quick

        start_quick(config, run, CHECKS_DIR)
    from pytest_nvlink.plugin import pairs as plugin_pairs

    config.pluginmanager.register(plugin_pairs, "nvlink-pairs")


def _forget_run(config: pytest.Config) -> None:
    del config.stash[RUN_KEY]
    if PROVIDER_KEY in config.stash:  # both hold the run's node
        del config.stash[PROVIDER_KEY]
    if JUDGE_KEY in config.stash:
        del config.stash[JUDGE_KEY]


def _live_probe() -> Node:
    from pytest_nvlink.sources.live.probe import probe_node

    return probe_node()


# --- pytest-xdist: one probe and one measurement campaign per session, in the controller -------


def _worker_source(config: pytest.Config, options: RunOptions) -> tuple[RunOptions, Callable[[], Node]]:
    """A plain run or the xdist controller reads its source; a worker takes the controller's node."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return options, _live_probe
    from pytest_nvlink.config.values import ConfigError
    from pytest_nvlink.model.document import SnapshotError
    from pytest_nvlink.plugin.handover import WORKERINPUT_KEY, node_from_text

    try:
        node = node_from_text(workerinput.get(WORKERINPUT_KEY))
    except SnapshotError as exc:
        raise ConfigError(str(exc)) from None
    config.stash[HANDED_OVER_KEY] = True
    # The controller read the source and saves the snapshot; a worker only judges.
    return dataclasses.replace(options, replay=None, evidence=[], save=None, save_dir=None), lambda: node


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config) -> None:
    """Controller, before any worker starts: measure once what a full run would measure.

    The controller does not collect, so it cannot tell which checks the workers will run; the
    workers never measure (two campaigns on one node would contend for the GPUs).
    """
    run = run_of(config)
    if run is None or run.node.source != "live" or run.probe_failed() or run.options.quick:
        return
    from pytest_nvlink.plugin.live import live_provider

    live_provider(config, run).measure_all()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    run = run_of(node.config)
    if run is not None:
        from pytest_nvlink.plugin.handover import WORKERINPUT_KEY, node_text

        node.workerinput[WORKERINPUT_KEY] = node_text(run.node)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    run = run_of(config)
    if run is None:
        return None
    from pytest_nvlink.record.run import not_collected_note
    from pytest_nvlink.report import header_lines

    note = not_collected_note(run.suite)
    return header_lines(run) + ([f"nvlink: {note}"] if note else [])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = run_of(config)
    if run is None or run.gate_only() is None:
        return
    # Nothing was probed, or no suite fits: the gate check says why in one line, not one failure per GPU and pair.
    dropped = [item for item in items if _uses_node(item) and not _is_gate(item)]
    if dropped:
        from pytest_nvlink.plugin.scope import deselect_own

        deselect_own(config, dropped)
        items[:] = [item for item in items if item not in dropped]


def _uses_node(item: pytest.Item) -> bool:
    return any(name.startswith("nvlink_") for name in getattr(item, "fixturenames", ()))


def _is_gate(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("nvlink")
    return marker is not None and bool(marker.kwargs.get("gate"))


# --- fixtures ---------------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    SESSIONS.append(session)
    session.config.add_cleanup(lambda: SESSIONS.remove(session))


@pytest.fixture(scope="session")
def nvlink_run() -> Run:
    """The acceptance run: options, probed node, suite and resolved thresholds."""
    return _session_run()


def _session_run() -> Run:
    # The fixtures below read the run here rather than through nvlink_run: pytest resolves a fixture's
    # dependencies again for every item that uses it, cached or not, and every shipped check uses three.
    run = run_of(current_session().config)
    if run is None:
        pytest.fail(NEED_SUITE, pytrace=False)
    return run


@pytest.fixture(scope="session")
def nvlink_node() -> Node:
    """The node model (live probe, replayed snapshot or evidence files) the checks judge."""
    return _session_run().node


@pytest.fixture(scope="session")
def nvlink_context() -> Context:
    """Node, suite and thresholds bundled for the verdict functions in ``pytest_nvlink.judges``."""
    return _session_run().context


@pytest.fixture(scope="session")
def nvlink_measurements() -> MeasurementProvider:
    """P2P and collective figures: measured on first use (live, once per session) or read from the source."""
    return _session_provider()


def _session_provider() -> MeasurementProvider:
    """The session's one provider, whichever fixture asks first: a live campaign runs once."""
    return _made_once(PROVIDER_KEY, _new_provider)


def _new_provider() -> MeasurementProvider:
    from pytest_nvlink.model.figures import RecordedMeasurements

    nvlink_run, session = _session_run(), current_session()
    if nvlink_run.node.source != "live" or session.config.stash.get(HANDED_OVER_KEY, False):
        return RecordedMeasurements(nvlink_run.node)
    from pytest_nvlink.plugin.live import live_provider

    return live_provider(session.config, nvlink_run, session.items)


def _made_once(key: pytest.StashKey[T], make: Callable[[], T]) -> T:
    """The session's value under ``key``, made on the first ask; _forget_run lets it go with the run."""
    stash = current_session().config.stash
    if key not in stash:
        stash[key] = make()
    return stash[key]


@pytest.fixture
def nvlink_gpu_index() -> int:
    """Index (NVML/nvidia-smi order) of the GPU under test; parametrized over the suite's GPU count."""
    not_parametrized("nvlink_gpu_index")


@pytest.fixture
def nvlink_collective() -> str:
    """A collective name from the suite's ``measure.collectives``."""
    not_parametrized("nvlink_collective")


@pytest.fixture(scope="session")
def nvlink_judge() -> Callable[[Verdict], None]:
    """Apply a Verdict: record its properties for JUnit, then pass, fail, or skip when it does not apply."""
    return _session_judge()


@pytest.fixture(scope="session")
def nvlink_check() -> CheckKit:
    """``nvlink_context``, ``nvlink_measurements`` and ``nvlink_judge`` in one, for the shipped checks.

    pytest looks up every fixture of a test again for each of its items, cached or not; one fixture
    instead of three saves a 72-GPU run ~2,000 look-ups. Your own tests may take either form.
    """
    return CheckKit(_session_run().context, _session_provider(), _session_judge())


def _session_judge() -> Callable[[Verdict], None]:
    return _made_once(JUDGE_KEY, _new_judge)


def _new_judge() -> Callable[[Verdict], None]:
    from pytest_nvlink.plugin.outputs import OUTPUTS_KEY
    from pytest_nvlink.verdict import missing_report_properties, resolved

    nvlink_run, stash = _session_run(), current_session().config.stash
    # Per-pair records feed only the JSON and HTML files; a run that writes neither skips ~30,000 at 72 GPUs.
    keep_pairs = bool(stash.get(OUTPUTS_KEY, []))
    hook = current_session().config.hook.pytest_nvlink_verdict
    unknowns = unknown_is(nvlink_run.node.source)

    def judge(given: Verdict) -> None:
        # The item under test, from the run's own setup hook: one judge serves every item, where one per item
        # (with ``request``) cost each a fixture set-up, two request definitions and a teardown.
        item = stash[CURRENT_ITEM_KEY]
        item.stash[JUDGED_KEY] = True
        verdict = resolved(given, unknowns)  # an UNKNOWN is recorded and reported as what it counts as here
        _record(item, nvlink_run, verdict, keep_pairs)
        hook(item=item, verdict=verdict)  # a site's own check may fail the item here (plugin.hookspecs)
        # The enum is taken from the verdict itself: pytester's in-process runs re-import our modules.
        outcome = type(verdict.outcome)
        if verdict.outcome is outcome.NOT_APPLICABLE:
            pytest.skip(f"does not apply: {verdict.message}")
        if verdict.outcome is outcome.NO_EVIDENCE and nvlink_run.options.evidence_missing == "skip":
            pytest.skip(verdict.message)
        if verdict.outcome is not outcome.PASS:
            missing = missing_report_properties(verdict.properties)
            # Every failure's JUnit case must say measured vs expected and where the expectation comes from.
            defect = f" [pytest-nvlink defect: no JUnit {', '.join(missing)}; please report it]" if missing else ""
            pytest.fail(verdict.message + defect, pytrace=False)

    return judge


def _record(item: pytest.Item, run: Run, verdict: Verdict, keep_pairs: bool) -> None:
    from pytest_nvlink.judges.groups import pair_records

    # A per-source item's every pair goes to the results record, not into JUnit's properties; a run writing
    # neither JSON nor HTML keeps only the pairs of a failing group, which its terminal matrices mark.
    item.stash[PAIRS_KEY] = pair_records(verdict, every=keep_pairs)
    item.user_properties.append(("suite", run.suite.name))
    item.user_properties.append(("source", run.node.source))
    item.user_properties.append(("outcome", verdict.outcome.value))
    # The verdict's own sentence travels with it, so reports read it rather than pytest's text (and under xdist).
    item.user_properties.append(("message", verdict.message))
    item.user_properties.extend(verdict.properties)


class _SessionObjectsFrozen:
    """The items (once collected) and their reports (at the session's end) live until the run ends.

    Frozen out of the collector's passes like the node: at 72 GPUs the full collections walking
    them again cost as much as the summary they interrupt. The cleanup registered with the node's
    freeze puts them all back.
    """

    def pytest_collection_finish(self) -> None:
        from pytest_nvlink.core.gc_pause import keep_out_of_collections

        keep_out_of_collections()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        from pytest_nvlink.core.gc_pause import keep_out_of_collections

        keep_out_of_collections()


class _JudgedCheck:
    """A check that never hands its verdict over would pass every node: fail it instead."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.config.stash[CURRENT_ITEM_KEY] = item  # the item under test: nvlink_judge records onto it

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if report.when != "call":
            return report
        pairs = item.stash.get(PAIRS_KEY, None)
        if pairs is not None:
            report.nvlink_pairs = pairs  # a plain attribute travels with the report under xdist
        # The marker walk up the collection tree is left for last: nearly every item has judged.
        if report.passed and not item.stash.get(JUDGED_KEY, False) and item.get_closest_marker("nvlink") is not None:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.name} is marked nvlink but never called nvlink_judge(verdict), so it judged nothing and "
                "cannot pass; hand the check's Verdict to the nvlink_judge fixture"
            )
        return report
