"""One command line for every node of an ``srun``: ``--nvlink-host`` and ``{host}``/``{date}`` in all five outputs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_nvlink.core.placeholders import utc_date
from pytest_nvlink.report.json_results import load_schema
from pytest_nvlink.sources.snapshot.file import load_snapshot

# The five paths of a Slurm sweep, every one of them per node (and per day).
OUTPUTS = {
    "--nvlink-json": "out/{date}/{host}.json",
    "--nvlink-report": "out/{date}/{host}.html",
    "--nvlink-save": "out/{date}/{host}.snapshot.json",
    "--nvlink-save-dir": "out/runs-{date}",
    "--junitxml": "out/{date}/{host}.xml",
}


def _run_with_outputs(pytester: pytest.Pytester, snapshot: str, *extra: str) -> pytest.RunResult:
    options = [f"{option}={pytester.path / template}" for option, template in OUTPUTS.items()]
    return pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-replay={snapshot}", *options, *extra, "-p", "no:cacheprovider"
    )


def _junit_suite_properties(path: Path) -> dict[str, str]:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    return {p.get("name", ""): p.get("value", "") for p in suite.iter("property") if p.get("name")}


def _json(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def test_nvlink_host_names_every_output_and_fills_host_in_each_path(pytester: pytest.Pytester) -> None:
    result = _run_with_outputs(pytester, "h100-8gpu-degraded", "--nvlink-host=gpu017")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the degraded node fails; the files are written anyway
    day = pytester.path / "out" / utc_date()
    results = _json(day / "gpu017.json")
    jsonschema.validate(results, load_schema())
    assert results["host"] == "gpu017" and results["node"]["host"] == "gpu017"
    assert _junit_suite_properties(day / "gpu017.xml")["host"] == "gpu017"
    assert "<h1>FAIL: h100-8gpu on gpu017</h1>" in (day / "gpu017.html").read_text(encoding="utf-8")
    # The snapshot carries the name, so a replay of it reports the same host.
    assert load_snapshot(day / "gpu017.snapshot.json").host == "gpu017"
    (saved,) = (pytester.path / "out" / f"runs-{utc_date()}" / "gpu017").glob("*.json")
    assert load_snapshot(saved).host == "gpu017"
    result.stdout.fnmatch_lines(["nvlink source: replay of h100-8gpu-degraded; host gpu017; *"])


def test_without_nvlink_host_the_replayed_nodes_own_host_is_reported(pytester: pytest.Pytester) -> None:
    _run_with_outputs(pytester, "h100-8gpu-healthy", "-k", "gpu_count")
    day = pytester.path / "out" / utc_date()
    assert _json(day / "hgx-h100-01.json")["host"] == "hgx-h100-01"
    assert _junit_suite_properties(day / "hgx-h100-01.xml")["host"] == "hgx-h100-01"


def test_a_snapshot_saved_under_a_host_name_replays_under_it(pytester: pytest.Pytester) -> None:
    saved = pytester.path / "node.json"
    first = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-healthy",
        "--nvlink-host=gpu042",
        f"--nvlink-save={saved}",
        "-k",
        "gpu_count",
    )
    assert first.ret == pytest.ExitCode.OK
    replay = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-replay={saved}", f"--nvlink-json={pytester.path / '{host}.json'}"
    )
    assert replay.ret == pytest.ExitCode.OK
    assert _json(pytester.path / "gpu042.json")["host"] == "gpu042"


def test_the_ini_key_names_the_host_and_a_slash_in_it_stays_out_of_the_path(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nnvlink_host = rack1/gpu003\n")
    xml = pytester.path / "{host}.xml"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", f"--junitxml={xml}", "-k", "gpu_count"
    )
    assert result.ret == pytest.ExitCode.OK
    # The record keeps the name as given; only the file name is made safe.
    assert _junit_suite_properties(pytester.path / "rack1_gpu003.xml")["host"] == "rack1/gpu003"


@pytest.mark.parametrize("option", sorted(OUTPUTS))
def test_an_unknown_placeholder_is_a_usage_error_naming_the_option(pytester: pytest.Pytester, option: str) -> None:
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", f"{option}=out/{{hostname}}.json"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option}: 'out/{{hostname}}.json': unknown placeholder {{hostname}}; *"])
    assert not (pytester.path / "out").exists()


def test_a_stray_brace_in_an_ini_path_is_a_usage_error_naming_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nnvlink_json = out/{host.json\n")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tox.ini:nvlink_json: 'out/{host.json': *literal braces are written {{ and }}*"])


def test_without_a_suite_junitxml_is_left_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    result = pytester.runpytest(f"--junitxml={pytester.path / '{host}.xml'}")
    assert result.ret == pytest.ExitCode.OK
    assert (pytester.path / "{host}.xml").is_file()
