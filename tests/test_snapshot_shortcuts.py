"""The snapshot reader's shortcuts read a file exactly as the long way does.

Records of an all-plain shape are built by position with their numbers judged on the way, a long list
of such records is looked at field by field across the list, the value walk runs only when a number
might be impossible, and orjson decodes when installed. Every test runs
with orjson and with the standard library's decoder; the property test compares each outcome (the
node, or the error's file:path and message) with the long way: no shortcuts, the walk always run.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import snapshot_with_lists
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_nvlink.model import P2PMeasurement
from pytest_nvlink.model import document as snapshot
from pytest_nvlink.model import records as json_records
from pytest_nvlink.model.document import SnapshotError, node_from_document
from pytest_nvlink.sources.snapshot import file as snapshot_file
from pytest_nvlink.sources.snapshot.file import load_snapshot, load_snapshot_document

ROOT = Path(__file__).resolve().parents[1]
HEALTHY = ROOT / "snapshots" / "h100-8gpu-healthy.json"
BASE = snapshot_with_lists(HEALTHY)  # records in lists, which the changes below edit


@pytest.fixture(params=["orjson", "stdlib"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "stdlib":
        monkeypatch.setattr(snapshot_file, "_fast_decoder", lambda: None)
    else:
        pytest.importorskip("orjson")
    return str(request.param)


@pytest.fixture
def document() -> dict[str, Any]:
    return copy.deepcopy(BASE)


def _write(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "node.json"
    path.write_text(json.dumps(document), encoding="utf-8")  # NaN and Infinity written as JSON can't
    return path


def _error(path: Path) -> str:
    with pytest.raises(SnapshotError) as excinfo:
        load_snapshot(path)
    return str(excinfo.value)


def _p2p(document: dict[str, Any], at: int = 12) -> dict[str, Any]:
    record: dict[str, Any] = document["node"]["measurements"]["p2p"][at]
    return record


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("value", math.nan, "nan is not a finite number"),
        ("value", math.inf, "inf is not a finite number"),
        ("value", -1, "-1.0 is impossible here (must be greater than 0)"),
        ("value", -0.0, "-0.0 is impossible here (must be greater than 0)"),
        ("bytes_copied", 0, "0 is impossible here (must be greater than 0)"),
        ("nvlink_bytes", -5, "-5 is impossible here (must not be negative)"),
        ("src", True, "expected int, got bool"),
        ("src", None, "expected int, got NoneType"),
        ("value", "fast", "expected float, got str"),
        ("can_access_peer", 1, "expected bool, got int"),
        ("conditions", {"size_mib": 256}, None),
        ("speed", 1.0, "unknown field"),
    ],
)
def test_a_bad_value_in_a_plain_record_reads_as_before(
    tmp_path: Path, document: dict[str, Any], decoder: str, field: str, value: object, problem: str | None
) -> None:
    _p2p(document)[field] = value
    path = _write(tmp_path, document)
    where = "conditions.size_mib" if field == "conditions" else field
    expected = problem or "expected str, got int"
    assert _error(path) == f"{path}:node.measurements.p2p[12].{where}: {expected}"


def test_a_required_field_missing_from_a_plain_record(tmp_path: Path, document: dict[str, Any], decoder: str) -> None:
    del _p2p(document)["kind"]
    path = _write(tmp_path, document)
    assert _error(path) == f"{path}:node.measurements.p2p[12].kind: required field missing"


def test_an_int_for_a_float_reads_as_a_float(tmp_path: Path, document: dict[str, Any], decoder: str) -> None:
    _p2p(document)["value"] = 373
    measured = load_snapshot(_write(tmp_path, document)).measurements.p2p[12].value
    assert measured == 373.0
    assert type(measured) is float


def test_problems_keep_their_order_and_count(tmp_path: Path, document: dict[str, Any], decoder: str) -> None:
    """The first problem in the node's order is named, wherever the shortcuts met the others."""
    _p2p(document, 40)["value"] = -2.0
    _p2p(document, 3)["pcie_bytes"] = -1
    document["node"]["gpus"][5]["nvlinks"][2]["errors"]["replay"] = -3
    document["node"]["gpus"][6]["pcie_gen_current"] = 0
    path = _write(tmp_path, document)
    assert _error(path) == (
        f"{path}:node.gpus[5].nvlinks[2].errors.replay: -3 is impossible here (must not be negative) (and 3 more)"
    )


