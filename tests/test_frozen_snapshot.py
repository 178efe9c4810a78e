"""A schema-1 snapshot frozen as first shipped: it must load and give the same verdicts for as long as schema 1 is read.

The demo snapshots in ``snapshots/`` are regenerated from the current model, so they can never show
that an old file still reads. ``tests/data/frozen/`` holds a copy made before later model changes
and is never regenerated (its hash is pinned): fields added to the model since must be optional,
and a file without them must read with their defaults and be judged as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
import xml.etree.ElementTree as ET
from itertools import combinations
from typing import Any

import pytest
from conftest import DATA

from pytest_nvlink import model
from pytest_nvlink.model.document import READABLE_SCHEMAS, SCHEMA_VERSION
from pytest_nvlink.sources.snapshot.file import load_snapshot

FROZEN = DATA / "frozen" / "h100-8gpu-degraded-schema1.json"
FROZEN_SHA256 = "7841b0d542ef2acd4ca68d7a000078c9c2219d91721d1f4d48d4c2c72ce42511"
P2P_CHECKS = ("test_p2p_status", "test_p2p_unidirectional", "test_p2p_bidirectional", "test_p2p_latency")


def _document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(FROZEN.read_text(encoding="utf-8"))
    return document


def test_the_frozen_file_is_never_regenerated() -> None:
    assert hashlib.sha256(FROZEN.read_bytes()).hexdigest() == FROZEN_SHA256, (
        f"{FROZEN} changed: it is a frozen schema-1 file; restore it from git instead of regenerating it"
    )
    assert _document()["schema_version"] == 1


def _dataclass_in(hint: object) -> type | None:
    """The dataclass a field holds (directly, optionally or as list items), if any."""
    if dataclasses.is_dataclass(hint):
        return hint  # type: ignore[return-value]
    return next((found for arg in typing.get_args(hint) if (found := _dataclass_in(arg))), None)


def _missing_fields(cls: type, data: object, where: str, found: list[tuple[str, str, object]]) -> None:
    """(path, field, default) for every model field the JSON object lacks, recursively (first record of lists)."""
    if not isinstance(data, dict):
        return
    hints = typing.get_type_hints(cls)
    for spec in dataclasses.fields(cls):
        if spec.name not in data:
            default = spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default
            found.append((where, spec.name, default))
            continue
        inner, value = _dataclass_in(hints[spec.name]), data[spec.name]
        if inner is not None and isinstance(value, list):
            if value:
                _missing_fields(inner, value[0], f"{where}.{spec.name}[0]", found)
        elif inner is not None:
            _missing_fields(inner, value, f"{where}.{spec.name}", found)


def test_fields_added_since_read_with_their_defaults() -> None:
    """Documents which model fields the frozen file predates; each must be optional and read as its default."""
    # Schema 2 (environment and measurement conditions) still reads schema 1, migrating it on read.
    assert 1 in READABLE_SCHEMAS, f"schema {SCHEMA_VERSION} no longer reads schema 1: decide, then update this test"
    missing: list[tuple[str, str, object]] = []
    _missing_fields(model.Node, _document()["node"], "node", missing)
    node = load_snapshot(FROZEN)
    assert ("node.measurements.collectives[0]", "rank_gpus", None) in missing
    assert ("node", "environment", None) in missing  # schema 2: read as "not recorded", nothing invented
    assert ("node.measurements.p2p[0]", "conditions", None) in missing
    for where, name, default in missing:
        assert default is not dataclasses.MISSING, f"{where}.{name} was added as a required field"
    assert node.measurements.collectives[0].rank_gpus is None
    assert node.environment is None
    assert node.measurements.p2p[0].conditions is None


def test_frozen_snapshot_gives_the_verdicts_it_always_gave(pytester: pytest.Pytester) -> None:
    xml_path = pytester.path / "frozen.xml"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-replay={FROZEN}", f"--junitxml={xml_path}", "-p", "no:cacheprovider"
    )
    cases = {case.get("name", ""): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    failed = {
        name for name, case in cases.items() if case.find("failure") is not None or case.find("error") is not None
    }
    expected = {"test_nvlink_active_links[gpu3]", "test_nvlink_errors[gpu5]", "test_collective_busbw[all_reduce]"}
    expected |= {"test_nccl_transport"} | {f"test_fabric[gpu{i}]" for i in range(8)}
    expected |= {f"test_path[gpu{a}-gpu{b}]" for a, b in combinations(range(8), 2) if 3 in (a, b)}
    expected |= {
        f"{check}[gpu{a}-gpu{b}]" for check in (*P2P_CHECKS, "test_p2p_path_proof") for a, b in ((2, 6), (6, 2))
    }
    # A rule added since this file was frozen: the PCIe generation is judged only as sampled under load,
    # which a schema-1 file never recorded, so those items fail closed as "not measured under load".
    expected |= {f"test_pcie_link[gpu{i}]" for i in range(8)}
    # Likewise the Xid check (issue 27): a file that predates recorded events says nothing about Xids.
    expected |= {f"test_xid[gpu{i}]" for i in range(8)}
    # And the host link (issue 27): a file without host-link figures fails each GPU as not measured.
    expected |= {f"test_host_link[gpu{i}]" for i in range(8)}
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert len(cases) == 388
    assert failed == expected
    assert "not measured under load" in _failure(cases["test_pcie_link[gpu0]"])
    assert "the source watched for no driver events" in _failure(cases["test_xid[gpu0]"])
    assert "host link not measured" in _failure(cases["test_host_link[gpu0]"])
    result.stdout.fnmatch_lines(["partial audit: 388 of 388 checks had evidence"])


def _failure(case: ET.Element) -> str:
    failure = case.find("failure")
    assert failure is not None
    return failure.get("message", "")
