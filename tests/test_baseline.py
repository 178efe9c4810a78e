"""--nvlink-baseline: a node compared with its own last known good run, end to end through pytester."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA, REPO, SNAPSHOTS, snapshot_with_lists

HEALTHY = SNAPSHOTS / "h100-8gpu-healthy.json"
FROZEN = DATA / "frozen" / "h100-8gpu-degraded-schema1.json"
BASELINE_ITEMS = 56 + 5 + 8 + 8  # ordered pairs, collectives, GPUs of the 8-GPU suite (facts, host link)
Document = dict[str, Any]
# docs/baseline.md (the driver upgrade runbook) quotes this sentence; the test below checks the run writes it.
RUNBOOK_SENTENCE = (
    "GPU 2 -> GPU 6: unidirectional 333.0 GB/s, 10.0 % below baseline 370.0 GB/s (hgx-h100-01 "
    "2026-11-20T10:02Z, driver 550.54.15); limit 5 % (nvswitch-common.toml:baseline.p2p_drop_max_pct); "
    "changed since: driver 550.54.15 → 560.35.03"
)


def _copy(tmp_path: Path, name: str, change: Callable[[Document], None], source: Path = HEALTHY) -> Path:
    document: Document = snapshot_with_lists(source)
    change(document)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _run(
    pytester: pytest.Pytester, replay: Path, *args: str
) -> tuple[dict[str, ET.Element], pytest.RunResult, ET.Element]:
    xml_path = pytester.path / "baseline.xml"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-replay={replay}",
        f"--junitxml={xml_path}",
        "-p",
        "no:cacheprovider",
        *args,
    )
    root = ET.parse(xml_path).getroot()
    cases = {case.get("name", ""): case for case in root.iter("testcase")}
    return cases, result, root


def _baseline_failures(cases: dict[str, ET.Element]) -> set[str]:
    return {
        name
        for name, case in cases.items()
        if name.startswith("test_baseline") and (case.find("failure") is not None or case.find("error") is not None)
    }


def _message(cases: dict[str, ET.Element], name: str) -> str:
    failure = cases[name].find("failure")
    assert failure is not None, name
    return failure.get("message", "").removeprefix("Failed: ")


def _suite_properties(root: ET.Element) -> dict[str, str]:
    return {
        p.get("name", ""): p.get("value", "")
        for p in root.iter("property")
        if p.get("name", "").startswith(("baseline", "changed"))
    }


def _p2p(document: Document, src: int, dst: int, kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        m for m in document["node"]["measurements"]["p2p"] if (m["src"], m["dst"], m["kind"]) == (src, dst, kind)
    )
    return found


def test_the_same_snapshot_against_itself_passes(pytester: pytest.Pytester) -> None:
    cases, result, root = _run(pytester, HEALTHY, f"--nvlink-baseline={HEALTHY}")
    assert result.ret == 0
    baseline_cases = [name for name in cases if name.startswith("test_baseline")]
    assert len(baseline_cases) == BASELINE_ITEMS
    assert _baseline_failures(cases) == set()
    result.stdout.fnmatch_lines(
        [
            "nvlink changed since the baseline: nothing recorded",
            "baseline: *h100-8gpu-healthy.json (hgx-h100-01 *, driver 550.54.15)",
        ]
    )
    assert _suite_properties(root)["baseline_host"] == "hgx-h100-01"


def _slower_link_down_new_driver(document: Document) -> None:
    node = document["node"]
    node["driver_version"] = "560.35.03"
    _p2p(document, 2, 6, "unidirectional")["value"] = 370.0 * 0.9  # the baseline's 2 -> 6 is 370.0 GB/s
    node["gpus"][3]["nvlinks"][17]["active"] = False


def test_a_slower_pair_a_link_down_and_a_new_driver_fail_exactly_those_items(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    assert _p2p(snapshot_with_lists(HEALTHY), 2, 6, "unidirectional")["value"] == 370.0
    after = _copy(tmp_path, "after", _slower_link_down_new_driver)
    cases, result, root = _run(pytester, after, f"--nvlink-baseline={HEALTHY}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert _baseline_failures(cases) == {"test_baseline_p2p[gpu2-gpu6]", "test_baseline_facts[gpu3]"}
    assert _message(cases, "test_baseline_p2p[gpu2-gpu6]") == RUNBOOK_SENTENCE
    assert "active NVLinks 18 in the baseline, 17 now" in _message(cases, "test_baseline_facts[gpu3]")
    result.stdout.fnmatch_lines(["nvlink changed since the baseline: driver 550.54.15 → 560.35.03"])
    result.stdout.fnmatch_lines(["  changed since the baseline: driver 550.54.15 → 560.35.03"])
    assert _suite_properties(root)["changed_driver"] == "driver 550.54.15 → 560.35.03"


def test_the_runbook_quotes_the_sentence_the_run_writes() -> None:
    runbook = (REPO / "docs" / "baseline.md").read_text(encoding="utf-8")
    assert f"```text\n{RUNBOOK_SENTENCE}\n```" in runbook


def test_an_improvement_is_reported_not_failed(pytester: pytest.Pytester, tmp_path: Path) -> None:
    after = _copy(tmp_path, "after", lambda d: _p2p(d, 0, 1, "latency").update(value=1.0))
    cases, result, _ = _run(pytester, after, f"--nvlink-baseline={HEALTHY}", "-k", "baseline_p2p and gpu0-gpu1")
    assert result.ret == 0
    assert _baseline_failures(cases) == set()
    improved = "improved: GPU 0 -> GPU 1: latency 1.0 us, * % below baseline *"
    result.stdout.fnmatch_lines([f"  {improved}"])
    props = {p.get("name"): p.get("value", "") for p in cases["test_baseline_p2p[gpu0-gpu1]"].iter("property")}
    assert props["baseline_improved"].startswith("improved: GPU 0 -> GPU 1: latency 1.0 us, ")


def _swap_gpu3(document: Document) -> None:
    gpu = document["node"]["gpus"][3]
    gpu["uuid"], gpu["serial"] = "GPU-00000000-0000-0000-0000-000000000003", "1654000000003"


def test_a_swapped_gpu_is_reported_and_not_compared(pytester: pytest.Pytester, tmp_path: Path) -> None:
    old_serial = json.loads(HEALTHY.read_text())["node"]["gpus"][3]["serial"]
    after = _copy(tmp_path, "after", _swap_gpu3)
    cases, result, root = _run(pytester, after, f"--nvlink-baseline={HEALTHY}")
    with_gpu3 = {f"test_baseline_p2p[gpu{a}-gpu{b}]" for a in range(8) for b in range(8) if a != b and 3 in (a, b)}
    with_gpu3.add("test_baseline_host_link[gpu3]")
    assert _baseline_failures(cases) == {"test_baseline_facts[gpu3]", *with_gpu3}
    swapped = f"GPU 3 was serial {old_serial}, now serial 1654000000003: no baseline for it"
    assert _message(cases, "test_baseline_facts[gpu3]").startswith(swapped)
    assert "not compared" in _message(cases, "test_baseline_p2p[gpu0-gpu3]")
    result.stdout.fnmatch_lines([f"nvlink baseline: {swapped}*", f"  {swapped}*"])
    assert _suite_properties(root)["baseline_unmatched_gpu3"].startswith(swapped)


def test_gpus_are_matched_by_uuid_not_by_index(pytester: pytest.Pytester, tmp_path: Path) -> None:
    def renumber(document: Document) -> None:
        gpus = document["node"]["gpus"]
        gpus[0]["uuid"], gpus[1]["uuid"] = gpus[1]["uuid"], gpus[0]["uuid"]
        gpus[0]["serial"], gpus[1]["serial"] = gpus[1]["serial"], gpus[0]["serial"]

    after = _copy(tmp_path, "after", renumber)
    cases, result, _ = _run(pytester, after, f"--nvlink-baseline={HEALTHY}", "-k", "baseline_p2p and gpu0-gpu2")
    # GPU 0 is now the baseline's GPU 1: its figures to GPU 2 (377.0 -> 375.0 in the baseline) are compared.
    assert _baseline_failures(cases) == set()
    assert result.ret == 0


def test_a_schema1_baseline_against_a_schema2_run(pytester: pytest.Pytester) -> None:
    cases, result, _ = _run(pytester, SNAPSHOTS / "h100-8gpu-degraded.json", f"--nvlink-baseline={FROZEN}", "-rA")
    assert _baseline_failures(cases) == set()
    assert len([name for name in cases if name.startswith("test_baseline")]) == BASELINE_ITEMS
    result.stdout.fnmatch_lines(
        [
            "nvlink baseline: schema-1 file (migrated): no versions or measurement conditions recorded",
            "  not recorded in the baseline, so not compared: PCIe generation under load (8 GPU(s))",
        ]
    )


def _with_conditions(size_mib: str, backend: str) -> Callable[[Document], None]:
    def change(document: Document) -> None:
        measurements = document["node"]["measurements"]
        for m in measurements["p2p"]:
            m["conditions"] = {"size_mib": "256", "iterations": "20", "warmup": "3", "pair_mode": "serial"}
        _p2p(document, 0, 1, "unidirectional")["conditions"]["size_mib"] = size_mib
        for m in measurements["collectives"]:
            m["conditions"] = {"iterations": "20", "warmup": "5", "backend": "nccl"}
            if m["op"] == "all_reduce":
                m["conditions"]["backend"] = backend

    return change


def test_other_conditions_are_reported_per_figure(pytester: pytest.Pytester, tmp_path: Path) -> None:
    before = _copy(tmp_path, "before", _with_conditions("64", "gloo"))
    after = _copy(tmp_path, "after", _with_conditions("256", "nccl"))
    cases, _, _ = _run(pytester, after, f"--nvlink-baseline={before}")
    assert _baseline_failures(cases) == {"test_baseline_p2p[gpu0-gpu1]", "test_baseline_collective[all_reduce]"}
    assert _message(cases, "test_baseline_p2p[gpu0-gpu1]").startswith(
        "GPU 0 -> GPU 1: unidirectional: not comparable with the baseline, measured under other conditions: "
        "message size (MiB) 64 in the baseline, 256 now"
    )
    assert "backend gloo in the baseline, nccl now" in _message(cases, "test_baseline_collective[all_reduce]")


def test_without_a_baseline_the_checks_are_not_collected(pytester: pytest.Pytester) -> None:
    cases, result, _ = _run(pytester, HEALTHY)
    assert not [name for name in cases if name.startswith("test_baseline")]
    result.stdout.fnmatch_lines(
        ["nvlink: not collected: baseline checks (test_baseline_*): no --nvlink-baseline given"]
    )


def test_another_host_fails_every_baseline_item(pytester: pytest.Pytester, tmp_path: Path) -> None:
    other = _copy(tmp_path, "other", lambda d: d["node"].update(host="hgx-h100-99"))
    cases, result, _ = _run(pytester, HEALTHY, f"--nvlink-baseline={other}")
    assert len(_baseline_failures(cases)) == BASELINE_ITEMS
    assert _message(cases, "test_baseline_facts[gpu0]").startswith(
        f"cannot compare with the baseline: the baseline {other} is of host hgx-h100-99, "
        "this run is of host hgx-h100-01"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_an_unusable_baseline_is_a_usage_error(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-replay={HEALTHY}", f"--nvlink-baseline={tmp_path / 'nope.json'}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --nvlink-baseline: {tmp_path / 'nope.json'}: not found*"])
    future = _copy(tmp_path, "future", lambda d: d.update(schema_version=99))
    pytester.makeini(f"[pytest]\nnvlink_baseline = {future}\n")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-replay={HEALTHY}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: tox.ini:nvlink_baseline: *future.json:schema_version: version 99 is not supported*"]
    )


def test_save_dir_then_compare_with_the_newest_passing_run(pytester: pytest.Pytester, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    common = ("--nvlink-suite=h100-8gpu", f"--nvlink-replay={HEALTHY}", "-p", "no:cacheprovider")
    empty = pytester.runpytest(*common, f"--nvlink-baseline={runs}", "-k", "gpu_count")
    empty.stderr.fnmatch_lines([f"ERROR: --nvlink-baseline: {runs}/hgx-h100-01 holds no snapshot of a passing run*"])
    saved = pytester.runpytest(*common, f"--nvlink-save-dir={runs}")  # a complete run: a -k run is no baseline
    assert saved.ret == 0
    (first,) = (runs / "hgx-h100-01").glob("*.json")
    assert json.loads(first.read_text())["node"]["environment"]["outcome"] == "passed"
    compared = pytester.runpytest(*common, f"--nvlink-baseline={runs}", "-k", "baseline_facts")
    assert compared.ret == 0
    compared.stdout.fnmatch_lines([f"nvlink baseline: {first} (hgx-h100-01 *", "*8 passed*"])


def test_baseline_tolerances_are_validated_and_waivable(pytester: pytest.Pytester, tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text("[baseline]\np2p_drop_max_pct = inf\n")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-replay={HEALTHY}", f"--nvlink-thresholds={site}")
    result.stderr.fnmatch_lines([f"ERROR: {site}:baseline.p2p_drop_max_pct: inf is not a finite number"])
    site.write_text(
        '[waive]\n"baseline.p2p_drop_max_pct" = "bandwidth varies on this shared node"\n'
        '"baseline.latency_rise_max_pct" = "latency varies on this shared node"\n'
    )
    after = _copy(tmp_path, "after", _slower_link_down_new_driver)
    cases, result, _ = _run(pytester, after, f"--nvlink-baseline={HEALTHY}", f"--nvlink-thresholds={site}")
    assert _baseline_failures(cases) == {"test_baseline_facts[gpu3]"}
    skipped = cases["test_baseline_p2p[gpu2-gpu6]"].find("skipped")
    assert skipped is not None
    assert "waived by site.toml:waive.baseline.p2p_drop_max_pct: bandwidth varies" in skipped.get("message", "")


def test_evidence_without_a_figure_is_no_evidence_not_a_pass(pytester: pytest.Pytester, tmp_path: Path) -> None:
    def drop_2_6(document: Document) -> None:
        measurements = document["node"]["measurements"]
        measurements["p2p"] = [m for m in measurements["p2p"] if (m["src"], m["dst"]) != (2, 6)]

    after = _copy(tmp_path, "after", drop_2_6)
    common = (
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-evidence={after}",
        f"--nvlink-baseline={HEALTHY}",
        "-p",
        "no:cacheprovider",
    )
    result = pytester.runpytest(*common, "-k", "baseline_p2p and (gpu2-gpu6 or gpu2-gpu7)")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["no evidence for the comparison: GPU 2 -> GPU 6: unidirectional: not measured in this run*"]
    )
    result.assert_outcomes(passed=1, failed=1)
    skipped = pytester.runpytest(*common, "-k", "baseline_p2p and gpu2-gpu6", "--nvlink-evidence-missing=skip")
    skipped.assert_outcomes(skipped=1)


def test_live_save_before_then_compare_after(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any], tmp_path: Path
) -> None:
    install_fake_nvml("h100-8gpu-healthy")
    runs = tmp_path / "runs"
    before = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-save-dir={runs}", "-k", "topology or inventory", "-p", "no:cacheprovider"
    )
    assert before.ret == 0
    (saved,) = runs.glob("*/*.json")
    environment = json.loads(saved.read_text())["node"]["environment"]
    # A -k run proves only its selection: saved as partial, the folder does not offer it, the file only on opt-in.
    assert environment["outcome"] == "partial" and environment["versions"]["kernel"]
    refused = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-baseline={runs}", "-k", "baseline_facts", "-p", "no:cacheprovider"
    )
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    after = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-baseline={saved}",
        "--nvlink-baseline-any",
        "-k",
        "baseline_facts",
        "-p",
        "no:cacheprovider",
    )
    after.assert_outcomes(passed=8)
    after.stdout.fnmatch_lines([f"nvlink baseline: {saved} (*"])
