"""One acceptance run as every later stage reads it: its options, node, suite, thresholds and baseline.

The plugin builds it (:mod:`pytest_nvlink.plugin.run`); the record, the reports and the plugin's
collection read it. Judges never see it: they take its :class:`~pytest_nvlink.judges.context.Context`.
"""

from __future__ import annotations

import functools
import socket
from dataclasses import dataclass, field
from pathlib import Path

from pytest_nvlink.config.suites import Suite
from pytest_nvlink.config.thresholds import Thresholds
from pytest_nvlink.judges.baseline_match import Baseline
from pytest_nvlink.judges.context import Context
from pytest_nvlink.judges.mig import MIG_KEY
from pytest_nvlink.model import Node


@dataclass
class RunOptions:
    """The run's options as given on the command line or in the ini file."""

    suite: str
    thresholds_file: Path | None = None
    replay: Path | None = None
    save: Path | None = None
    evidence: list[Path] = field(default_factory=list)
    evidence_missing: str = "fail"  # "fail" | "skip"
    evidence_exclude: list[str] = field(default_factory=list)  # globs left out of evidence folders
    pair_mode: str | None = None  # overrides the suite's measure.pair_mode
    backend: str | None = None  # "nccl" | "gloo"; None picks from the hardware
    baseline: Path | None = None  # a snapshot, or a folder of saved runs (--nvlink-save-dir layout)
    save_dir: Path | None = None  # also save the run as <dir>/<host>/<UTC timestamp>.json
    host: str | None = None  # the host name this run reports, instead of the node's own
    quick: bool = False  # health-check mode: facts only, nothing measured
    baseline_any: bool = False  # take a baseline file whatever the outcome of the run that saved it
    # Where each setting came from, for messages: "--nvlink-replay" or "pytest.ini:nvlink_replay".
    labels: dict[str, str] = field(default_factory=dict)

    def label(self, name: str) -> str:
        """How the user spelled setting ``name`` ("replay", "pair-mode"): the option or the ini key."""
        return self.labels.get(name, f"--nvlink-{name}")


@dataclass(frozen=True)
class Given:
    """A setting as the user gave it, and how to name it: "--nvlink-replay" or "pytest.ini:nvlink_replay"."""

    value: str
    label: str


@dataclass
class Run:
    """One acceptance run: its options, the node read from its source, the suite and the thresholds."""

    options: RunOptions
    node: Node
    suite: Suite
    thresholds: Thresholds
    auto_note: str | None = None
    # Set when --nvlink-suite=auto found no suite for the node: the inventory gate fails with it.
    auto_mismatch: str | None = None
    baseline: Baseline | None = None  # set from --nvlink-baseline (attach_baseline)
    # What {host} and {date} stand for in this run's output paths (pytest_nvlink.core.placeholders).
    placeholders: dict[str, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        """The host this run reports: --nvlink-host, else the node's own, else this machine's name."""
        return self.node.host or socket.gethostname()

    @functools.cached_property
    def context(self) -> Context:
        """The judges' one context for this run: its answers about GPUs and pairs are worked out once."""
        measures_node = self.node.source == "live"
        return Context(self.node, self.suite, self.thresholds, self.auto_mismatch, measures_node=measures_node)

    def probe_failed(self) -> bool:
        """True when the source gave no GPUs at all: only the inventory verdict is meaningful."""
        return not self.node.gpus and bool(self.node.probe_errors)

    def gate_only(self) -> str | None:
        """Why only the inventory gate runs (nothing probed, or no suite fits the node); None otherwise."""
        if self.probe_failed():
            return "node could not be probed: " + "; ".join(self.node.probe_errors)
        return self.auto_mismatch


def not_collected(suite: Suite) -> dict[str, str]:
    """Checks that do not exist for this suite's shape, keyed by fixture name or ``area:<marker area>``, with why."""
    absent: dict[str, str] = {}
    if suite.gpu_count < 2:
        one_gpu = f"suite {suite.name} has 1 GPU ({suite.file.name}:suite.gpu_count)"
        pair_fixtures = ("nvlink_pair", "nvlink_ordered_pair", "nvlink_pairs", "nvlink_ordered_pairs")
        absent |= dict.fromkeys(pair_fixtures, one_gpu) | {"area:collectives": one_gpu}
    elif not suite.measure.collectives:
        absent["area:collectives"] = f"{suite.file.name}:measure.collectives is empty"
    if "area:collectives" in absent:
        absent["nvlink_collective"] = absent["area:collectives"]
    if suite.gpus_per_host is None:  # rack checks exist only for a suite spanning several hosts
        absent["area:rack"] = absent["nvlink_tray"] = f"suite {suite.name} sets no suite.gpus_per_host"
    return absent


BASELINE_NOT_COLLECTED = "baseline checks (test_baseline_*): no --nvlink-baseline given"


def baseline_not_collected(run: Run) -> dict[str, str]:
    """The baseline checks exist only when a baseline is given (keyed as :func:`not_collected` keys them)."""
    return {} if run.options.baseline is not None else {"area:baseline": BASELINE_NOT_COLLECTED}


MIG_NOT_COLLECTED = f"MIG mode check (test_gpu_mig): the threshold set gives no {MIG_KEY}"


def mig_not_collected(run: Run) -> dict[str, str]:
    """The MIG mode check exists only where the threshold set requires a mode (keyed by its fixture)."""
    return {} if run.thresholds.get(MIG_KEY) is not None else {"nvlink_mig_required": MIG_NOT_COLLECTED}


def not_collected_note(suite: Suite) -> str | None:
    """One header line naming what :func:`not_collected` leaves out, or None."""
    absent = not_collected(suite)
    what = [
        name
        for key, name in (
            ("nvlink_pair", "pair checks (paths, P2P status, P2P bandwidth)"),
            ("area:collectives", "collective checks"),
        )
        if key in absent
    ]
    reasons = dict.fromkeys(absent[key] for key in ("nvlink_pair", "area:collectives") if key in absent)
    return f"not collected: {' and '.join(what)}: {'; '.join(reasons)}" if what else None
