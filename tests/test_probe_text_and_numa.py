"""Probe faithfulness to nvidia-ml-py: strict text decoding and the two NUMA facts (issue 9, items 6, 10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_pynvml import fake_sysfs_pci, make_fake_pynvml

from pytest_nvlink.sources.live.probe import probe_node
from pytest_nvlink.sources.snapshot.file import load_snapshot

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"


def _cpuinfo(tmp_path: Path) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text("flags\t: fpu\n")
    return path


def test_garbage_gpu_bus_id_is_an_unknown_fact_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    fake = make_fake_pynvml(node)
    real_pci = fake.nvmlDeviceGetPciInfo

    def garbage_pci(handle: Any) -> Any:
        info = real_pci(handle)
        info.busId = b"\xff\xfe\x01"
        info.busIdLegacy = b"\xc3"
        return info

    monkeypatch.setattr(fake, "nvmlDeviceGetPciInfo", garbage_pci)
    probed = probe_node(fake, cpuinfo_path=_cpuinfo(tmp_path), sysfs_pci=tmp_path / "nosys")
    assert probed.gpus[0].pci_bus_id is None
    assert probed.unknown_reasons["gpu0.pci_bus_id"] == "NVML returned an invalid bus id b'\\xff\\xfe\\x01'"
    assert probed.gpus[0].name == "NVIDIA H100 80GB HBM3"  # the rest of the GPU is still probed


def test_non_utf8_string_answer_is_an_unknown_fact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    fake = make_fake_pynvml(node)

    def serial(handle: Any) -> str:
        return b"\xff\x00".decode()  # what nvidia-ml-py's convertStrBytes does with such bytes

    monkeypatch.setattr(fake, "nvmlDeviceGetSerial", serial)
    probed = probe_node(fake, cpuinfo_path=_cpuinfo(tmp_path), sysfs_pci=tmp_path / "nosys")
    assert probed.gpus[0].serial is None
    assert probed.unknown_reasons["gpu0.serial"].startswith("NVML returned text that is not UTF-8")


def test_cpu_numa_node_comes_from_sysfs_and_gpu_memory_numa_from_nvml(tmp_path: Path) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    sysfs = fake_sysfs_pci(node, tmp_path / "sys")
    probed = probe_node(make_fake_pynvml(node), cpuinfo_path=_cpuinfo(tmp_path), sysfs_pci=sysfs)
    assert [gpu.numa_node for gpu in probed.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    # x86: GPU memory is no NUMA node; NVML says NotSupported and the CPU affinity is untouched.
    assert [gpu.gpu_memory_numa_node for gpu in probed.gpus] == [None] * 8
    assert probed.unknown_reasons["gpu0.gpu_memory_numa_node"] == "NVML: Not Supported"


def test_grace_style_gpu_memory_numa_node_and_missing_sysfs(tmp_path: Path) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    for gpu in node.gpus:
        gpu.gpu_memory_numa_node = 2 + gpu.index
    probed = probe_node(make_fake_pynvml(node), cpuinfo_path=_cpuinfo(tmp_path), sysfs_pci=tmp_path / "nosys")
    assert [gpu.gpu_memory_numa_node for gpu in probed.gpus] == list(range(2, 10))
    assert probed.gpus[0].numa_node is None
    assert "numa_node unreadable" in probed.unknown_reasons["gpu0.numa_node"]
