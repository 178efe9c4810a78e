"""Baseline matching, conditions, environment changes and schema migration, without pytester."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA, SNAPSHOTS, as_recorded

from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.judges.baseline import _differing_conditions, p2p_pair
from pytest_nvlink.judges.baseline_match import Baseline, environment_changes, match_gpus, whole_problem
from pytest_nvlink.model import Environment, Gpu, Node, P2PMeasurement
from pytest_nvlink.model.document import SCHEMA_VERSION, migrate_document
from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.environment import stamp_environment
from pytest_nvlink.record.run import Run, RunOptions
from pytest_nvlink.sources.snapshot.file import load_snapshot_document
from pytest_nvlink.verdict import Outcome

HEALTHY = SNAPSHOTS / "h100-8gpu-healthy.json"


def _run(baseline: Path = HEALTHY, replay: Path = HEALTHY) -> Run:
    return build_run(RunOptions(suite="h100-8gpu", replay=replay, baseline=baseline), lambda: Node(source="live"))


def _baseline_of(*gpus: Gpu) -> Baseline:
    return Baseline(
        node=Node(source="replay", gpus=list(gpus)), file=Path("b.json"), saved_utc=None, schema_migrated=False
    )


def test_gpus_match_by_uuid_then_serial_never_by_index() -> None:
    baseline = _baseline_of(Gpu(0, uuid="GPU-a", serial="1"), Gpu(1, uuid="GPU-b", serial="2"), Gpu(2, serial="3"))
    now = Node(
        source="live",
        gpus=[Gpu(0, uuid="GPU-b"), Gpu(1, uuid="GPU-x", serial="1"), Gpu(2, uuid="GPU-new", serial="9"), Gpu(3)],
    )
    match_gpus(now, baseline)
    assert baseline.gpu_map == {0: 1, 1: 0}
    assert baseline.unmatched[2].startswith("GPU 2 was serial 3, now serial 9: no baseline for it")
    assert "neither UUID nor serial" in baseline.unmatched[3]


def test_every_gpu_is_matched_or_named_unmatched_after_an_unmatched_one() -> None:
    # A GPU known by UUID only is swapped, not unidentifiable; the GPUs after it are still matched.
    baseline = _baseline_of(Gpu(0, uuid="GPU-a"), Gpu(1, uuid="GPU-b"))
    gpus = [Gpu(0, uuid="GPU-new"), Gpu(1), Gpu(2, uuid="GPU-b"), Gpu(3, uuid="GPU-c")]
    match_gpus(Node(source="live", gpus=gpus), baseline)
    assert baseline.gpu_map == {2: 1}
    assert baseline.unmatched[0].startswith("GPU 0 was UUID GPU-a, now UUID GPU-new: no baseline for it")
    assert "neither UUID nor serial" in baseline.unmatched[1]
    assert baseline.unmatched[3].startswith("GPU 3 is new, now UUID GPU-c: no baseline for it")


def test_a_baseline_judged_against_another_suite_compares_nothing() -> None:
    baseline = _baseline_of(Gpu(0, uuid="GPU-a"))
    baseline.node.environment = Environment(suite="h100-8gpu")
    now = Node(source="live", gpus=[Gpu(0, uuid="GPU-a")])
    match_gpus(now, baseline)
    assert whole_problem(now, "h100-8gpu", baseline) is None
    assert whole_problem(now, "h200-8gpu", baseline) == (
        "the baseline b.json was judged against suite h100-8gpu, this run against h200-8gpu"
    )
    baseline.node.environment = None  # a schema-1 baseline recorded no suite: nothing to hold against it
    assert whole_problem(now, "h200-8gpu", baseline) is None


def test_conditions_differ_only_where_both_sides_recorded_them() -> None:
    assert _differing_conditions(None, {"size_mib": "256"}) == ""
    assert _differing_conditions({"size_mib": "64", "warmup": "3"}, {"size_mib": "256"}) == (
        "message size (MiB) 64 in the baseline, 256 now"
    )


def test_schema1_documents_migrate_on_read() -> None:
    frozen = DATA / "frozen" / "h100-8gpu-degraded-schema1.json"
    document = json.loads(frozen.read_text(encoding="utf-8"))
    assert migrate_document(document)["schema_version"] == SCHEMA_VERSION
    node, top = load_snapshot_document(frozen)
    assert top["schema_version"] == 1
    assert node.environment is None


def test_a_threshold_set_without_tolerances_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_nvlink.config import thresholds as config

    original = config.load_thresholds

    def without_baseline(ref: str, site: Path | None = None) -> config.Thresholds:
        thresholds = original(ref, site)
        del thresholds.values["baseline.latency_rise_max_pct"]
        return thresholds

    monkeypatch.setattr("pytest_nvlink.plugin.run.load_thresholds", without_baseline)
    with pytest.raises(ConfigError, match=r"h100-sxm.toml:baseline.latency_rise_max_pct: required key missing"):
        _run()


def test_environment_changes_list_versions_vbios_and_thresholds(tmp_path: Path) -> None:
    run = _run()
    assert run.baseline is not None
    run.baseline.node.environment = Environment(versions={"nccl": "2.21.5", "kernel": "5.15"}, suite="h100-8gpu")
    run.node.environment = Environment(versions={"nccl": "2.23.4"})
    run.node.gpus[5].vbios = "96.00.99.00.01"
    changes = environment_changes(run.node, run.baseline)
    assert "nccl 2.21.5 → 2.23.4" in changes
    assert any(change.startswith("GPU 5 VBIOS 96.00.") and change.endswith("→ 96.00.99.00.01") for change in changes)
    assert not any(change.startswith("kernel") for change in changes)  # unknown on one side: not a change


def test_a_saved_run_records_its_outcome_and_environment() -> None:
    run = _run()
    node = stamp_environment(run, "failed")
    assert node.environment is not None
    assert node.environment.outcome == "failed"
    assert node.environment.suite == "h100-8gpu"
    assert node.environment.saved_utc is not None


def test_a_missing_figure_now_fails_closed() -> None:
    run = _run()
    figures: dict[str, P2PMeasurement | None] = {"unidirectional": None, "bidirectional": None, "latency": None}
    verdict = as_recorded(p2p_pair(run.context, run.baseline, 0, 1, figures), run.context)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith("GPU 0 -> GPU 1: unidirectional: not measured in this run (baseline 373.0 GB/s)")


def test_a_tolerance_is_a_finite_percentage() -> None:
    from pytest_nvlink.config.thresholds import THRESHOLD_SCHEMA

    check = THRESHOLD_SCHEMA["baseline.p2p_drop_max_pct"]
    assert check(5.0) is None
    assert check(float("nan")) == "nan is not a finite number"
    assert check(-1) == "-1 must be at least 0"
    assert check(101) == "101 must be at most 100"


def test_a_live_run_records_the_suites_conditions_as_the_demo_snapshots_do() -> None:
    from pytest_nvlink.record.environment import stamp_conditions
    from pytest_nvlink.sources.snapshot.file import load_snapshot

    recorded = load_snapshot(HEALTHY)
    live = load_snapshot(HEALTHY)
    live.source = "live"
    for p2p in live.measurements.p2p:
        p2p.conditions = None
    for collective in live.measurements.collectives:
        collective.conditions = None
    run = build_run(RunOptions(suite="h100-8gpu"), lambda: live)
    stamp_conditions(run)
    assert [m.conditions for m in live.measurements.p2p] == [m.conditions for m in recorded.measurements.p2p]
    assert [m.conditions for m in live.measurements.collectives] == [
        m.conditions for m in recorded.measurements.collectives
    ]
    replayed = _run()
    replayed.node.measurements.p2p[0].conditions = None
    stamp_conditions(replayed)  # a replay keeps what its file recorded, nothing is invented
    assert replayed.node.measurements.p2p[0].conditions is None
