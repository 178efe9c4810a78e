"""Snapshot files: round trip, strict reading, and the shipped examples."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_nvlink.model import Node
from pytest_nvlink.model.document import SCHEMA_VERSION, SnapshotError, node_to_dict, save_snapshot, snapshot_document
from pytest_nvlink.sources.snapshot.file import load_snapshot

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = ROOT / "snapshots"


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("make_snapshots", ROOT / "tests" / "data" / "make_snapshots.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _load_generator()


@pytest.mark.parametrize("file_name", sorted(GENERATOR.SNAPSHOTS))
def test_shipped_snapshot_matches_its_builder(file_name: str) -> None:
    built: Node = GENERATOR.SNAPSHOTS[file_name]()
    loaded = load_snapshot(SNAPSHOTS / file_name)
    assert loaded.source == "replay"
    assert loaded == dataclasses.replace(built, source="replay"), (
        f"{file_name} is stale: run python tests/data/make_snapshots.py"
    )


@pytest.mark.parametrize("file_name", sorted(GENERATOR.RACK_TEST_SNAPSHOTS))
def test_rack_test_snapshot_matches_its_builder(file_name: str) -> None:
    built: Node = GENERATOR.RACK_TEST_SNAPSHOTS[file_name]()
    loaded = load_snapshot(ROOT / "tests" / "data" / "rack" / file_name)
    assert loaded == dataclasses.replace(built, source="replay"), f"{file_name} is stale: run make_snapshots.py"


@pytest.mark.parametrize("file_name", sorted(GENERATOR.SNAPSHOTS))
def test_save_load_round_trip(file_name: str, tmp_path: Path) -> None:
    node: Node = GENERATOR.SNAPSHOTS[file_name]()
    path = tmp_path / "nested" / "node.json"
    save_snapshot(node, path)
    assert load_snapshot(path) == dataclasses.replace(node, source="replay")


def test_generator_writes_all_snapshots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert GENERATOR.main(["make_snapshots.py", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(GENERATOR.SNAPSHOTS)
    assert "h100-8gpu-healthy.json" in capsys.readouterr().out


@pytest.fixture
def document() -> dict[str, Any]:
    """A snapshot with its records in lists, as schemas 1 and 2 wrote them (schema 3 reads both forms)."""
    node = GENERATOR.healthy_h100()
    parsed: dict[str, Any] = json.loads(json.dumps({**snapshot_document(node), "node": node_to_dict(node)}))
    return parsed


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(document))
    return path


def _error(path: Path) -> str:
    with pytest.raises(SnapshotError) as excinfo:
        load_snapshot(path)
    message = str(excinfo.value)
    assert message.startswith(str(path)), message
    return message


def test_wrong_schema_version(tmp_path: Path, document: dict[str, Any]) -> None:
    document["schema_version"] = SCHEMA_VERSION + 1
    message = _error(_write(tmp_path, document))
    assert "schema_version" in message
    assert "not supported" in message


def test_not_a_snapshot(tmp_path: Path) -> None:
    assert "not a pytest-nvlink snapshot" in _error(_write(tmp_path, {"kind": "something-else"}))


def test_unknown_field(tmp_path: Path, document: dict[str, Any]) -> None:
    document["node"]["gpus"][2]["nvlinks"][0]["colour"] = "green"
    assert _error(_write(tmp_path, document)).endswith(":node.gpus[2].nvlinks[0].colour: unknown field")


def test_wrong_type(tmp_path: Path, document: dict[str, Any]) -> None:
    document["node"]["gpus"][1]["pcie_gen_max"] = "5"
    assert _error(_write(tmp_path, document)).endswith(":node.gpus[1].pcie_gen_max: expected int, got str")


def test_bool_is_not_an_int(tmp_path: Path, document: dict[str, Any]) -> None:
    document["node"]["gpus"][0]["numa_node"] = True
    assert "node.gpus[0].numa_node: expected int, got bool" in _error(_write(tmp_path, document))


def test_missing_required_field(tmp_path: Path, document: dict[str, Any]) -> None:
    del document["node"]["paths"][3]["path"]
    assert _error(_write(tmp_path, document)).endswith(":node.paths[3].path: required field missing")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    assert _error(path) == f"{path}: snapshot file not found"


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{ not json")
    assert "not a readable JSON snapshot" in _error(path)
