"""The fleet merge over constructed result sets: verdicts per node, per check, outliers, input errors."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from fleet_data import errored, failing, fleet_of, real_results, scaled, slower_pair, with_host, write_fleet

from pytest_nvlink.cli import build_parser
from pytest_nvlink.fleet.command import run_fleet
from pytest_nvlink.fleet.load import FleetInputError, NodeFile, read_fleet
from pytest_nvlink.fleet.merge import Fleet, merge_paths
from pytest_nvlink.fleet.outliers import OutlierSettings


def fleet_from(folder: Path, expected: list[str] | None = None, settings: OutlierSettings | None = None) -> Fleet:
    return merge_paths([folder], expected, settings or OutlierSettings())


def hosts(node: NodeFile) -> str:
    return node.host


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = run_fleet(build_parser().parse_args(["fleet", *args]), out, err)
    return status, out.getvalue(), err.getvalue()


def test_identical_nodes_pass_without_outliers(tmp_path: Path) -> None:
    fleet = fleet_from(write_fleet(tmp_path, fleet_of(12)))
    assert fleet.verdict == "PASS"
    assert [node.status for node in fleet.nodes] == ["pass"] * 12
    assert fleet.outliers == []
    assert all(family.judged and family.mad == 0 for family in fleet.families)
    assert {f.name for f in fleet.families} >= {"p2p unidirectional", "p2p bidirectional", "p2p latency"}
    assert fleet.exit_status(fail_on_outliers=True) == 0


def test_a_node_ten_percent_slower_on_one_pair_is_an_outlier_named_with_figure_and_pair(tmp_path: Path) -> None:
    nodes = fleet_of(12, change=lambda host, d: slower_pair(d, 2, 5, "unidirectional", 0.9) if host == "gpu007" else d)
    fleet = fleet_from(write_fleet(tmp_path, nodes))
    assert fleet.verdict == "PASS"  # still above the floor: an outlier, not a failure
    assert len(fleet.outliers) == 1
    outlier = fleet.outliers[0]
    assert (outlier.host, outlier.family, outlier.where, outlier.level) == (
        "gpu007",
        "p2p unidirectional",
        "GPU 2 -> GPU 5",
        "replace",
    )
    # The node's value is its worst pair; the fleet median is the other nodes' worst pair.
    base = [m["value"] for m in real_results()["node"]["measurements"]["p2p"] if m["kind"] == "unidirectional"]
    pair = next(
        m["value"]
        for m in real_results()["node"]["measurements"]["p2p"]
        if (m["src"], m["dst"], m["kind"]) == (2, 5, "unidirectional")
    )
    assert outlier.median == min(base)
    assert outlier.value == pytest.approx(pair * 0.9, abs=0.01)
    assert outlier.percent_worse == pytest.approx((min(base) - pair * 0.9) / min(base) * 100)
    assert outlier.z is None  # eleven identical nodes: MAD = 0, the percentage rule decides
    assert "gpu007: p2p unidirectional" in outlier.sentence()
    assert fleet.exit_status(fail_on_outliers=False) == 0
    assert fleet.exit_status(fail_on_outliers=True) == 1


def test_spread_fleet_flags_by_modified_z_score(tmp_path: Path) -> None:
    # Nodes spread by 0.1 % steps; one 2 % slower is far outside (z << -3.5) but under the 3.5 % warn line.
    factors = {f"gpu{n:03d}": 1 - 0.001 * (n % 5) for n in range(1, 13)}
    factors["gpu012"] = 0.98

    def spread(host: str, document: dict[str, object]) -> dict[str, object]:
        return scaled(document, "bidirectional", factors[host])

    fleet = fleet_from(write_fleet(tmp_path, fleet_of(12, change=spread)))
    flagged = [(o.host, o.family, o.level) for o in fleet.outliers]
    assert flagged == [("gpu012", "p2p bidirectional", "warn")]
    assert fleet.outliers[0].z is not None
    assert fleet.outliers[0].z < -3.5


def test_latency_outliers_are_the_higher_ones(tmp_path: Path) -> None:
    nodes = fleet_of(10, change=lambda host, d: slower_pair(d, 1, 0, "latency", 1.5) if host == "gpu003" else d)
    fleet = fleet_from(write_fleet(tmp_path, nodes))
    assert [(o.host, o.family, o.where) for o in fleet.outliers] == [("gpu003", "p2p latency", "GPU 1 -> GPU 0")]


def test_too_few_nodes_to_judge_outliers(tmp_path: Path) -> None:
    nodes = fleet_of(9, change=lambda host, d: slower_pair(d, 2, 5, "unidirectional", 0.5) if host == "gpu001" else d)
    fleet = fleet_from(write_fleet(tmp_path, nodes))
    assert fleet.outliers == []
    assert {family.note for family in fleet.families} == {"too few nodes (9 < 10) to judge outliers"}
    status, out, _ = run(str(tmp_path))
    assert status == 0
    assert "p2p unidirectional: too few nodes (9 < 10) to judge outliers" in out


def test_a_failing_node_fails_with_its_first_failure(tmp_path: Path) -> None:
    message = "GPU 3: 17 of 18 NVLinks active, expected 18"
    nodes = fleet_of(
        3, change=lambda host, d: failing(d, "test_nvlink_active_links", message) if host == "gpu002" else d
    )
    fleet = fleet_from(write_fleet(tmp_path, nodes))
    assert fleet.verdict == "FAIL"
    bad = fleet.nodes[0]
    assert (bad.host, bad.status) == ("gpu002", "fail")
    assert bad.first_failure is not None
    assert bad.first_failure.endswith(message)
    assert bad.first_failure.startswith("test_nvlink_active_links[gpu0]")
    tally = next(t for t in fleet.checks if t.check == "test_nvlink_active_links")
    assert (tally.failed, tally.nodes) == (("gpu002",), 3)
    status, out, _ = run(str(tmp_path))
    assert status == 1
    assert "gpu002" in out
    assert "FAIL" in out


def test_the_degraded_snapshot_fails_as_a_node(tmp_path: Path) -> None:
    nodes = {"good": with_host(real_results(), "good"), "bad": with_host(real_results("h100-8gpu-degraded"), "bad")}
    fleet = fleet_from(write_fleet(tmp_path, nodes))
    assert [(n.host, n.status) for n in fleet.nodes] == [("bad", "fail"), ("good", "pass")]
    assert "test_p2p_unidirectional" in fleet.nodes[0].failed_checks


def test_an_errored_node_is_incomplete(tmp_path: Path) -> None:
    nodes = fleet_of(
        2, change=lambda host, d: errored(d, "test_fabric", "fabric probe crashed") if host == "gpu001" else d
    )
    fleet = fleet_from(write_fleet(tmp_path, nodes))
    assert [(n.host, n.status) for n in fleet.nodes] == [("gpu001", "incomplete"), ("gpu002", "pass")]
    assert fleet.nodes[0].first_failure == "incomplete: test_fabric[gpu0]: fabric probe crashed"
    assert fleet.verdict == "FAIL"


def test_a_partial_audit_or_no_judged_check_is_incomplete(tmp_path: Path) -> None:
    partial = with_host(real_results(), "partial")
    partial["audit"] = "partial audit: 300 of 372 checks had evidence (72 without evidence)"
    partial["audit_counts"] = {"judged": 300, "applicable": 372}
    nothing = with_host(real_results(), "nothing")
    for item in nothing["items"]:
        item["outcome"] = "not_applicable"
    fleet = fleet_from(write_fleet(tmp_path, {"partial": partial, "nothing": nothing}))
    reasons = {n.host: (n.status, n.first_failure) for n in fleet.nodes}
    assert reasons["partial"] == ("incomplete", "incomplete: " + partial["audit"])
    assert reasons["nothing"] == ("incomplete", "incomplete: no check was judged")


def test_the_audit_is_read_from_its_counts_not_its_sentence(tmp_path: Path) -> None:
    # The counts decide; the sentence is only what the fleet shows. A file written before audit_counts
    # existed has only the sentence, which is then the one place the counts are read from.
    counted = with_host(real_results(), "counted")
    assert counted["audit_counts"] == {"judged": 388, "applicable": 388}
    counted["audit_counts"] = {"judged": 371, "applicable": 372}
    worded = with_host(real_results(), "worded")
    worded["audit"] = "partial audit: every one of 372 checks judged"  # reworded: no regex of old reads it
    older = with_host(real_results(), "older")
    del older["audit_counts"]
    older["audit"] = "partial audit: 300 of 372 checks had evidence (72 without evidence)"
    fleet = fleet_from(write_fleet(tmp_path, {"counted": counted, "worded": worded, "older": older}))
    reasons = {n.host: (n.status, n.first_failure) for n in fleet.nodes}
    assert reasons["counted"] == ("incomplete", "incomplete: " + counted["audit"])
    assert reasons["worded"] == ("pass", None)
    assert reasons["older"] == ("incomplete", "incomplete: " + older["audit"])


def test_a_node_missing_from_expect_nodes_fails(tmp_path: Path) -> None:
    write_fleet(tmp_path, fleet_of(3))
    status, out, _ = run(str(tmp_path), "--expect-nodes", "gpu[001-002,004]")
    assert status == 1
    assert re.search(r"gpu004\s+MISSING", out)
    assert "1 node(s) sent results but are not in --expect-nodes: gpu003" in out
    names = tmp_path / "expected.txt"
    names.write_text("# the rack\ngpu[001-002]\ngpu003  # last one\n")
    status, _, _ = run(
        str(tmp_path / "gpu001.json"),
        str(tmp_path / "gpu002.json"),
        str(tmp_path / "gpu003.json"),
        "--expect-nodes",
        str(names),
    )
    assert status == 0


def test_an_empty_input_fails(tmp_path: Path) -> None:
    status, out, _ = run(str(tmp_path))
    assert status == 1
    assert "no results file was found" in out


def test_files_are_found_recursively_and_dot_files_skipped(tmp_path: Path) -> None:
    write_fleet(tmp_path / "a" / "b", fleet_of(2))
    (tmp_path / "a" / ".gpu009.json.x.tmp").write_text("half a file")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "junk.json").write_text("{}")
    assert sorted(read_fleet([tmp_path], hosts)) == ["gpu001", "gpu002"]


def test_the_host_comes_from_the_top_level_then_the_node_then_the_file_name(tmp_path: Path) -> None:
    top = real_results()
    top["host"] = "top-host"
    stem = real_results()
    del stem["host"]
    stem["node"]["host"] = None
    older = real_results()
    del older["host"]
    write_fleet(tmp_path, {"file-a": top, "file-b": stem, "file-c": older})
    assert sorted(read_fleet([tmp_path], hosts)) == ["file-b", "hgx-h100-01", "top-host"]


def test_the_same_results_twice_count_once_and_conflicting_ones_are_refused(tmp_path: Path) -> None:
    document = with_host(real_results(), "n1")
    again = dict(document, created_utc="2030-01-01T00:00:00Z")
    write_fleet(tmp_path, {"copy1": document, "copy2": again})
    assert read_fleet([tmp_path], hosts) == ["n1"]
    write_fleet(tmp_path, {"copy3": slower_pair(document, 0, 1, "unidirectional", 0.5)})
    with pytest.raises(FleetInputError, match=r"copy3\.json: host: 'n1' also has .*copy1\.json with different results"):
        read_fleet([tmp_path], hosts)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("not json", "not readable JSON"),
        ("[1]", "a JSON object is expected"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"kind": "pytest-nvlink-snapshot"}', "kind: 'pytest-nvlink-snapshot' is not 'pytest-nvlink-results'"),
    ],
)
def test_unreadable_files_are_input_errors(tmp_path: Path, content: str, match: str) -> None:
    (tmp_path / "bad.json").write_text(content)
    status, _, err = run(str(tmp_path))
    assert status == 2
    assert "bad.json" in err
    assert match in err


def _set(document: dict[str, object], key: str, value: object) -> dict[str, object]:
    target: object = document
    parts = key.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]  # type: ignore[index]
    last = parts[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value  # type: ignore[index]
    return document


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("node.measurements.p2p.3.value", float("nan"), r"node\.measurements\.p2p\[3\]\.value: NaN or Infinity"),
        ("node.measurements.p2p.3.value", float("inf"), r"node\.measurements\.p2p\[3\]\.value: NaN or Infinity"),
        ("node.measurements.p2p.3.value", -1.0, r"node\.measurements\.p2p\[3\]\.value: -1\.0 is not a finite"),
        ("node.measurements.collectives.0.busbw_gbps", -5, r"node\.measurements\.collectives\[0\]\.busbw_gbps"),
        ("verdict", "MAYBE", r"verdict: 'MAYBE' is not one of"),
        ("node.measurements.p2p.4", 7, r"node\.measurements\.p2p\[4\]: an object is expected"),
        ("node.measurements.p2p.4.src", "zero", r"node\.measurements\.p2p\[4\]\.src: 'zero' is not a whole number"),
        (
            "node.measurements.collectives.1.size_bytes",
            None,
            r"collectives\[1\]\.size_bytes: None is not a whole number",
        ),
        ("items.0.outcome", "great", r"items\[0\]\.outcome"),
        ("host", "", "host: '' is not a host name"),
    ],
)
def test_impossible_values_are_input_errors_naming_file_and_key(
    tmp_path: Path, key: str, value: object, match: str
) -> None:
    document = _set(real_results(), key, value)
    (tmp_path / "node.json").write_text(json.dumps(document))
    status, _, err = run(str(tmp_path))
    assert status == 2
    assert "node.json" in err
    assert re.search(match, err), err


def test_the_standard_library_parser_also_refuses_nan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_nvlink.fleet.load as load

    monkeypatch.setattr(load, "_json_loader", lambda: load._stdlib_loads)
    document = _set(real_results(), "node.measurements.p2p.0.value", float("nan"))
    (tmp_path / "node.json").write_text(json.dumps(document))
    with pytest.raises(FleetInputError, match=r"node\.measurements\.p2p\[0\]\.value: NaN or Infinity"):
        read_fleet([tmp_path], hosts)
    (tmp_path / "node.json").write_text(json.dumps(real_results()))
    assert read_fleet([tmp_path], hosts) == ["hgx-h100-01"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--expect-nodes", "gpu[1-"], "'[' without ']'"),
        (["--outlier-warn-percent", "9"], "--outlier-replace-percent is below --outlier-warn-percent"),
        (["missing-folder"], "no such file or folder"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    write_fleet(tmp_path, fleet_of(1))
    status, _, err = run(str(tmp_path), *args)
    assert status == 2
    assert message in err


def test_without_the_fleet_extra_the_jsonschema_package_validates_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_nvlink.fleet.load as load

    monkeypatch.setattr(load, "_compiled_validator", lambda schema: None)
    monkeypatch.setattr(load, "_json_loader", lambda: load._stdlib_loads)
    assert not load.ResultsReader().fast
    (tmp_path / "node.json").write_text(json.dumps(_set(real_results(), "items.2.pytest_outcome", "maybe")))
    with pytest.raises(FleetInputError, match=r"node\.json: items\[2\]\.pytest_outcome: 'maybe' is not one of"):
        read_fleet([tmp_path], hosts)


def test_with_the_fleet_extra_the_fast_path_is_taken() -> None:
    import pytest_nvlink.fleet.load as load

    assert load.ResultsReader().fast  # orjson and jsonschema-rs are dev dependencies


def test_worker_processes_read_the_same_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_nvlink.fleet.load as load

    monkeypatch.setattr(load, "PARALLEL_MIN_FILES", 2)
    nodes = fleet_of(4, change=lambda host, d: failing(d, "test_fabric", "fabric down") if host == "gpu003" else d)
    write_fleet(tmp_path, nodes)
    assert read_fleet([tmp_path], hosts, jobs=2) == ["gpu001", "gpu002", "gpu003", "gpu004"]
    fleet = merge_paths([tmp_path], None, OutlierSettings(), jobs=2)
    assert (fleet.nodes[0].host, fleet.nodes[0].status) == ("gpu003", "fail")
    (tmp_path / "gpu005.json").write_text("{")
    with pytest.raises(FleetInputError, match=r"gpu005\.json: not readable JSON"):
        read_fleet([tmp_path], hosts, jobs=2)


def test_a_schema_that_requires_the_top_level_host_reads_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_nvlink.fleet.load as load
    from pytest_nvlink.report.json_results import load_schema as original

    def with_host_required() -> dict[str, object]:
        schema = original()
        schema["properties"]["host"] = {"type": "string", "minLength": 1}
        schema["required"].append("host")
        return schema

    monkeypatch.setattr(load, "load_schema", with_host_required)
    document = real_results()
    document["host"] = "named"
    write_fleet(tmp_path, {"x": document})
    assert read_fleet([tmp_path], hosts) == ["named"]
