"""One acceptance run: resolve options into a node, a suite and thresholds.

The plugin hands this module plain values; every problem with them comes back as
:class:`~pytest_nvlink.config.ConfigError` for the plugin to report as a usage error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_nvlink.config import (
    ConfigError,
    Suite,
    Thresholds,
    data_dir,
    load_suite,
    load_thresholds,
    pick_suite_for,
    shipped_names,
)
from pytest_nvlink.judges import Context
from pytest_nvlink.model import Node

AUTO = "auto"


@dataclass
class RunOptions:
    suite: str
    thresholds_file: Path | None = None
    replay: Path | None = None
    save: Path | None = None
    evidence: list[Path] = field(default_factory=list)
    evidence_missing: str = "fail"  # "fail" | "skip"
    evidence_exclude: list[str] = field(default_factory=list)  # globs left out of evidence folders
    pair_mode: str | None = None  # overrides the suite's measure.pair_mode
    backend: str | None = None  # "nccl" | "gloo"; None picks from the hardware


@dataclass
class Run:
    options: RunOptions
    node: Node
    suite: Suite
    thresholds: Thresholds
    auto_note: str | None = None

    @property
    def context(self) -> Context:
        return Context(self.node, self.suite, self.thresholds)

    def probe_failed(self) -> bool:
        """True when the source gave no GPUs at all: only the inventory verdict is meaningful."""
        return not self.node.gpus and bool(self.node.probe_errors)


def build_run(options: RunOptions, live_probe: Callable[[], Node]) -> Run:
    _check_exclusive(options)
    # A named suite is validated before probing, so a typo costs no probe and names the known suites.
    named = None if options.suite == AUTO else load_suite(options.suite)
    node = _load_node(options, live_probe)
    suite_ref, note = _choose_suite(options.suite, node)
    suite = named or load_suite(suite_ref)
    if options.pair_mode is not None:
        suite.measure.pair_mode = options.pair_mode
    thresholds = load_thresholds(_threshold_ref(suite), options.thresholds_file)
    _check_collectives_have_thresholds(suite, thresholds)
    return Run(options, node, suite, thresholds, note)


def _check_exclusive(options: RunOptions) -> None:
    if options.replay and options.evidence:
        raise ConfigError("--nvlink-replay and --nvlink-evidence: choose one source, not both")
    choices = (
        ("--nvlink-evidence-missing", options.evidence_missing, ("fail", "skip")),
        ("--nvlink-pair-mode", options.pair_mode, (None, "serial", "concurrent")),
        ("--nvlink-backend", options.backend, (None, "nccl", "gloo")),
    )
    for option, value, allowed in choices:
        if value not in allowed:
            shown = " or ".join(str(a) for a in allowed if a is not None)
            raise ConfigError(f"{option}: expected {shown}, got {value!r}")


def _load_node(options: RunOptions, live_probe: Callable[[], Node]) -> Node:
    if options.replay is not None:
        from pytest_nvlink.snapshot import SnapshotError, load_snapshot

        try:
            return load_snapshot(_snapshot_path(options.replay))
        except SnapshotError as exc:
            raise ConfigError(f"--nvlink-replay: {exc}") from None
    if options.evidence:
        from pytest_nvlink.evidence import EvidenceError, load_evidence

        try:
            return load_evidence(options.evidence, options.evidence_exclude)
        except EvidenceError as exc:
            raise ConfigError(f"--nvlink-evidence: {exc}") from None
    return live_probe()


def _snapshot_path(replay: Path) -> Path:
    """A path, or the name of a shipped example snapshot (``h100-8gpu-healthy``)."""
    if replay.exists() or replay.suffix or len(replay.parts) > 1:
        return replay
    shipped = data_dir("snapshots") / f"{replay}.json"
    if not shipped.is_file():
        known = ", ".join(shipped_names("snapshots", "*.json"))
        raise ConfigError(f"--nvlink-replay: {replay} is neither a file nor a shipped snapshot ({known})")
    return shipped


def _choose_suite(ref: str, node: Node) -> tuple[str, str | None]:
    if ref != AUTO:
        return ref, None
    model = node.gpus[0].name if node.gpus else None
    picked = pick_suite_for(model, len(node.gpus))
    if picked is None:
        found = f"{len(node.gpus)} x {model}" if node.gpus else "no GPUs (" + "; ".join(node.probe_errors) + ")"
        raise ConfigError(
            f"--nvlink-suite=auto: no shipped suite matches {found}; known suites: {', '.join(shipped_names('suites'))}"
        )
    return picked, f"auto-selected suite {picked} for {len(node.gpus)} x {model}"


def _threshold_ref(suite: Suite) -> str:
    ref = suite.thresholds_ref
    if ref.endswith(".toml") or "/" in ref:
        path = Path(ref)
        return str(path if path.is_absolute() else suite.file.parent / path)
    return ref


def _check_collectives_have_thresholds(suite: Suite, thresholds: Thresholds) -> None:
    missing = [op for op in suite.measure.collectives if op not in thresholds.collectives()]
    if missing:
        raise ConfigError(
            f"{suite.file}:measure.collectives: {', '.join(missing)} listed but threshold set "
            f"{thresholds.name} has no collectives.<op>.busbw_min_gbps for it"
        )
