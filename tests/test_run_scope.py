"""PASS only for a complete run (issue 24, section 1): a run of part of the suite is PARTIAL, one stopped
from outside INTERRUPTED, in every output: terminal, results JSON, HTML banner, JUnit properties, the
saved snapshot, the quick line, the baseline and the fleet merge.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import REPO

from pytest_nvlink.report.json_results import load_schema

FLEET_SCHEMA = REPO / "pytest_nvlink" / "fleet" / "fleet.schema.json"

DEGRADED = ("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-degraded")
HEALTHY = ("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy")
OUTPUTS = ("--nvlink-json=r.json", "--nvlink-report=r.html", "--junitxml=j.xml")
# The README's own topology-only selection.
TOPOLOGY_ONLY = "not bandwidth and not collectives and not pcie and not host_link"


def _results(pytester: pytest.Pytester, name: str = "r.json") -> dict[str, Any]:
    document: dict[str, Any] = json.loads((pytester.path / name).read_text(encoding="utf-8"))
    jsonschema.validate(document, load_schema())
    return document


def _junit_properties(pytester: pytest.Pytester) -> dict[str, str]:
    root = ET.parse(pytester.path / "j.xml").getroot()
    return {p.get("name", ""): p.get("value", "") for p in root.iter("property")}


def _banner(pytester: pytest.Pytester) -> str:
    html = (pytester.path / "r.html").read_text(encoding="utf-8")
    return html.split("<h1>", 1)[1].split("</h1>", 1)[0]


def _no_pass_anywhere(pytester: pytest.Pytester, result: pytest.RunResult, verdict: str) -> None:
    assert _results(pytester)["verdict"] == verdict
    assert _banner(pytester).startswith(f"{verdict}:")
    assert _junit_properties(pytester)["nvlink_verdict"] == verdict
    result.stdout.fnmatch_lines([f"pytest-nvlink: {verdict} run: *(no output of this run says PASS)"])


# --- deselected by -k, -m, --deselect ----------------------------------------------------------------


def test_a_k_selection_of_a_degraded_node_is_partial_everywhere_and_exits_0(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*DEGRADED, "-k", "test_driver", *OUTPUTS)
    assert result.ret == pytest.ExitCode.OK  # pytest's convention for a selection that passed
    _no_pass_anywhere(pytester, result, "PARTIAL")
    left_out = _results(pytester)["left_out"]
    assert (left_out["full_set"], left_out["ran"]) == (388, 1)
    assert left_out["deselected"]["test_p2p_unidirectional"] == 56
    assert sum(left_out["deselected"].values()) == 387 and left_out["not_run"] == {}
    assert "387 deselected" in _junit_properties(pytester)["nvlink_left_out"]
    result.stdout.fnmatch_lines(["*PARTIAL run: 1 of 388 nvlink checks ran; left out: 387 deselected*"])


def test_the_readmes_topology_only_selection_is_partial_not_pass(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*DEGRADED, "-k", TOPOLOGY_ONLY, *OUTPUTS)
    document = _results(pytester)
    assert document["verdict"] in ("PARTIAL", "FAIL") and document["verdict"] != "PASS"
    if result.ret == pytest.ExitCode.OK:
        _no_pass_anywhere(pytester, result, "PARTIAL")
    assert document["left_out"]["deselected"]["test_p2p_unidirectional"] == 56


def test_a_marker_or_deselect_selection_is_partial(pytester: pytest.Pytester) -> None:
    one = "nvlink/test_inventory.py::test_driver"
    result = pytester.runpytest(*HEALTHY, "--deselect", one, *OUTPUTS)
    assert result.ret == pytest.ExitCode.OK
    _no_pass_anywhere(pytester, result, "PARTIAL")
    assert _results(pytester)["left_out"]["deselected"] == {"test_driver": 1}
    result = pytester.runpytest(*HEALTHY, "-m", "not nvlink", "--nvlink-json=m.json")
    assert _results(pytester, "m.json")["verdict"] == "PARTIAL"


def test_a_complete_healthy_run_still_says_pass_and_has_no_left_out_key(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*HEALTHY, *OUTPUTS)
    assert result.ret == pytest.ExitCode.OK
    document = _results(pytester)
    assert document["verdict"] == "PASS" and "left_out" not in document
    assert "nvlink_verdict" not in _junit_properties(pytester)
    assert "PARTIAL" not in result.stdout.str()


# --- not run after -x / --maxfail, --lf --------------------------------------------------------------


@pytest.mark.parametrize("stop", [["-x"], ["--maxfail=2"]])
def test_checks_not_run_after_a_stop_are_named_and_the_failure_stays_fail(
    pytester: pytest.Pytester, stop: list[str]
) -> None:
    result = pytester.runpytest(*DEGRADED, *stop, *OUTPUTS)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    document = _results(pytester)
    assert document["verdict"] == "FAIL"  # a failure stays FAIL; the record says partial too
    left_out = document["left_out"]
    assert sum(left_out["not_run"].values()) == left_out["full_set"] - left_out["ran"] > 0
    assert left_out["not_run_reason"].startswith("stopping after")
    assert _junit_properties(pytester)["nvlink_verdict"] == "PARTIAL"
    result.stdout.fnmatch_lines(["*PARTIAL run: * not run (stopping after *"])


def test_a_last_failed_rerun_is_not_the_whole_suite(pytester: pytest.Pytester) -> None:
    first = pytester.runpytest("-p", "cacheprovider", *DEGRADED)
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    rerun = pytester.runpytest("-p", "cacheprovider", *DEGRADED, "--lf", "--nvlink-json=r.json")
    document = _results(pytester)
    assert document["verdict"] == "FAIL" and "left_out" in document, rerun.stdout.str()
    assert (
        document["left_out"]["ran"] < document["left_out"]["full_set"] or document["left_out"]["modules_not_collected"]
    )


# --- quick mode: its own full set ----------------------------------------------------------------------


def test_a_quick_selection_says_partial_and_a_whole_quick_run_says_pass(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*HEALTHY, "--nvlink-quick", "-k", "test_driver")
    assert result.ret == pytest.ExitCode.OK
    line = result.stdout.lines[-1]
    assert line.startswith("nvlink PARTIAL ") and "deselected" in line, line
    assert "nvlink PASS" not in result.stdout.str()
    whole = pytester.runpytest(*HEALTHY, "--nvlink-quick")
    assert whole.stdout.lines[-1].startswith("nvlink PASS "), whole.stdout.str()  # quick's full set: the quick checks


# --- the saved snapshot, the baseline and the fleet ------------------------------------------------------


def test_a_saved_partial_run_is_never_a_baseline(pytester: pytest.Pytester) -> None:
    saved = pytester.runpytest(*HEALTHY, "-k", "test_driver", "--nvlink-save-dir=runs", "--nvlink-save=part.json")
    assert saved.ret == pytest.ExitCode.OK
    (snapshot,) = (pytester.path / "runs").glob("*/*.json")
    assert json.loads(snapshot.read_text())["node"]["environment"]["outcome"] == "partial"
    folder = pytester.runpytest(*HEALTHY, "--nvlink-baseline=runs")
    assert folder.ret == pytest.ExitCode.USAGE_ERROR
    folder.stderr.fnmatch_lines(["ERROR: --nvlink-baseline: *holds no snapshot of a passing run*"])
    refused = pytester.runpytest(*HEALTHY, "--nvlink-baseline=part.json")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["ERROR: --nvlink-baseline: part.json was saved by a run that ran only part of*"])
    assert len(refused.stderr.str().strip().splitlines()) == 1


def test_a_failing_baseline_file_is_taken_only_with_the_opt_in_printed_in_the_header(
    pytester: pytest.Pytester,
) -> None:
    pytester.runpytest(*DEGRADED, "--nvlink-save=failed.json")
    assert json.loads((pytester.path / "failed.json").read_text())["node"]["environment"]["outcome"] == "failed"
    refused = pytester.runpytest(*HEALTHY, "--nvlink-baseline=failed.json")
    refused.stderr.fnmatch_lines(["ERROR: --nvlink-baseline: failed.json was saved by a run that failed*"])
    taken = pytester.runpytest(*HEALTHY, "--nvlink-baseline=failed.json", "--nvlink-baseline-any", "-k", "baseline")
    taken.stdout.fnmatch_lines(["nvlink baseline: --nvlink-baseline-any: taken whatever*(recorded: failed)"])
    pytester.makeini("[pytest]\nnvlink_baseline_any = true\n")
    by_ini = pytester.runpytest(*HEALTHY, "--nvlink-baseline=failed.json", "-k", "baseline")
    by_ini.stdout.fnmatch_lines(["nvlink baseline: *nvlink_baseline_any: taken whatever the outcome*"])


def test_the_fleet_counts_a_partial_node_as_not_passing_and_says_why(pytester: pytest.Pytester) -> None:
    pytester.runpytest(*HEALTHY, "-k", "test_driver", "--nvlink-json=node.json")
    fleet = subprocess.run(
        [sys.executable, "-m", "pytest_nvlink.cli", "fleet", "node.json", "--json", "fleet.json"],
        cwd=pytester.path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert fleet.returncode == 1, fleet.stdout + fleet.stderr
    fleet_document = json.loads((pytester.path / "fleet.json").read_text())
    jsonschema.validate(fleet_document, json.loads(FLEET_SCHEMA.read_text()))
    (node,) = fleet_document["nodes"]
    assert node["status"] == "incomplete" and node["run_verdict"] == "PARTIAL"
    assert "PARTIAL run: 1 of 388 nvlink checks ran" in node["first_failure"]


# --- interrupted runs: Ctrl-C, SIGTERM, a Ctrl-C while outputs are written -----------------------------

SLEEPER = """
import os, time, pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if os.environ["SLEEP_IN"] in item.nodeid and not os.path.exists("started"):
        open("started", "w").write(item.nodeid)
        time.sleep(30)
    yield