def test_a_failed_measurement_may_hold_zero(tmp_path: Path, document: dict[str, Any], decoder: str) -> None:
    """A zero looks suspect on the way; the walk, which knows the record failed, accepts it."""
    _p2p(document).update(value=0.0, error="the copy hung")
    assert load_snapshot(_write(tmp_path, document)).measurements.p2p[12].value == 0.0


def test_records_with_fields_in_another_order(tmp_path: Path, document: dict[str, Any], decoder: str) -> None:
    records = document["node"]["measurements"]["p2p"]
    records[:] = [dict(reversed(record.items())) for record in records]
    reordered = load_snapshot(_write(tmp_path, document))
    assert reordered == load_snapshot(HEALTHY)


def test_the_node_shares_nothing_with_its_document(document: dict[str, Any]) -> None:
    node = node_from_document(document, "doc")
    _p2p(document)["conditions"]["size_mib"] = "1"
    _p2p(document)["value"] = 1.0
    assert node.measurements.p2p[12] == node_from_document(BASE, "doc").measurements.p2p[12]


@pytest.mark.parametrize("field", ["src", "value"])
def test_integers_beyond_64_bits_read_as_the_standard_library_reads_them(
    tmp_path: Path, document: dict[str, Any], decoder: str, field: str
) -> None:
    """orjson turns them into floats; the reader keeps the standard library's int, or its float()."""
    _p2p(document)[field] = 10**20
    document["created_utc"] = -(10**19)
    node, top = load_snapshot_document(_write(tmp_path, document))
    read = getattr(node.measurements.p2p[12], field)
    assert (read, type(read)) == ((10**20, int) if field == "src" else (1e20, float))
    assert (top["created_utc"], type(top["created_utc"])) == (-(10**19), int)


def test_nan_written_as_json_cannot_is_read_and_refused(tmp_path: Path, document: dict[str, Any], decoder: str) -> None:
    document["node"]["gpus"][1]["nvlinks"][0]["speed_gbps"] = math.nan
    path = _write(tmp_path, document)
    assert "NaN" in path.read_text(encoding="utf-8")
    assert _error(path) == f"{path}:node.gpus[1].nvlinks[0].speed_gbps: nan is not a finite number"


# The long way, for the property test: no record takes a shortcut and every node is walked.
class _AlwaysSuspect:
    def __init__(self, *, tables: bool = True) -> None:
        self.tables = tables

    @property
    def suspect(self) -> bool:
        return True

    @suspect.setter
    def suspect(self, _: bool) -> None:
        pass


def _outcome(path: Path, *, shortcuts: bool) -> str | dict[str, Any]:
    with pytest.MonkeyPatch.context() as patch:
        if not shortcuts:
            plan_of = json_records._plan_of
            patch.setattr(
                json_records, "_plan_of", lambda cls: dataclasses.replace(plan_of(cls), shortcuts={}, columns=None)
            )
            patch.setattr(json_records._ClassPlan, "learn", lambda self, shape: None)
            patch.setattr(snapshot, "Reading", _AlwaysSuspect)
            patch.setattr(snapshot_file, "_fast_decoder", lambda: None)
        try:
            node, top = load_snapshot_document(path)
        except SnapshotError as exc:
            return str(exc)
    return {"node": dataclasses.asdict(node), "top": top}


