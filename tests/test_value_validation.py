"""Impossible numbers (NaN, infinity, negative counters, zero latency) are input errors naming file and key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EVIDENCE, SNAPSHOTS, snapshot_with_lists

from pytest_nvlink.model.document import SnapshotError
from pytest_nvlink.sources.evidence.load import EvidenceError, load_evidence
from pytest_nvlink.sources.snapshot.file import load_snapshot


def _document() -> dict[str, Any]:
    document = snapshot_with_lists(SNAPSHOTS / "h100-8gpu-healthy.json")
    return document


def _p2p_index(document: dict[str, Any], kind: str) -> int:
    return next(i for i, m in enumerate(document["node"]["measurements"]["p2p"]) if m["kind"] == kind)


def _nan_speed(d: dict[str, Any]) -> str:
    d["node"]["gpus"][3]["nvlinks"][7]["speed_gbps"] = float("nan")
    return "node.gpus[3].nvlinks[7].speed_gbps: nan is not a finite number"


def _zero_latency(d: dict[str, Any]) -> str:
    index = _p2p_index(d, "latency")
    d["node"]["measurements"]["p2p"][index]["value"] = 0.0
    return f"node.measurements.p2p[{index}].value: 0.0 is impossible here (must be greater than 0)"


def _negative_latency(d: dict[str, Any]) -> str:
    index = _p2p_index(d, "latency")
    d["node"]["measurements"]["p2p"][index]["value"] = -2.5
    return f"node.measurements.p2p[{index}].value: -2.5 is impossible here (must be greater than 0)"


def _infinite_busbw(d: dict[str, Any]) -> str:
    d["node"]["measurements"]["collectives"][0]["busbw_gbps"] = float("inf")
    return "node.measurements.collectives[0].busbw_gbps: inf is not a finite number"


def _minus_infinite_bandwidth(d: dict[str, Any]) -> str:
    d["node"]["measurements"]["p2p"][0]["value"] = float("-inf")
    return "node.measurements.p2p[0].value: -inf is not a finite number"


def _cancelling_counters(d: dict[str, Any]) -> str:
    links = d["node"]["gpus"][5]["nvlinks"]
    links[7]["errors"]["replay"] = 3
    links[8]["errors"]["replay"] = -3
    return "node.gpus[5].nvlinks[8].errors.replay: -3 is impossible here (must not be negative)"


def _negative_link_index(d: dict[str, Any]) -> str:
    d["node"]["gpus"][0]["nvlinks"][0]["link"] = -1
    return "node.gpus[0].nvlinks[0].link: -1 is impossible here (must not be negative)"


@pytest.mark.parametrize(
    "damage",
    [
        _nan_speed,
        _zero_latency,
        _negative_latency,
        _infinite_busbw,
        _minus_infinite_bandwidth,
        _cancelling_counters,
        _negative_link_index,
    ],
)
def test_impossible_snapshot_value_names_file_and_json_path(tmp_path: Path, damage: Any) -> None:
    document = _document()
    expected = damage(document)
    path = tmp_path / "bad.json"
    # json.dumps writes NaN/Infinity tokens, which json.loads accepts by default: exactly the trap.
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(SnapshotError) as caught:
        load_snapshot(path)
    assert str(caught.value).startswith(f"{path}:{expected}")


def test_shipped_snapshots_have_no_impossible_values() -> None:
    for path in sorted(SNAPSHOTS.glob("*.json")):
        load_snapshot(path)


def test_replay_of_a_snapshot_with_nan_is_a_usage_error(pytester: pytest.Pytester) -> None:
    document = _document()
    expected = _nan_speed(document)
    bad = pytester.path / "nan.json"
    bad.write_text(json.dumps(document), encoding="utf-8")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-replay={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    pattern = expected.replace("[", "[[]")
    result.stderr.fnmatch_lines([f"ERROR: *nan.json:{pattern}*"])


def _errors_file(tmp_path: Path) -> Path:
    original = (EVIDENCE / "nvlink" / "a100-sxm4-40gb-vm-brev-nvlink-e-all.txt").read_text(encoding="utf-8")
    lines = original.split("\n")
    target = next(i for i, line in enumerate(lines) if "Link 1: Replay Errors: 0" in line)
    lines[target] = lines[target].replace("Replay Errors: 0", "Replay Errors: -3")
    path = tmp_path / "nvlink-e.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def test_negative_counter_in_evidence_names_file_line_and_key(tmp_path: Path) -> None:
    path = _errors_file(tmp_path)
    line = next(n for n, text in enumerate(path.read_text().split("\n"), start=1) if "-3" in text)
    with pytest.raises(EvidenceError) as caught:
        load_evidence([path])
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: gpus[0].")
    assert message.endswith("[1].errors.replay: -3 is impossible here (must not be negative)")


def test_negative_counter_in_evidence_stops_the_plugin(pytester: pytest.Pytester) -> None:
    path = _errors_file(pytester.path)
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *nvlink-e.txt:*: gpus[[]0[]].*[[]1[]].errors.replay: -3 is impossible*"])


def test_impossible_figure_found_after_merging_names_file_and_line(tmp_path: Path) -> None:
    original = (EVIDENCE / "p2pBandwidthLatencyTest" / "a100-sxm4-80gb-8gpu-distserve3.txt").read_text(encoding="utf-8")
    lines = original.split("\n")
    row = lines.index("P2P=Enabled Latency (P2P Writes) Matrix (us)") + 2  # GPU 0's row
    lines[row] = lines[row].replace("3.38   3.30", "-3.38   3.30", 1)  # GPU 0 -> GPU 1
    path = tmp_path / "p2p.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(EvidenceError) as caught:
        load_evidence([path])
    message = str(caught.value)
    assert message.startswith(f"{path}:{row + 1}: measurements.p2p[")
    assert message.endswith("].value: -3.38 is impossible here (must be greater than 0)")
