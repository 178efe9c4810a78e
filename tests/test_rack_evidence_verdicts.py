"""A rack judged from its trays' files by the rack suite, end to end, and the same facts replayed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import DATA, SNAPSHOTS

from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.sources.evidence.load import load_evidence

RACK = DATA / "rack"
SUITE = "--nvlink-suite=gb200-nvl72"
# The checks a rack's files speak to; the per-pair checks of 72 GPUs would only cost minutes here.
RACK_CHECKS = "test_rack or test_fabric or test_nccl_transport or test_gpu_count or test_collective"


def judged(pytester: pytest.Pytester, *args: str) -> dict[str, dict[str, Any]]:
    """Every nvlink item of a run over the rack, by node id, from the results JSON."""
    out = pytester.path / f"results-{len(list(pytester.path.glob('results-*.json')))}.json"
    pytester.runpytest(
        SUITE,
        *args,
        "-k",
        RACK_CHECKS,
        "--nvlink-evidence-missing=skip",
        f"--nvlink-json={out}",
        "-p",
        "no:cacheprovider",
    )
    document = json.loads(out.read_text())
    return {item["nodeid"]: item for item in document["items"]}


def failures(items: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {nodeid: item["message"] for nodeid, item in items.items() if item["outcome"] == "fail"}


def test_healthy_rack_files_pass_every_check_they_cover(pytester: pytest.Pytester) -> None:
    items = judged(pytester, f"--nvlink-evidence={RACK / 'healthy'}")
    assert failures(items) == {}
    passed = {item["check"] for item in items.values() if item["outcome"] == "pass"}
    assert passed == {
        "test_rack_trays",
        "test_rack_tray",
        "test_rack_clique",
        "test_fabric",
        "test_gpu_count",
        "test_nccl_transport",
        "test_collective_busbw",
    }
    # nvbandwidth's multinode copies are one-way copy-engine figures, not NCCL send/recv: no evidence for that floor
    assert {item["outcome"] for item in items.values() if item["check"] == "test_rack_sendrecv"} == {"no_evidence"}


def test_wrong_clique_fails_naming_the_tray(pytester: pytest.Pytester) -> None:
    failed = failures(judged(pytester, f"--nvlink-evidence={RACK / 'wrong-clique'}"))
    clique = [message for nodeid, message in failed.items() if "test_rack_clique" in nodeid]
    assert len(clique) == 1 and "nvl72-tray07" in clique[0] and "32767" in clique[0], failed


def test_nccl_over_ib_between_trays_fails_as_rack_traffic_left_nvlink(pytester: pytest.Pytester) -> None:
    failed = failures(judged(pytester, f"--nvlink-evidence={RACK / 'net-ib'}"))
    assert any("rack traffic left NVLink" in message for message in failed.values()), failed


@pytest.mark.parametrize("variant", ["healthy", "wrong-clique", "net-ib"])
def test_evidence_and_replay_of_the_same_facts_give_the_same_verdicts(pytester: pytest.Pytester, variant: str) -> None:
    snapshot = pytester.path / f"{variant}.json"
    save_snapshot(load_evidence([RACK / variant]), snapshot)
    from_files = judged(pytester, f"--nvlink-evidence={RACK / variant}")
    replayed = judged(pytester, f"--nvlink-replay={snapshot}")
    assert set(replayed) == set(from_files)
    judged_items = {n for n, item in from_files.items() if item["outcome"] in ("pass", "fail")}
    assert {n: (replayed[n]["outcome"], replayed[n]["message"]) for n in judged_items} == {
        n: (from_files[n]["outcome"], from_files[n]["message"]) for n in judged_items
    }
    # What the files do not cover is "no evidence" there; a snapshot without it fails closed.
    assert {replayed[n]["outcome"] for n in set(from_files) - judged_items} <= {"fail"}


def test_healthy_files_and_the_shipped_healthy_rack_snapshot_agree_on_the_rack_checks(
    pytester: pytest.Pytester,
) -> None:
    from_files = judged(pytester, f"--nvlink-evidence={RACK / 'healthy'}")
    replayed = judged(pytester, f"--nvlink-replay={SNAPSHOTS / 'gb200-nvl72-healthy.json'}")
    rack_checks = {"test_rack_trays", "test_rack_tray", "test_rack_clique", "test_fabric", "test_gpu_count"}
    shared = {n for n, item in from_files.items() if item["check"] in rack_checks}
    assert len(shared) == 1 + 18 + 18 + 72 + 1
    assert {n: replayed[n]["outcome"] for n in shared} == {n: from_files[n]["outcome"] for n in shared}
