"""One acceptance run: resolve options into a node, a suite and thresholds.

The plugin hands this module plain values; every problem with them comes back as
:class:`~pytest_nvlink.config.values.ConfigError` for the plugin to report as a usage error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pytest_nvlink.config.required_keys import check_required_keys
from pytest_nvlink.config.shipped import data_dir, shipped_names
from pytest_nvlink.config.suites import Suite, load_suite, pick_suite_for
from pytest_nvlink.config.thresholds import Thresholds, load_thresholds
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.core.placeholders import PlaceholderError, expand, placeholder_values
from pytest_nvlink.core.placeholders import check as check_placeholders
from pytest_nvlink.model import Node
from pytest_nvlink.record.run import Given, Run, RunOptions

AUTO = "auto"


_EXPECTED_VALUE = {
    "suite": "a shipped suite name, a suite .toml or auto",
    "thresholds": "a site threshold .toml",
    "replay": "a snapshot .json or a shipped snapshot name",
    "save": "a file to write the snapshot to",
    "evidence": "a tool output file or a folder of them",
    "evidence-missing": "fail or skip",
    "pair-mode": "serial or concurrent",
    "backend": "nccl or gloo",
    "baseline": "a snapshot .json or a folder of saved runs",
    "save-dir": "a folder to save each run in",
    "host": "the host name this run reports",
}


def read_options(
    setting: Callable[[str], Given | None],
    evidence: list[Given],
    evidence_exclude: list[str] | None = None,
    *,
    quick: bool = False,
    baseline_any: str | None = None,
) -> RunOptions | None:
    """RunOptions from the settings given (``setting("pair-mode")``); None when no suite is asked for.

    A setting given empty (``--nvlink-replay=``) is an error: ignoring it would silently probe this
    machine, or read the current folder as evidence.
    """
    labels: dict[str, str] = {}

    def text(name: str) -> str | None:
        given = setting(name)
        if given is None:
            return None
        labels[name] = given.label
        if not given.value.strip():
            raise ConfigError(f"{given.label}: empty value; expected {_EXPECTED_VALUE[name]}")
        return given.value.strip()

    def path(name: str) -> Path | None:
        value = text(name)
        return None if value is None else Path(value).expanduser()

    suite = text("suite")
    if suite is None:
        return None
    for given in evidence:
        labels["evidence"] = given.label
        if not given.value.strip():
            raise ConfigError(f"{given.label}: empty value; expected {_EXPECTED_VALUE['evidence']}")
    return RunOptions(
        suite=suite,
        thresholds_file=path("thresholds"),
        replay=path("replay"),
        save=path("save"),
        evidence=[Path(given.value.strip()).expanduser() for given in evidence],
        evidence_missing=text("evidence-missing") or "fail",
        evidence_exclude=list(evidence_exclude or []),
        pair_mode=text("pair-mode"),
        backend=text("backend"),
        baseline=path("baseline"),
        save_dir=path("save-dir"),
        host=text("host"),
        quick=quick,
        baseline_any=baseline_any is not None,
        labels=labels | ({"baseline-any": baseline_any} if baseline_any else {}),
    )


def build_run(options: RunOptions, live_probe: Callable[[], Node]) -> Run:
    _check_exclusive(options)
    _check_paths(options)
    # A named suite is validated before probing, so a typo costs no probe and names the known suites.
    named = None if options.suite == AUTO else load_suite(options.suite)
    if named is not None:
        _check_threshold_ref(named)
    # A replay or evidence names its host before anything is probed; a live probe reports this machine's name.
    recorded = _load_recorded_node(options, several_hosts=named is not None and named.gpus_per_host is not None)
    values = placeholder_values(options.host or (recorded.host if recorded is not None else None))
    options = _expand_save_paths(options, values)
    node = recorded if recorded is not None else live_probe()
    if options.host is not None:
        node.host = options.host  # saved snapshots and results then name the host the run reports
    if options.quick:
        from pytest_nvlink.plugin.quick_rules import facts_only

        node = facts_only(node)
    note, mismatch = None, None
    suite = named
    if suite is None:
        suite, note, mismatch = choose_auto_suite(node)
    if options.pair_mode is not None:
        suite.measure.pair_mode = options.pair_mode
    thresholds = load_thresholds(_threshold_ref(suite), options.thresholds_file)
    check_required_keys(suite, thresholds)
    if mismatch is None:
        _check_link_ids(options, node, suite, thresholds)
    run = Run(options, node, suite, thresholds, note, mismatch, placeholders=values)
    if options.baseline is not None:
        from pytest_nvlink.plugin.baseline import attach_baseline

        attach_baseline(run)
    return run


def _check_exclusive(options: RunOptions) -> None:
    if options.replay and options.evidence:
        raise ConfigError(f"{options.label('replay')} and {options.label('evidence')}: choose one source, not both")
    for name, given in (("baseline", options.baseline), ("save-dir", options.save_dir)):
        if options.quick and given is not None:
            # A quick snapshot has no figures: as a folder's newest passing run it would fail every comparison.
            raise ConfigError(
                f"{options.label(name)} and {options.label('quick')}: a quick run measures nothing, so it neither "
                "compares with nor adds to a baseline; leave one of them out"
            )
    choices = (
        ("evidence-missing", options.evidence_missing, ("fail", "skip")),
        ("pair-mode", options.pair_mode, (None, "serial", "concurrent")),
        ("backend", options.backend, (None, "nccl", "gloo")),
    )
    for name, value, allowed in choices:
        if value not in allowed:
            shown = " or ".join(str(a) for a in allowed if a is not None)
            raise ConfigError(f"{options.label(name)}: expected {shown}, got {value!r}")


def _check_paths(options: RunOptions) -> None:
    """Input paths that cannot be what they claim, and an unwritable --nvlink-save, before any probing."""
    if options.thresholds_file is not None and not options.thresholds_file.is_file():
        raise ConfigError(_thresholds_file_problem(options.label("thresholds"), options.thresholds_file))
    for path in options.evidence:
        if path.exists() and not (path.is_file() or path.is_dir()):
            raise ConfigError(f"{options.label('evidence')}: {path} is not a regular file or folder (a device or pipe)")
    for name, given in (("save", options.save), ("save-dir", options.save_dir)):
        if given is not None:
            try:
                check_placeholders(str(given), options.label(name))
            except PlaceholderError as exc:
                raise ConfigError(str(exc)) from None


def _expand_save_paths(options: RunOptions, values: dict[str, str]) -> RunOptions:
    """``{host}`` and ``{date}`` in --nvlink-save and --nvlink-save-dir; an unwritable target stops the run."""

    def expanded(name: str, path: Path | None) -> Path | None:
        return None if path is None else Path(expand(str(path), values, options.label(name)))

    options = replace(options, save=expanded("save", options.save), save_dir=expanded("save-dir", options.save_dir))
    if options.save_dir is not None and options.save_dir.exists() and not options.save_dir.is_dir():
        raise ConfigError(f"{options.label('save-dir')}: {options.save_dir} is not a folder")
    if options.save_dir is not None:
        from pytest_nvlink.core.atomic import folder_problem

        problem = folder_problem(options.save_dir)
        if problem is not None:
            raise ConfigError(f"{options.label('save-dir')}: {problem}; the run would be saved nowhere")
    if options.save is not None:
        from pytest_nvlink.model.document import SnapshotError, check_writable

        try:
            check_writable(options.save)
        except SnapshotError as exc:
            raise ConfigError(f"{options.label('save')}: {exc}") from None
    return options


def _thresholds_file_problem(label: str, path: Path) -> str:
    shipped = shipped_names("thresholds")
    if path.exists():
        return f"{label}: {path} is not a regular file; expected a site threshold .toml"
    if str(path) in shipped:
        return (
            f"{label}: {path} is not a file; shipped threshold sets ({', '.join(shipped)}) are chosen by a "
            "suite's suite.thresholds key — here give a site .toml laid over them (README: A site threshold file)"
        )
    return f"{label}: {path}: file not found (expected a site threshold .toml)"


def _load_recorded_node(options: RunOptions, *, several_hosts: bool = False) -> Node | None:
    """The replayed snapshot or the parsed evidence; None when the node is this machine, probed live.

    ``several_hosts``: the suite named is a rack's, so each file of one host's output is a tray.
    """
    if options.replay is not None:
        from pytest_nvlink.model.document import SnapshotError
        from pytest_nvlink.sources.snapshot.file import load_snapshot

        try:
            return load_snapshot(_snapshot_path(options.replay, options.label("replay")))
        except SnapshotError as exc:
            raise ConfigError(f"{options.label('replay')}: {exc}") from None
    if options.evidence:
        from pytest_nvlink.sources.evidence.load import EvidenceError, load_evidence

        try:
            return load_evidence(options.evidence, options.evidence_exclude, trays=several_hosts)
        except EvidenceError as exc:
            raise ConfigError(f"{options.label('evidence')}: {exc}") from None
    return None


def _check_link_ids(options: RunOptions, node: Node, suite: Suite, thresholds: Thresholds) -> None:
    """An NVLink id the SKU does not have (link 18 on an H100, numbered 0-17) is impossible, not an extra link:
    a file that states one is wrong (a usage error naming file and key); a probe that reads one names the GPU
    in a probe error, which fails that GPU. A GPU of a model the suite does not accept is another SKU, which
    test_gpu_model reports."""
    limit = thresholds.link_ids()
    if limit is None:
        return
    count, version = limit
    for i, gpu in enumerate(node.gpus):
        if gpu.name is None or not suite.model_matches(gpu.name):
            continue
        j, link = next(((j, link) for j, link in enumerate(gpu.nvlinks or []) if not 0 <= link.link < count), (0, None))
        if link is None:
            continue
        why = (
            f"NVLink {link.link} is outside the links 0-{count - 1} an NVLink {version.value} GPU has "
            f"({version.where()}), so it is impossible, not an extra link"
        )
        if options.replay is not None:
            path = _snapshot_path(options.replay, options.label("replay"))
            raise ConfigError(
                f"{options.label('replay')}: {path}:node.gpus[{i}].nvlinks[{j}].link: {why}; the file was edited "
                "or written for another SKU"
            )
        if options.evidence:
            files = node.provenance.get("nvlinks", "the evidence files")
            raise ConfigError(f"{options.label('evidence')}: {files}: GPU {gpu.index} Link {link.link}: {why}")
        node.probe_errors.append(f"GPU {gpu.index}: NVML reports {why}")


def _snapshot_path(replay: Path, label: str) -> Path:
    """A path, or the name of a shipped example snapshot (``h100-8gpu-healthy``)."""
    if replay.exists() or replay.suffix or len(replay.parts) > 1:
        return replay
    shipped = data_dir("snapshots") / f"{replay}.json"
    if not shipped.is_file():
        known = ", ".join(shipped_names("snapshots", "*.json"))
        raise ConfigError(f"{label}: {replay} is neither a file nor a shipped snapshot ({known})")
    return shipped


def choose_auto_suite(node: Node) -> tuple[Suite, str, str | None]:
    """The shipped suite for the node, the header note, and why none fits (None when one does).

    A node no suite fits is exactly the node that needs a report, so it is not a usage error: the
    run goes on against the nearest suite, and the inventory gate fails with what was found.
    """
    model = node.gpus[0].name if node.gpus else None
    found = f"{len(node.gpus)} x {model}" if node.gpus else "no GPUs"
    picked = pick_suite_for(model, len(node.gpus))
    if picked is not None:
        return load_suite(picked), f"auto-selected suite {picked} for {found}", None
    suites = [load_suite(name) for name in shipped_names("suites")]
    same_model = [suite for suite in suites if suite.model_matches(model)]
    # The nearest GPU count, ties to the larger suite: a GPU lost or hidden is the common fault.
    nearest = min(same_model or suites, key=lambda s: (abs(s.gpu_count - len(node.gpus)), -s.gpu_count))
    note = (
        f"suite auto-selection: no shipped suite matches {found}; only the inventory gate runs "
        f"(judged against {nearest.name} for reference)"
    )
    return nearest, note, _mismatch_reason(node, found, nearest, bool(same_model))


def _mismatch_reason(node: Node, found: str, nearest: Suite, model_known: bool) -> str:
    count, expected = len(node.gpus), nearest.gpu_count
    if not node.gpus:
        problems = "; ".join(node.probe_errors) or "the source lists none"
        return f"no GPUs found ({problems}), so no suite can be auto-selected"
    if not model_known:
        return (
            f"{found}: no shipped suite accepts this GPU model (shipped suites: {', '.join(shipped_names('suites'))}); "
            "write a suite file for this node (README: Suites and thresholds) and pass --nvlink-suite=PATH"
        )
    if expected > count:
        return (
            f"{found}: no shipped suite has {count} GPUs; {nearest.name} expects {expected} — "
            f"{expected - count} GPU(s) missing or hidden? (dmesg Xid 79, CUDA_VISIBLE_DEVICES, container "
            "runtime or VM passthrough)"
        )
    return (
        f"{found}: no shipped suite has {count} GPUs; {nearest.name} expects {expected} — write a suite file "
        "for this shape and pass --nvlink-suite=PATH"
    )


def _threshold_ref(suite: Suite) -> str:
    ref = suite.thresholds_ref
    if ref.endswith(".toml") or "/" in ref:
        path = Path(ref).expanduser()
        return str(path if path.is_absolute() else suite.file.parent / path)
    return ref


def _check_threshold_ref(suite: Suite) -> None:
    """A suite's ``suite.thresholds`` that names no set or file: the suite's file and key are to blame."""
    ref, where = _threshold_ref(suite), f"{suite.file}:suite.thresholds"
    if ref.endswith(".toml") or "/" in ref:  # a file, relative to the suite or absolute
        if not Path(ref).is_file():
            raise ConfigError(f"{where}: {suite.thresholds_ref!r} resolves to {ref}, which is not a file")
    elif ref not in shipped_names("thresholds"):
        raise ConfigError(
            f"{where}: unknown threshold set {ref!r}; shipped sets: {', '.join(shipped_names('thresholds'))}"
        )
