"""The whole plugin on bad inputs and unusual shapes: one clear line each, or a run that works.

Covers unreadable suite/threshold/snapshot files, empty option values, settings named as the
user spelled them (option or ini key), a save target checked before probing, --nvlink-suite=auto
on a node no suite fits, and suites with one GPU or no collectives.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.model import Measurements
from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.sources.snapshot.file import load_snapshot

HEALTHY = "--nvlink-replay=h100-8gpu-healthy"
ONE_GPU_SUITE = """
[suite]
description = "one H100 in a VM: inventory, NVLink state, PCIe, driver"
thresholds = "h100-sxm"
gpu_count = 1
gpu_models = ["NVIDIA H100 80GB HBM3"]
nvswitch = true
[topology]
default = "PCIE"
"""


def _usage_error(result: pytest.RunResult, line: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"ERROR: {line}".replace("[", "[[]")])  # brackets are literal here
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()


def _snapshot_with(pytester: pytest.Pytester, name: str, keep: int) -> Path:
    """The healthy snapshot cut down to its first ``keep`` GPUs (pairs and measurements among them)."""
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.source = "live"
    node.gpus = node.gpus[:keep]
    node.paths = [p for p in node.paths or [] if p.b < keep]
    node.p2p = [s for s in node.p2p or [] if s.src < keep and s.dst < keep]
    node.measurements = Measurements(
        p2p=[m for m in node.measurements.p2p if m.src < keep and m.dst < keep],
        collectives=[],
        nccl=None,
        host_link=[m for m in node.measurements.host_link if m.gpu < keep],
    )
    path = pytester.path / name
    save_snapshot(node, path)
    return path


# --- files that are not UTF-8 text, or that Python's parsers refuse --------------------------------


def test_suite_file_in_cp1252_is_a_usage_error(pytester: pytest.Pytester) -> None:
    suite = pytester.path / "mine.toml"
    suite.write_bytes(("# rack 4 — GPU node\n" + ONE_GPU_SUITE).encode("cp1252"))
    result = pytester.runpytest(f"--nvlink-suite={suite}", HEALTHY)
    _usage_error(result, f"{suite}: line 1, column 10: byte 0x97 is not UTF-8 (saved as Windows-1252 or Latin-1?)*")


def test_site_thresholds_in_utf16_is_a_usage_error(pytester: pytest.Pytester) -> None:
    site = pytester.path / "site.toml"
    site.write_bytes("[p2p]\nunidirectional_min_gbps = 360.0\n".encode("utf-16"))
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-thresholds={site}", HEALTHY)
    _usage_error(result, f"{site}: is UTF-16 text (byte-order mark at the start); save it as UTF-8")


def test_site_thresholds_with_a_5000_digit_integer(pytester: pytest.Pytester) -> None:
    site = pytester.makefile(".toml", site="[nvlink_errors]\nreplay_max = " + "9" * 5000 + "\n")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-thresholds={site}", HEALTHY)
    _usage_error(
        result, f"{site}: not valid TOML (line 2: an integer with 5000 digits (more than 4300 cannot be read))"
    )


def test_replayed_snapshot_nested_too_deep(pytester: pytest.Pytester) -> None:
    path = pytester.path / "deep.json"
    path.write_text('{"kind": ' + "[" * 100_000 + "]" * 100_000 + "}")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-replay={path}")
    _usage_error(result, f"--nvlink-replay: {path}: not a readable JSON snapshot (nested too deeply to read*")


def test_replayed_snapshot_with_a_duplicate_gpu(pytester: pytest.Pytester) -> None:
    document = json.loads((SNAPSHOTS / "h100-8gpu-healthy.json").read_text())
    document["node"]["gpus"][7]["index"] = 6
    path = pytester.path / "twice.json"
    path.write_text(json.dumps(document))
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-replay={path}")
    _usage_error(result, f"--nvlink-replay: {path}:node.gpus[7]: GPU index 6 is listed twice, also at gpus[6]*")


# --- empty values and settings named as the user gave them ------------------------------------------


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--nvlink-replay=", "--nvlink-replay: empty value; expected a snapshot .json or a shipped snapshot name"),
        ("--nvlink-save=", "--nvlink-save: empty value; expected a file to write the snapshot to"),
        ("--nvlink-thresholds=", "--nvlink-thresholds: empty value; expected a site threshold .toml"),
        ("--nvlink-evidence=", "--nvlink-evidence: empty value; expected a tool output file or a folder of them"),
        ("--nvlink-backend=", "--nvlink-backend: empty value; expected nccl or gloo"),
    ],
)
def test_empty_option_values_are_usage_errors(pytester: pytest.Pytester, option: str, message: str) -> None:
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", option)
    _usage_error(result, message)


def test_empty_suite_is_a_usage_error_not_an_inert_run(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--nvlink-suite=")
    _usage_error(result, "--nvlink-suite: empty value; expected a shipped suite name, a suite .toml or auto")


def test_ini_errors_name_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nnvlink_suite = h100-8gpu\nnvlink_replay = h100-8gpu-healthy\nnvlink_pair_mode = random\n"
    )
    result = pytester.runpytest()
    _usage_error(result, "tox.ini:nvlink_pair_mode: expected serial or concurrent, got 'random'")


def test_ini_empty_replay_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nnvlink_suite = h100-8gpu\nnvlink_replay =\n")
    result = pytester.runpytest()
    _usage_error(result, "tox.ini:nvlink_replay: empty value; expected a snapshot .json or a shipped snapshot name")


def test_ini_both_sources_names_both_ini_keys(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        f"[pytest]\nnvlink_suite = h100-8gpu\nnvlink_replay = h100-8gpu-healthy\nnvlink_evidence = {SNAPSHOTS}\n"
    )
    result = pytester.runpytest()
    _usage_error(result, "tox.ini:nvlink_replay and tox.ini:nvlink_evidence: choose one source, not both")


def test_shipped_threshold_set_name_given_as_site_file(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-thresholds=h200-sxm", HEALTHY)
    _usage_error(
        result,
        "--nvlink-thresholds: h200-sxm is not a file; shipped threshold sets (a100-sxm4, *h200-sxm*) are chosen by "
        "a suite's suite.thresholds key — here give a site .toml laid over them*",
    )


def test_threshold_set_typo_in_a_suite_names_suite_file_and_key(pytester: pytest.Pytester) -> None:
    suite = pytester.makefile(".toml", mine=ONE_GPU_SUITE.replace('"h100-sxm"', '"h100-sx"'))
    result = pytester.runpytest(f"--nvlink-suite={suite}", HEALTHY)
    _usage_error(result, f"{suite}:suite.thresholds: unknown threshold set 'h100-sx'; shipped sets: a100-sxm4, *")


def test_extends_to_a_missing_file_names_the_referencing_file(pytester: pytest.Pytester) -> None:
    site = pytester.makefile(".toml", site="extends = 'base/h100-site.toml'\n")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-thresholds={site}", HEALTHY)
    missing = pytester.path / "base" / "h100-site.toml"
    _usage_error(result, f"{site}:extends: 'base/h100-site.toml' resolves to {missing}, which is not a file")


def test_dev_null_as_evidence_is_not_a_regular_file(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-evidence=/dev/null")
    _usage_error(result, "--nvlink-evidence: /dev/null is not a regular file or folder (a device or pipe)")


# --- --nvlink-save: checked before anything runs, written atomically, reported -----------------------


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("/proc/x.json", "--nvlink-save: cannot write /proc/x.json: * in /proc"),
        ("/dev/full", "--nvlink-save: /dev/full is not a regular file (a device or pipe); the snapshot would be lost"),
        ("{tmp}", "--nvlink-save: {tmp} is a folder; give a file name such as {tmp}/node.json"),
    ],
)
def test_unwritable_save_target_stops_before_probing(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any], target: str, message: str
) -> None:
    fake = install_fake_nvml("h100-8gpu-healthy")
    tmp = str(pytester.path)
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-save={target.format(tmp=tmp)}")
    _usage_error(result, message.format(tmp=tmp))
    assert fake.fake_state.init_count == 0  # refused before NVML was touched


def test_save_prints_the_path_and_leaves_no_temporary_file(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]
) -> None:
    install_fake_nvml("h100-8gpu-healthy")
    target = pytester.path / "out" / "node.json"
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "-k", "gpu_count", f"--nvlink-save={target}")
    assert result.ret == 0
    lines = result.stdout.lines
    saved = lines.index(f"pytest-nvlink: snapshot saved to {target}")
    assert "1 passed" in lines[saved + 1]  # right above the outcome line, not glued to the progress line
    assert load_snapshot(target).gpus
    assert sorted(p.name for p in target.parent.iterdir()) == ["node.json"]


# --- --nvlink-suite=auto on a node that no suite fits ----------------------------------------------


def test_auto_without_a_matching_suite_fails_the_gate_and_keeps_the_reports(pytester: pytest.Pytester) -> None:
    six = _snapshot_with(pytester, "six.json", keep=6)
    xml_path, saved = pytester.path / "report.xml", pytester.path / "saved.json"
    result = pytester.runpytest(
        "--nvlink-suite=auto", f"--nvlink-replay={six}", f"--junitxml={xml_path}", f"--nvlink-save={saved}"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    message = (
        "6 x NVIDIA H100 80GB HBM3: no shipped suite has 6 GPUs; h100-8gpu expects 8 — 2 GPU(s) missing or "
        "hidden? (dmesg Xid 79, CUDA_VISIBLE_DEVICES, container runtime or VM passthrough)"
    )
    result.stdout.fnmatch_lines(
        [
            "nvlink: suite auto-selection: no shipped suite matches 6 x NVIDIA H100 80GB HBM3; only the inventory "
            "gate runs (judged against h100-8gpu for reference)",
            message,
            "FAILED nvlink/test_inventory.py::test_gpu_count*",
        ]
    )
    case = next(c for c in ET.parse(xml_path).getroot().iter("testcase") if c.get("name") == "test_gpu_count")
    failure = case.find("failure")
    assert failure is not None and message in failure.get("message", "")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["measured"] == "6" and props["expected"] == "8" and str(props["suite_key"]).endswith("suite.gpu_count")
    assert len(load_snapshot(saved).gpus) == 6


def test_auto_without_a_driver_fails_the_gate_and_saves_the_node(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]
) -> None:
    install_fake_nvml(None, library_missing=True)
    saved = pytester.path / "node.json"
    result = pytester.runpytest("--nvlink-suite=auto", f"--nvlink-save={saved}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        [
            "no GPUs found (NVML library not found — is the NVIDIA driver installed?), so no suite can be "
            "auto-selected",
            f"pytest-nvlink: snapshot saved to {saved}",
        ]
    )
    assert load_snapshot(saved).probe_errors


def test_auto_with_an_unknown_model_says_to_write_a_suite(pytester: pytest.Pytester) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.gpus = [dataclasses.replace(gpu, name="NVIDIA RTX 6000 Ada Generation") for gpu in node.gpus]
    path = pytester.path / "ada.json"
    save_snapshot(node, path)
    result = pytester.runpytest("--nvlink-suite=auto", f"--nvlink-replay={path}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        [
            "8 x NVIDIA RTX 6000 Ada Generation: no shipped suite accepts this GPU model (shipped suites: *); write a "
            "suite file for this node*"
        ]
    )


# --- suite shapes: one GPU, no collectives ------------------------------------------------------------


def test_one_gpu_suite_collects_no_pair_or_collective_checks(pytester: pytest.Pytester) -> None:
    one = _snapshot_with(pytester, "one.json", keep=1)
    suite = pytester.makefile(".toml", one_gpu=ONE_GPU_SUITE)
    result = pytester.runpytest(f"--nvlink-suite={suite}", f"--nvlink-replay={one}", "-v")
    assert result.ret == 0, result.stdout.str()
    # gpu count + driver + GPU 0: model, 4 NVLink checks, fabric, PCIe, Xid events, host link
    result.assert_outcomes(passed=11)
    result.stdout.fnmatch_lines(
        [
            "nvlink: not collected: pair checks (paths, P2P status, P2P bandwidth) and collective checks: "
            "suite one_gpu has 1 GPU (one_gpu.toml:suite.gpu_count)",
            "*collected 11 items",
        ]
    )
    # Item names, not the word: the checkout's own path may contain "nccl".
    collected = result.stdout.str()
    assert all(name not in collected for name in ("test_path", "test_nccl", "test_collective", "test_p2p"))


def test_empty_collective_list_collects_no_collective_checks(pytester: pytest.Pytester) -> None:
    text = (Path(__file__).resolve().parents[1] / "suites" / "h100-8gpu.toml").read_text()
    suite = pytester.makefile(
        ".toml", mine=text.replace('collectives = ["all_reduce"', 'collectives = [] # ["all_reduce"')
    )
    result = pytester.runpytest(f"--nvlink-suite={suite}", HEALTHY)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=388 - 5 - 1)  # five collectives and the NCCL transport audit
    result.stdout.fnmatch_lines(["nvlink: not collected: collective checks: mine.toml:measure.collectives is empty"])


def test_more_links_than_the_suite_expects_blames_the_suite(pytester: pytest.Pytester) -> None:
    text = (Path(__file__).resolve().parents[1] / "suites" / "h100-8gpu.toml").read_text()
    suite = pytester.makefile(".toml", nvl=text.replace('default = "NV18"', 'default = "NV12"'))
    site = pytester.makefile(".toml", site="[nvlink]\nactive_links = 12\n")
    result = pytester.runpytest(
        f"--nvlink-suite={suite}", f"--nvlink-thresholds={site}", HEALTHY, "-k", "active_links or test_path"
    )
    result.assert_outcomes(failed=8 + 28)
    result.stdout.fnmatch_lines(
        [
            "GPU 0: 18 NVLinks active, more than the 12 this SKU has (site.toml:nvlink.active_links); a link cannot "
            "appear, so the suite or threshold set does not describe this NVIDIA H100 80GB HBM3*",
            "GPU 0 <-> GPU 1: path is NV18, expected NV12 (nvl.toml:topology.default): more NVLinks than this SKU has "
            "per GPU (site.toml:nvlink.active_links = 12), so the suite or threshold set does not describe this node*",
        ]
    )
    assert "link down" not in result.stdout.str() and "PCIe placement" not in result.stdout.str()
