"""``pytest-nvlink fleet`` details (issue 24, section 5): a missing --expect-nodes file, an output that names
its option, suites mixed in one fleet, host names without regard to case, a drain script ending in a newline."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
from fleet_data import failing, fleet_of, scaled, write_fleet

from pytest_nvlink.cli import build_parser
from pytest_nvlink.fleet.command import INPUT_ERROR, run_fleet


def _fleet(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = run_fleet(build_parser().parse_args(["fleet", *args]), out, err)
    return status, out.getvalue(), err.getvalue()


def test_a_missing_expect_nodes_file_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_fleet(tmp_path / "in", fleet_of(2))
    monkeypatch.chdir(tmp_path)
    status, out, err = _fleet("in", "--expect-nodes", "nodes.txt")
    assert status == INPUT_ERROR and out == ""
    assert err == (
        "pytest-nvlink fleet: error: --expect-nodes: nodes.txt: file not found; give a file of node names (one per "
        "line) or a Slurm hostlist such as gpu[001-064]\n"
    )
    status, _, err = _fleet("in", "--expect-nodes", "lists/nodes")  # a path, whatever its name
    assert status == INPUT_ERROR and "--expect-nodes: lists/nodes: file not found" in err
    # A hostlist with dots (fully qualified names) is still a hostlist.
    status, out, _ = _fleet("in", "--expect-nodes", "gpu[001-002].cluster.local")
    assert status == 1 and "2 node(s) sent results but are not in --expect-nodes" in out


def test_an_unwritable_drain_script_names_the_option(tmp_path: Path) -> None:
    write_fleet(tmp_path / "in", fleet_of(2))
    folder = tmp_path / "drain"
    folder.mkdir()
    status, _, err = _fleet(str(tmp_path / "in"), "--drain-script", str(folder))
    assert status == INPUT_ERROR
    assert err == f"pytest-nvlink fleet: error: --drain-script: {folder} is a folder, not a file\n"
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    missing = tmp_path / "a-file" / "fleet.json"  # under a file: no folder can hold it
    status, _, err = _fleet(str(tmp_path / "in"), "--json", str(missing))
    assert status == INPUT_ERROR
    assert err.startswith(f"pytest-nvlink fleet: error: --json: cannot create {missing}: ")
    assert ".tmp" not in err


def test_a_fleet_mixing_suites_says_so_and_judges_outliers_within_each(tmp_path: Path) -> None:
    def change(host: str, document: dict[str, object]) -> dict[str, object]:
        if host > "gpu010":  # three A100-like nodes, each a third slower: outliers only beside the H100s
            changed = copy.deepcopy(scaled(scaled(document, "unidirectional", 0.66), "bidirectional", 0.66))
            changed["suite"] = {**changed["suite"], "name": "a100-8gpu"}
            return changed
        return document

    write_fleet(tmp_path / "in", fleet_of(13, change=change))
    status, out, _ = _fleet(str(tmp_path / "in"), "--json", str(tmp_path / "fleet.json"))
    assert status == 0, out
    assert (
        "the results mix suites: a100-8gpu (3 node(s)); h100-8gpu (10 node(s)); each node is judged against its "
        "own suite, and outliers only among nodes of one suite"
    ) in out
    assert "0 outlier(s)" in out
    document = json.loads((tmp_path / "fleet.json").read_text(encoding="utf-8"))
    assert document["suites"] == {
        "a100-8gpu": ["gpu011", "gpu012", "gpu013"],
        "h100-8gpu": [f"gpu{n:03d}" for n in range(1, 11)],
    }
    assert {f["family"] for f in document["families"]} >= {
        "a100-8gpu: p2p unidirectional",
        "h100-8gpu: p2p unidirectional",
    }


def test_one_suite_says_nothing_of_suites(tmp_path: Path) -> None:
    write_fleet(tmp_path / "in", fleet_of(2))
    status, out, _ = _fleet(str(tmp_path / "in"))
    assert status == 0 and "mix suites" not in out


def test_host_names_compare_without_regard_to_case(tmp_path: Path) -> None:
    nodes = fleet_of(2, prefix="GPU")
    write_fleet(tmp_path / "in", nodes)
    status, out, _ = _fleet(str(tmp_path / "in"), "--expect-nodes", "gpu[001-002]")
    assert status == 0, out
    assert "2 node(s): 2 pass, 0 fail, 0 incomplete, 0 missing" in out and "not in --expect-nodes" not in out
    # The same node twice, once in capitals, with different results: one host, so a conflict.
    other = failing(fleet_of(1)["gpu001"], "test_fabric", "fabric not trained")
    write_fleet(tmp_path / "in", {"gpu001": other})
    status, _, err = _fleet(str(tmp_path / "in"))
    assert status == INPUT_ERROR and "with different results; keep one of them" in err


def test_expect_nodes_names_each_host_once_whatever_its_case(tmp_path: Path) -> None:
    write_fleet(tmp_path / "in", fleet_of(1))
    listed = tmp_path / "nodes.txt"
    listed.write_text("gpu001\nGPU001\ngpu002\n", encoding="utf-8")
    status, out, _ = _fleet(str(tmp_path / "in"), "--expect-nodes", str(listed))
    assert status == 1
    assert "2 node(s): 1 pass, 0 fail, 0 incomplete, 1 missing" in out


def test_the_drain_script_ends_with_a_newline(tmp_path: Path) -> None:
    write_fleet(tmp_path / "in", fleet_of(1))
    script = tmp_path / "drain.sh"
    _fleet(str(tmp_path / "in"), "--expect-nodes", "gpu[001-002]", "--drain-script", str(script))
    text = script.read_text(encoding="utf-8")
    assert text.endswith("'Reason=pytest-nvlink: missing: no results file for this expected node'\n")
