"""Fabric health read whole: every healthMask field and the v3 summary, on every driver generation."""

from __future__ import annotations

import ctypes
import types
from pathlib import Path

import pytest
from conftest import SNAPSHOTS
from fake_nvml_api import C
from fake_pynvml import make_fake_pynvml

from pytest_nvlink.model import FabricInfo, Node
from pytest_nvlink.sources.live import fields as nvml_fields
from pytest_nvlink.sources.live.fabric import FabricInfoV3, decode_health
from pytest_nvlink.sources.live.probe import probe_node
from pytest_nvlink.sources.snapshot.file import load_snapshot

V2, V3 = C["nvmlGpuFabricInfo_v2"], C["nvmlGpuFabricInfo_v3"]
HEALTH = "NVML_GPU_FABRIC_HEALTH_MASK"


def _node(problems: list[str] | None, summary: str | None = None) -> Node:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    fabric = node.gpus[2].fabric
    assert fabric is not None
    fabric.health_problems, fabric.health_summary = problems, summary
    return node


def _probe(fake: types.ModuleType, tmp_path: Path) -> Node:
    (tmp_path / "cpuinfo").write_text("flags\t: fpu\n")
    return probe_node(fake, cpuinfo_path=tmp_path / "cpuinfo", sysfs_pci=tmp_path)


def _mask(**fields: str) -> int:
    return sum(
        C[f"{HEALTH}_{name.upper()}_{value}"] << C[f"{HEALTH}_SHIFT_{name.upper()}"] for name, value in fields.items()
    )


def test_every_health_field_is_decoded_by_name() -> None:
    healthy = _mask(
        degraded_bw="FALSE",
        route_recovery="FALSE",
        route_unhealthy="FALSE",
        access_timeout_recovery="FALSE",
        incorrect_configuration="NONE",
        partition_assigned="TRUE",
        gfm_state="CONNECTED",
    )
    assert decode_health(healthy, C["NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY"]) == []
    sick = _mask(
        degraded_bw="FALSE",
        route_recovery="TRUE",
        route_unhealthy="TRUE",
        access_timeout_recovery="TRUE",
        incorrect_configuration="INSUFFICIENT_NVLINKS",
        partition_assigned="FALSE",
        gfm_state="DISCONNECTED",
    )
    assert decode_health(sick, C["NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY"]) == [
        "route_recovery",
        "route_unhealthy",
        "access_timeout_recovery",
        "incorrect_configuration:insufficient_nvlinks",
        "partition_not_assigned",
        "gfm_disconnected",
        "summary:limited_capacity",
    ]
    assert decode_health(0, 0) is None  # every field NOT_SUPPORTED: nothing reported
    assert decode_health(None) is None  # v1 struct
    assert decode_health(3 << 4) == ["route_unhealthy:unknown_value_3"]  # a value the header does not define


def test_v3_struct_is_asked_first_and_the_summary_fails_closed(tmp_path: Path) -> None:
    fake = make_fake_pynvml(_node(["route_unhealthy"], summary="unhealthy"))
    node = _probe(fake, tmp_path)
    fabric = node.gpus[2].fabric
    assert fabric is not None
    assert fabric.health_problems == ["route_unhealthy", "summary:unhealthy"]
    assert (fabric.health_summary, fabric.degraded_bandwidth) == ("unhealthy", False)
    first = fake.fake_state.calls_to("nvmlDeviceGetGpuFabricInfoV")[0][1]
    assert first._obj.version == V3 == fake.nvmlGpuFabricInfo_v3
    assert node.gpus[0].fabric is not None and node.gpus[0].fabric.health_problems == []


def test_a_driver_without_v3_answers_the_v2_mask(tmp_path: Path) -> None:
    fake = make_fake_pynvml(_node(["access_timeout_recovery"]), fabric_versions=[V2])
    node = _probe(fake, tmp_path)
    fabric = node.gpus[2].fabric
    assert fabric is not None and fabric.health_problems == ["access_timeout_recovery"]
    assert fabric.health_summary is None  # v2 has no summary
    versions = [args[1]._obj.version for args in fake.fake_state.calls_to("nvmlDeviceGetGpuFabricInfoV")[:2]]
    assert versions == [V3, V2]