RECORDS = st.sampled_from(
    [
        ("measurements", "p2p"),
        ("measurements", "collectives"),
        ("paths",),
        ("p2p",),
        ("gpus",),
        ("gpus", 0, "nvlinks"),
        ("gpus", 3, "nvlinks"),
    ]
)
FIELDS = st.sampled_from(
    [f.name for f in dataclasses.fields(P2PMeasurement)]
    + ["link", "speed_gbps", "errors", "a", "b", "path", "read", "index", "pcie_gen_max", "size_bytes", "colour"]
)
NUMBERS = [math.nan, math.inf, -math.inf, -1, -1.5, 0, 0.0, -0.0, 1, 2.5, 10**20, -(10**19)]
VALUES = st.sampled_from(
    [
        *NUMBERS,
        *(True, False, None, "x", {"replay": -1}, {"replay": 0}, {"size_mib": 1}, {"size_mib": None}, [1], [], {}),
        *("<delete>", "<the record a list>", "<the record a number>"),
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(RECORDS, st.integers(0, 40), FIELDS, VALUES), min_size=1, max_size=3))
def test_any_change_reads_as_the_long_way_reads_it(
    tmp_path: Path, decoder: str, changes: list[tuple[tuple[Any, ...], int, str, object]]
) -> None:
    document = copy.deepcopy(BASE)
    for where, at, field, value in changes:
        records: Any = document["node"]
        for key in where:
            if isinstance(key, str) and not isinstance(records, dict):
                break  # an earlier change replaced a record on the way
            records = records[key]
        else:
            _change(records, at, field, value)
    path = _write(tmp_path, document)
    assert _outcome(path, shortcuts=True) == _outcome(path, shortcuts=False)


def _change(records: list[Any], at: int, field: str, value: object) -> None:
    record = records[at % len(records)]
    if not isinstance(record, dict):  # an earlier change replaced it
        return
    if value in ("<the record a list>", "<the record a number>"):
        records[at % len(records)] = list(record.values()) if value == "<the record a list>" else 7
    elif value == "<delete>":
        record.pop(field, None)
    else:
        record[field] = copy.deepcopy(value)


def test_a_long_plain_list_is_read_field_by_field_as_record_by_record(document: dict[str, Any]) -> None:
    """The healthy 8-GPU node's 168 figures take the field-by-field way; one odd record sends them back."""
    records = document["node"]["measurements"]["p2p"]
    assert len(records) >= json_records._COLUMNS_FROM
    by_field = json_records._records_by_field(P2PMeasurement, records, json_records.Reading())
    one_by_one = [json_records.from_json(P2PMeasurement, record, "r") for record in records]
    assert by_field == one_by_one
    assert by_field is not None
    assert by_field[12].conditions is not records[12]["conditions"]
    for change in ({"value": 373}, {"colour": "red"}, {"conditions": {"size_mib": 256}}, {"src": True}):
        odd = copy.deepcopy(records)
        odd[12].update(change)
        assert json_records._records_by_field(P2PMeasurement, odd, json_records.Reading()) is None, change


@pytest.mark.parametrize(("field", "value"), [("value", -1.0), ("value", math.nan), ("nvlink_bytes", -5)])
def test_a_long_list_with_an_impossible_number_is_marked_for_the_walk(
    document: dict[str, Any], field: str, value: float
) -> None:
    records = document["node"]["measurements"]["p2p"]
    records[40][field] = value
    reading = json_records.Reading()
    assert json_records._records_by_field(P2PMeasurement, records, reading) is not None
    assert reading.suspect


@dataclasses.dataclass
class _Tagged:
    """A record with a dict field that must be there (no None), as no model record has yet."""

    index: int
    tags: dict[str, str]


@dataclasses.dataclass
class _Tags:
    records: list[_Tagged] = dataclasses.field(default_factory=list)


@pytest.mark.parametrize("count", [json_records._COLUMNS_FROM - 1, json_records._COLUMNS_FROM])
def test_a_required_dict_field_takes_no_none_in_a_long_list_either(count: int) -> None:
    records: list[dict[str, Any]] = [{"index": i, "tags": {"k": "v"}} for i in range(count)]
    records[3]["tags"] = None
    with pytest.raises(SnapshotError) as excinfo:
        json_records.from_json(_Tags, {"records": records}, "f")
    assert str(excinfo.value) == "f.records[3].tags: expected an object"
