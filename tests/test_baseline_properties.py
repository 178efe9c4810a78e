"""The baseline's JUnit suite properties are named from what changed, never cut from the change's sentence."""

from __future__ import annotations

import copy
from pathlib import Path

from conftest import SNAPSHOTS

from pytest_nvlink.judges.baseline_match import Baseline
from pytest_nvlink.model import Environment, Node
from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.baseline import baseline_suite_properties
from pytest_nvlink.record.run import Run, RunOptions


def _replay() -> Run:
    def no_probe() -> Node:
        raise AssertionError("a replay must not probe")

    return build_run(RunOptions(suite="h100-8gpu", replay=SNAPSHOTS / "h100-8gpu-healthy.json"), no_probe)


def test_a_value_with_spaces_names_the_property_by_what_changed() -> None:
    run = _replay()
    old = copy.deepcopy(run.node)
    # Two threshold files then, one now: the baseline's value has a space in it ("h100-sxm.toml, site.toml").
    old.environment = Environment(thresholds=["/etc/h100-sxm.toml", "/etc/site.toml"])
    old.driver_version = "535.1 beta"
    now = Environment(thresholds=["/etc/h100-sxm.toml"])
    run.baseline = Baseline(old, Path("/tmp/baseline.json"), None, False, environment_now=lambda: now)
    changed = {name: value for name, value in baseline_suite_properties(run) if name.startswith("changed_")}
    assert changed == {
        "changed_driver": f"driver 535.1 beta → {run.node.driver_version}",
        "changed_thresholds": "thresholds h100-sxm.toml, site.toml → h100-sxm.toml",
    }