def pytest_nvlink_report_sections(results):
    if os.environ.get("SLEEP_IN_OUTPUTS"):
        open("writing", "w").write("x")
        time.sleep(30)
"""


def _start(pytester: pytest.Pytester, sleep_in: str, args: list[str], **env: str) -> subprocess.Popen[str]:
    pytester.makepyfile(nvlink_sleeper=SLEEPER)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "nvlink_sleeper", "-q", *args]
    environment = {**os.environ, "PYTHONPATH": f"{REPO}:{pytester.path}", "SLEEP_IN": sleep_in, **env}
    return subprocess.Popen(
        command, cwd=pytester.path, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the child never reached the point to interrupt"
        time.sleep(0.05)
    time.sleep(0.2)  # inside the sleep, not between the file and it


@pytest.mark.parametrize(("sent", "by"), [(signal.SIGINT, "SIGINT (Ctrl-C)"), (signal.SIGTERM, "SIGTERM")])
def test_a_faulty_rack_interrupted_during_test_rack_says_interrupted_never_pass(
    pytester: pytest.Pytester, sent: signal.Signals, by: str
) -> None:
    args = ["--nvlink-suite=gb200-nvl72", "--nvlink-replay=gb200-nvl72-faulty", "-k", "rack", *OUTPUTS]
    process = _start(pytester, "test_rack.py", args)
    _wait_for(pytester.path / "started", process)
    process.send_signal(sent)
    out, err = process.communicate(timeout=120)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "Traceback" not in err
    document = _results(pytester)
    assert document["verdict"] == "INTERRUPTED"
    running = (pytester.path / "started").read_text()
    assert document["left_out"]["interrupted"] == {"by": by, "during": running}
    assert _banner(pytester).startswith("INTERRUPTED:")
    assert _junit_properties(pytester)["nvlink_verdict"] == "INTERRUPTED"
    assert "INTERRUPTED run: " in out and f"interrupted by {by} during {running}" in out


def test_a_second_ctrl_c_while_outputs_are_written_is_one_line_naming_what_was_not_written(
    pytester: pytest.Pytester,
) -> None:
    # Yesterday's outputs of a run that passed: a new JUnit beside them would go unnoticed.
    for name, text in (("r.json", '{"verdict": "PASS"}'), ("r.html", "<h1>PASS</h1>"), ("j.xml", "<old/>")):
        (pytester.path / name).write_text(text)
    process = _start(pytester, "test_p2p_status", [*HEALTHY, *OUTPUTS], SLEEP_IN_OUTPUTS="1")
    _wait_for(pytester.path / "started", process)
    process.send_signal(signal.SIGINT)
    _wait_for(pytester.path / "writing", process)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if "interrupted while the outputs were written" in line]
    assert len(lines) == 1, err
    for name in ("r.json (results JSON)", "r.html (HTML report)", "j.xml (JUnit XML)"):
        assert name in lines[0]
    assert (pytester.path / "j.xml").read_text() == "<old/>"  # no new JUnit beside the old PASS files
    assert not list(pytester.path.glob(".*.tmp"))


def test_the_sigterm_handler_is_put_back_when_the_session_ends(pytester: pytest.Pytester) -> None:
    before = signal.getsignal(signal.SIGTERM)
    pytester.runpytest(*HEALTHY, "-k", "test_driver")
    assert signal.getsignal(signal.SIGTERM) is before


# --- pytest-xdist: the controller collects nothing; the workers send their selection -------------------


def test_under_xdist_a_selection_is_partial_and_a_stop_is_not_an_interruption(pytester: pytest.Pytester) -> None:
    pytester.runpytest(*HEALTHY, "-n", "2", "-k", "test_driver", "--nvlink-json=k.json")
    left_out = _results(pytester, "k.json")["left_out"]
    assert _results(pytester, "k.json")["verdict"] == "PARTIAL" and (left_out["full_set"], left_out["ran"]) == (388, 1)
    pytester.runpytest(*DEGRADED, "-n", "2", "-x", "--nvlink-json=x.json")
    document = _results(pytester, "x.json")
    assert document["verdict"] == "FAIL" and document["left_out"]["interrupted"] is None
    assert document["left_out"]["not_run_reason"].startswith("stopping after")
    pytester.runpytest(*HEALTHY, "-n", "2", "--nvlink-json=all.json")
    assert _results(pytester, "all.json")["verdict"] == "PASS"
