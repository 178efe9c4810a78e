"""The README demo: replaying the shipped snapshots fails exactly the items a person would expect."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from itertools import combinations

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.sources.snapshot.file import load_snapshot

P2P_FIGURES = ("test_p2p_unidirectional", "test_p2p_bidirectional", "test_p2p_latency", "test_p2p_path_proof")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
TOTAL = 2 + 9 * 8 + 28 + 56 + 4 * 56 + 5 + 1  # 9 per-GPU checks (test_host_link the ninth)


def _run(pytester: pytest.Pytester, snapshot: str) -> tuple[dict[str, ET.Element], pytest.RunResult]:
    xml_path = pytester.path / f"{snapshot}.xml"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-replay={snapshot}", f"--junitxml={xml_path}", "-p", "no:cacheprovider"
    )
    cases = {case.get("name", ""): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    assert len(cases) == TOTAL
    return cases, result


def _failed(cases: dict[str, ET.Element]) -> set[str]:
    return {name for name, case in cases.items() if case.find("failure") is not None or case.find("error") is not None}


def _message(cases: dict[str, ET.Element], name: str) -> str:
    failure = cases[name].find("failure")
    assert failure is not None, name
    return failure.get("message", "")


def test_healthy_snapshot_passes_everything(pytester: pytest.Pytester) -> None:
    cases, result = _run(pytester, "h100-8gpu-healthy")
    assert result.ret == 0
    assert _failed(cases) == set()
    assert not any(case.find("skipped") is not None for case in cases.values())


def test_degraded_snapshot_fails_exactly_the_broken_parts(pytester: pytest.Pytester) -> None:
    cases, result = _run(pytester, "h100-8gpu-degraded")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    expected = {"test_nvlink_active_links[gpu3]", "test_nvlink_errors[gpu5]"}
    expected |= {f"test_fabric[gpu{i}]" for i in range(8)}
    expected |= {f"test_path[gpu{a}-gpu{b}]" for a, b in combinations(range(8), 2) if 3 in (a, b)}
    expected |= {f"{check}[gpu{a}-gpu{b}]" for check in ("test_p2p_status", *P2P_FIGURES) for a, b in ((2, 6), (6, 2))}
    expected |= {"test_collective_busbw[all_reduce]", "test_nccl_transport", "test_host_link[gpu3]"}
    assert _failed(cases) == expected
    assert "host->device bandwidth 14.2 GB/s, below 48.0 GB/s" in _message(cases, "test_host_link[gpu3]")
    assert "16 of 18 NVLinks active" in _message(cases, "test_nvlink_active_links[gpu3]")
    assert "silent PCIe fallback" in _message(cases, "test_p2p_path_proof[gpu2-gpu6]")
    assert "37.2 GB/s, below 335.0 GB/s" in _message(cases, "test_p2p_unidirectional[gpu2-gpu6]")
    assert "via SHM/direct/direct" in _message(cases, "test_nccl_transport")
    assert "Fabric Manager is not running" in _message(cases, "test_fabric[gpu4]")
    result.stdout.fnmatch_lines(["worst unidirectional pair: GPU 6 -> GPU 2 at 36.8 GB/s"])
    result.stdout.fnmatch_lines(["all_reduce *4096 *8 *352.4 *400.0 *BELOW"])


def test_vm_snapshot_fails_on_silent_pcie_fallback(pytester: pytest.Pytester) -> None:
    cases, result = _run(pytester, "h100-8gpu-vm-pcie")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    passing = {"test_gpu_count", "test_driver"}
    passing |= {
        f"{check}[gpu{i}]"
        for check in ("test_gpu_model", "test_pcie_link", "test_xid", "test_host_link")
        for i in range(8)
    }
    assert _failed(cases) == set(cases) - passing
    assert "silent PCIe fallback" in _message(cases, "test_path[gpu0-gpu1]")
    assert "passthrough VM guest" in _message(cases, "test_path[gpu0-gpu1]")
    assert "silent PCIe fallback" in _message(cases, "test_p2p_unidirectional[gpu0-gpu5]")
    assert {f"test_collective_busbw[{op}]" for op in COLLECTIVES} <= _failed(cases)


def test_replay_rejudges_against_a_site_file(pytester: pytest.Pytester) -> None:
    site = pytester.makefile(".toml", site="[p2p]\nunidirectional_min_gbps = 376.5\n")
    xml_path = pytester.path / "site.xml"
    pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-healthy",
        f"--nvlink-thresholds={site}",
        "-k",
        "p2p_unidirectional",
        f"--junitxml={xml_path}",
    )
    cases = {case.get("name", ""): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    recorded = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json").measurements.p2p
    fast = {
        f"test_p2p_unidirectional[gpu{m.src}-gpu{m.dst}]"
        for m in recorded
        if m.kind == "unidirectional" and m.value is not None and m.value >= 376.5
    }
    assert len(cases) == 56
    assert 0 < len(fast) < 56
    assert _failed(cases) == set(cases) - fast
    assert "site.toml:p2p.unidirectional_min_gbps" in _message(cases, sorted(_failed(cases))[0])
