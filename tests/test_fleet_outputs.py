"""The fleet's files themselves: JUnit XML, JSON against fleet.schema.json, the HTML page, the drain script."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from fleet_data import failing, fleet_of, slower_pair, write_fleet

from pytest_nvlink.cli import build_parser
from pytest_nvlink.fleet.command import run_fleet
from pytest_nvlink.fleet.outputs import SCHEMA_FILE

FAILURE = 'GPU 3: 17 of 18 NVLinks active, expected 18; it\'s "down" $(reboot) `x`'


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """12 nodes: gpu004 fails a check, gpu009 is 10 % slower on one pair, gpu013 is expected but missing."""
    folder = tmp_path_factory.mktemp("fleet")

    def change(host: str, document: dict[str, object]) -> dict[str, object]:
        if host == "gpu004":
            return failing(document, "test_nvlink_active_links", FAILURE)
        if host == "gpu009":
            return slower_pair(document, 1, 3, "bidirectional", 0.9)
        return document

    write_fleet(folder / "in", fleet_of(12, change=change))
    args = ["fleet", str(folder / "in"), "--expect-nodes", "gpu[001-013]", "--fail-on-outliers"]
    for option, name in (("--junit", "fleet.xml"), ("--json", "fleet.json"), ("--html", "fleet.html")):
        args += [option, str(folder / name)]
    args += ["--drain-script", str(folder / "drain.sh")]
    out = io.StringIO()
    status = run_fleet(build_parser().parse_args(args), out, io.StringIO())
    return folder, status, out.getvalue()


def test_the_terminal_names_failing_missing_and_outlier_nodes(outputs: tuple[Path, int, str]) -> None:
    _, status, text = outputs
    assert status == 1
    assert re.search(r"gpu013\s+MISSING", text)
    assert re.search(r"gpu004\s+FAIL\s+test_nvlink_active_links\[gpu0\]: GPU 3: 17 of 18", text)
    assert re.search(r"gpu009\s+p2p bidirectional .* GPU 1 -> GPU 3 .* replace", text)
    assert re.search(r"test_nvlink_active_links\s+1\s+0\s+12\s+gpu004", text)
    assert "FAIL: 13 node(s): 11 pass, 1 fail, 0 incomplete, 1 missing; 1 outlier(s)" in text


def test_junit_has_one_testcase_per_node_and_outlier(outputs: tuple[Path, int, str]) -> None:
    folder, _, _ = outputs
    suite = ET.parse(folder / "fleet.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {(case.get("classname"), case.get("name")): case for case in suite.iter("testcase")}
    nodes = [str(name) for classname, name in cases if classname == "pytest-nvlink.fleet.node"]
    assert sorted(nodes) == [f"gpu{n:03d}" for n in range(1, 14)]
    failure = cases[("pytest-nvlink.fleet.node", "gpu004")].find("failure")
    assert failure is not None
    assert failure.get("type") == "fail"
    assert FAILURE in (failure.get("message") or "")
    missing = cases[("pytest-nvlink.fleet.node", "gpu013")].find("failure")
    assert missing is not None
    assert missing.get("type") == "missing"
    assert cases[("pytest-nvlink.fleet.node", "gpu001")].find("failure") is None
    outlier = cases[("pytest-nvlink.fleet.outlier", "gpu009 p2p bidirectional")].find("failure")
    assert outlier is not None
    assert outlier.get("type") == "outlier-replace"
    assert "GPU 1 -> GPU 3" in (outlier.get("message") or "")
    assert suite.get("tests") == "14"
    assert suite.get("failures") == "3"


def test_json_follows_its_schema_and_says_the_verdict(outputs: tuple[Path, int, str]) -> None:
    folder, _, _ = outputs
    document = json.loads((folder / "fleet.json").read_text())
    jsonschema.validate(document, json.loads(SCHEMA_FILE.read_text()))
    assert (document["verdict"], document["exit_status"], document["expected_nodes"]) == ("FAIL", 1, 13)
    assert document["counts"] == {"pass": 11, "fail": 1, "incomplete": 0, "missing": 1}
    by_host = {node["host"]: node for node in document["nodes"]}
    assert by_host["gpu004"]["failed_checks"] == ["test_nvlink_active_links"]
    assert by_host["gpu013"]["file"] is None
    assert [(o["host"], o["family"], o["where"], o["level"]) for o in document["outliers"]] == [
        ("gpu009", "p2p bidirectional", "GPU 1 -> GPU 3", "replace")
    ]
    assert document["settings"]["fail_on_outliers"] is True


def test_the_schema_refuses_a_passing_node_with_a_failure() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    node: dict[str, object] = {
        "host": "n",
        "status": "pass",
        "first_failure": "x",
        "file": None,
        "run_verdict": None,
        "failed_checks": [],
    }
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(node, schema["properties"]["nodes"]["items"])


def test_html_page_shares_the_report_css_and_draws_the_heatmap(outputs: tuple[Path, int, str]) -> None:
    folder, _, _ = outputs
    page = (folder / "fleet.html").read_text()
    css = (Path(__file__).parent.parent / "pytest_nvlink/report/templates/style.css.j2").read_text().splitlines()[1]
    assert css in page  # the node report's stylesheet, included rather than copied
    assert "<h1>FAIL: fleet of 13 node(s)</h1>" in page
    assert "<script" not in page
    assert re.search(r'<td class="status-missing">missing</td>', page)
    heat = page[page.index('<table class="heat">') :]
    assert heat.count("<tr><th>gpu") == 13
    assert re.search(r'title="gpu009: p2p bidirectional [0-9.]+ GB/s at GPU 1 -&gt; GPU 3" class="flagged"', heat)
    assert "17 of 18 NVLinks active, expected 18; it&#39;s &#34;down&#34; $(reboot)" in page  # escaped


def test_drain_script_quotes_every_node_and_is_never_run(outputs: tuple[Path, int, str]) -> None:
    folder, _, _ = outputs
    script = folder / "drain.sh"
    assert stat.S_IMODE(os.stat(script).st_mode) == 0o755
    lines = script.read_text().splitlines()
    assert lines[0] == "#!/bin/sh"
    assert "set -e" in lines
    commands = [shlex.split(line) for line in lines if line.startswith("scontrol")]
    assert [c[:4] for c in commands] == [
        ["scontrol", "update", "NodeName=gpu013", "State=DRAIN"],
        ["scontrol", "update", "NodeName=gpu004", "State=DRAIN"],
    ]
    assert commands[0][4] == "Reason=pytest-nvlink: missing: no results file for this expected node"
    assert commands[1][4].startswith("Reason=pytest-nvlink: test_nvlink_active_links[gpu0]: GPU 3: 17 of 18")
    assert len(commands[1][4]) <= len("Reason=") + 200
    assert "$(reboot)" in commands[1][4]  # kept as text: the quoting stops the shell from running it
