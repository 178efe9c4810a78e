"""``--nvlink-quick``: the fact checks only, one line per failure, pytest's exit status, and no torch."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from conftest import SNAPSHOTS, serve_live_node

from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.plugin.kit import CHECKS_DIR
from pytest_nvlink.sources.snapshot.file import load_snapshot

# A -p plugin for the child pytest: which measuring modules had been imported when the session ended.
PROBE = """
import json, os, sys

def pytest_unconfigure(config):
    loaded = sorted(
        name for name in sys.modules
        if name.split(".")[0] == "torch" or name.endswith(("test_bandwidth", "test_collectives", "test_baseline"))
        # the measuring modules; the live provider (built, never asked in quick mode) measures nothing at import
        or (name.startswith("pytest_nvlink.measure.") and name != "pytest_nvlink.measure.provider")
    )
    with open(os.environ["NVLINK_PROBE_OUT"], "w") as out:
        json.dump(loaded, out)
"""


def _with_probe(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytester.makepyfile(nvlink_import_probe=PROBE)
    out = pytester.path / "imports.json"
    monkeypatch.setenv("NVLINK_PROBE_OUT", str(out))
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    return out


def _lines(result: pytest.RunResult) -> list[str]:
    # pytest writes one empty line before its terminal summary; every other line is ours.
    return [line for line in result.outlines if line.strip()]


def test_a_degraded_node_prints_one_line_per_failure_and_exits_1_without_importing_torch(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    imports = _with_probe(pytester, monkeypatch)
    # The shipped checks folder named explicitly: its measuring modules are still never imported.
    result = pytester.runpytest_subprocess(
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-degraded",
        "--nvlink-quick",
        "-p",
        "nvlink_import_probe",
        "-p",
        "no:cacheprovider",
        str(CHECKS_DIR),
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    *failures, summary = _lines(result)
    assert summary == "nvlink FAIL hgx-h100-02: 19 of 134 quick checks failed (suite h100-8gpu)"
    assert len(failures) == 19
    assert all(line.startswith("nvlink FAIL hgx-h100-02 test_") for line in failures), failures
    assert (
        "nvlink FAIL hgx-h100-02 test_nvlink_active_links[gpu3]: GPU 3: 16 of 18 NVLinks active "
        "(h100-sxm.toml:nvlink.active_links)" in "\n".join(failures)
    )
    assert {line.split()[3].split("[")[0] for line in failures} == {
        "test_nvlink_active_links",
        "test_nvlink_errors",
        "test_fabric",
        "test_path",
        "test_p2p_status",
    }
    assert json.loads(imports.read_text(encoding="utf-8")) == []


def test_run_window_figures_of_a_replay_are_not_judged_in_quick_mode(pytester: pytest.Pytester) -> None:
    # Errors that grew during the saved run's measurement campaign: a full replay fails on them, a quick one
    # judges only what a quick live run could see (the lifetime totals).
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    links = node.gpus[0].nvlinks
    assert links is not None and links[0].errors_run is not None
    links[0].errors_run["replay"] = 500
    save_snapshot(node, pytester.path / "grew.json")
    replay = f"--nvlink-replay={pytester.path / 'grew.json'}"
    full = pytester.runpytest("--nvlink-suite=h100-8gpu", replay, "-k", "nvlink_errors and gpu0")
    full.assert_outcomes(failed=1, deselected=full.parseoutcomes()["deselected"])
    json_file = pytester.path / "quick.json"
    quick = pytester.runpytest("--nvlink-suite=h100-8gpu", replay, "--nvlink-quick", f"--nvlink-json={json_file}")
    assert quick.ret == pytest.ExitCode.OK
    assert _lines(quick) == ["nvlink PASS hgx-h100-01: 0 of 134 quick checks failed (suite h100-8gpu)"]
    results = json.loads(json_file.read_text(encoding="utf-8"))
    assert {item["area"] for item in results["items"]} == {"inventory", "nvlink", "topology", "platform"}
    assert "test_pcie_link" not in {item["check"] for item in results["items"]}
    errors = next(item for item in results["items"] if item["nodeid"].endswith("test_nvlink_errors[gpu0]"))
    assert "judged: lifetime totals only" in errors["message"]
    assert results["node"]["measurements"] == {"p2p": [], "collectives": [], "nccl": None, "host_link": []}


def test_a_quick_rack_replay_judges_trays_and_clique_but_not_send_recv(pytester: pytest.Pytester) -> None:
    json_file = pytester.path / "rack.json"
    result = pytester.runpytest(
        "--nvlink-suite=gb200-nvl72",
        "--nvlink-replay=gb200-nvl72-faulty",
        "--nvlink-quick",
        f"--nvlink-json={json_file}",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    *failures, summary = _lines(result)
    assert summary == "nvlink FAIL rack-gb200-r07-c01: 5 of 597 quick checks failed (suite gb200-nvl72)"
    clique = [line for line in failures if "test_rack_clique" in line]
    assert len(clique) == 1 and clique[0].startswith(
        "nvlink FAIL rack-gb200-r07-c01 test_rack_clique[tray5]: tray 5 (host gb200-r07-c06) is in clique 32765"
    )
    checks = {item["check"] for item in json.loads(json_file.read_text(encoding="utf-8"))["items"]}
    # Trays present and one clique are facts; send/recv between trays is a measurement, left to a full run.
    assert {"test_rack_trays", "test_rack_tray", "test_rack_clique"} <= checks
    assert "test_rack_sendrecv" not in checks


def test_a_live_quick_run_on_fake_nvml_passes_in_one_line_without_torch(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_live_node(pytester, monkeypatch, load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json"), 8)
    imports = pytester.path / "imports.json"
    pytester.makepyfile(nvlink_import_probe=PROBE)
    monkeypatch.setenv("NVLINK_PROBE_OUT", str(imports))
    result = pytester.runpytest_subprocess(
        "--nvlink-suite=h100-8gpu",
        "--nvlink-quick",
        "-p",
        "fake_nvml_plugin",
        "-p",
        "nvlink_import_probe",
        "-p",
        "no:cacheprovider",
    )
    host = socket.gethostname()
    assert _lines(result) == [f"nvlink PASS {host}: 0 of 134 quick checks failed (suite h100-8gpu)"]
    assert result.ret == pytest.ExitCode.OK
    assert json.loads(imports.read_text(encoding="utf-8")) == []


def test_a_live_quick_run_names_a_lost_gpu_in_its_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    serve_live_node(pytester, monkeypatch, node, 7)  # the suite expects 8
    result = pytester.runpytest_subprocess(
        "--nvlink-suite=h100-8gpu", "--nvlink-quick", "--nvlink-host=gpu009", "-p", "fake_nvml_plugin"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = _lines(result)
    assert lines[0].startswith("nvlink FAIL gpu009 test_gpu_count: ")
    assert lines[-1].startswith("nvlink FAIL gpu009: ")
    assert all(line.startswith("nvlink FAIL gpu009 ") for line in lines[:-1])


@pytest.mark.parametrize("option", ["--nvlink-baseline", "--nvlink-save-dir"])
def test_quick_refuses_baseline_folders(pytester: pytest.Pytester, option: str) -> None:
    pytester.mkdir("runs")
    replay = "--nvlink-replay=h100-8gpu-healthy"
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", replay, "--nvlink-quick", f"{option}=runs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option} and --nvlink-quick: a quick run measures nothing*"])


def test_the_ini_key_turns_quick_mode_on(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nnvlink_quick = true\n")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-vm-pcie")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert _lines(result)[-1].startswith("nvlink FAIL vm-h100-guest: ")
    assert not any("bandwidth" in line or "collective" in line for line in _lines(result))