def test_bindings_without_the_v3_struct_use_the_probes_own(tmp_path: Path) -> None:
    fake = make_fake_pynvml(
        _node(["route_recovery"], summary="unhealthy"), absent_functions=["c_nvmlGpuFabricInfo_v3_t"]
    )
    node = _probe(fake, tmp_path)
    assert not hasattr(fake, "c_nvmlGpuFabricInfo_v3_t")
    assert isinstance(fake.fake_state.calls_to("nvmlDeviceGetGpuFabricInfoV")[0][1]._obj, FabricInfoV3)
    fabric = node.gpus[2].fabric
    assert fabric is not None and fabric.health_problems == ["route_recovery", "summary:unhealthy"]


def test_r535_falls_back_to_state_and_status_and_says_why_health_is_unknown(tmp_path: Path) -> None:
    fake = make_fake_pynvml(_node(["route_unhealthy"]), missing_functions=["nvmlDeviceGetGpuFabricInfoV"])
    node = _probe(fake, tmp_path)
    assert node.gpus[2].fabric == FabricInfo(state="completed", status="success", clique_id=0)
    assert "a driver before R550" in node.unknown_reasons["gpu2.fabric.health"]
    assert "gpu2.fabric" not in node.unknown_reasons


def test_own_v3_struct_and_health_tables_match_the_real_module() -> None:
    real = pytest.importorskip("pynvml")
    ours = [(n, getattr(FabricInfoV3, n).offset, getattr(FabricInfoV3, n).size) for n, *_ in FabricInfoV3._fields_]
    theirs = real.c_nvmlGpuFabricInfo_v3_t
    assert ours == [(n, getattr(theirs, n).offset, getattr(theirs, n).size) for n, *_ in theirs._fields_]
    assert ctypes.sizeof(FabricInfoV3) == ctypes.sizeof(theirs) == real.nvmlGpuFabricInfo_v3 & 0xFFFFFF
    assert (
        real.nvmlGpuFabricInfo_v2,
        real.nvmlGpuFabricInfo_v3,
    ) == (nvml_fields.FABRIC_INFO_V2, nvml_fields.FABRIC_INFO_V3)
    real_name = {"degraded_bandwidth": "DEGRADED_BW"}
    for name, shift, width, meanings in nvml_fields.FABRIC_HEALTH_FIELDS:
        flag = real_name.get(name, name.upper())
        assert (getattr(real, f"{HEALTH}_SHIFT_{flag}"), getattr(real, f"{HEALTH}_WIDTH_{flag}")) == (shift, width)
        assert getattr(real, f"{HEALTH}_{flag}_NOT_SUPPORTED") == 0 not in meanings
        healthy = [value for value, problem in meanings.items() if problem is None]
        assert len(healthy) == 1, name
        problems = {getattr(real, n) for n in dir(real) if n.startswith(f"{HEALTH}_{flag}_")} - {0, *healthy}
        assert problems == {value for value, problem in meanings.items() if problem is not None}, name
    for code, summary in nvml_fields.FABRIC_HEALTH_SUMMARIES.items():
        assert getattr(real, f"NVML_GPU_FABRIC_HEALTH_SUMMARY_{summary.upper()}") == code
    for name in dir(real):  # the fake lists the real constants with the real values
        if name.startswith((HEALTH, "NVML_GPU_FABRIC_HEALTH_SUMMARY_", "nvmlGpuFabricInfo_v")) and name in C:
            assert C[name] == getattr(real, name), name


def test_snapshots_hold_the_decoded_health_only_where_known(tmp_path: Path) -> None:
    from pytest_nvlink.model.document import node_to_dict, save_snapshot

    node = _node(["route_unhealthy"])
    assert node.gpus[1].fabric is not None
    node.gpus[1].fabric.health_problems = []
    fabrics = [gpu["fabric"] for gpu in node_to_dict(node)["gpus"]]
    assert [("health_problems" in f, f.get("health_problems")) for f in fabrics[:3]] == [
        (False, None),  # unknown: the file stays as earlier versions wrote it
        (True, []),
        (True, ["route_unhealthy"]),
    ]
    save_snapshot(node, tmp_path / "node.json")
    back = load_snapshot(tmp_path / "node.json")
    assert [gpu.fabric.health_problems for gpu in back.gpus[:3] if gpu.fabric] == [None, [], ["route_unhealthy"]]
