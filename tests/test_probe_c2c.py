"""The live probe's NVLink-C2C state (issue 27, section 1, Grace): read through the fake NVML.

The C2C figures in these tests are constructed (link counts and speeds of no particular product):
they pin how the probe reads and converts what NVML answers, not what a GH200 reports.
"""

from __future__ import annotations

import copy
import types
from pathlib import Path

from fake_pynvml import fake_sysfs_pci, make_fake_pynvml

from pytest_nvlink.model import Node
from pytest_nvlink.model.host_link import C2CInfo, C2CLink
from pytest_nvlink.sources.live.probe import probe_node
from pytest_nvlink.sources.snapshot.file import load_snapshot

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"
GRACE_C2C = C2CInfo(link_count=3, links=[C2CLink(0, True, 40.0), C2CLink(1, True, 40.0), C2CLink(2, False, None)])


def _node(gpus: int = 2) -> Node:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.gpus = node.gpus[:gpus]
    return node


def _probe(fake: types.ModuleType, tmp_path: Path) -> Node:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu\n\n")
    sysfs = fake_sysfs_pci(fake.fake_state.node, tmp_path / "sys-bus-pci-devices")
    return probe_node(fake, cpuinfo_path=cpuinfo, sysfs_pci=sysfs)


def test_a_grace_gpu_reports_its_c2c_links_and_an_x86_h100_has_none_without_a_failure(tmp_path: Path) -> None:
    served = _node()
    served.gpus[0].name = "NVIDIA GH200 480GB"
    served.gpus[0].c2c = copy.deepcopy(GRACE_C2C)
    node = _probe(make_fake_pynvml(served), tmp_path)
    assert node.gpus[0].c2c == GRACE_C2C  # MBps from NVML, GB/s in the model; the inactive link has no speed
    assert node.gpus[1].c2c is None  # NotSupported: a PCIe host link
    assert not [key for key in node.unknown_reasons if "c2c" in key]
    assert not node.probe_errors


def test_a_c2c_error_other_than_not_supported_is_an_unknown_with_its_reason(tmp_path: Path) -> None:
    served = _node()
    served.gpus[1].c2c = copy.deepcopy(GRACE_C2C)
    served.gpus[1].c2c.links[1].active = None  # the driver answers ERROR_UNKNOWN for this link's status
    node = _probe(make_fake_pynvml(served), tmp_path)
    c2c = node.gpus[1].c2c
    assert c2c is not None and [link.active for link in c2c.links] == [True, None, False]
    assert node.unknown_reasons["gpu1.c2c1.active"] == "NVML field 171 (C2C link status): unknown"
    assert "gpu1.c2c2.max_bandwidth_gbps" not in node.unknown_reasons  # inactive: no speed expected


def test_a_refused_count_leaves_c2c_unknown_not_absent(tmp_path: Path) -> None:
    served = _node(1)
    served.gpus[0].c2c = copy.deepcopy(GRACE_C2C)
    fake = make_fake_pynvml(served, field_errors={170: 4})  # NVML_ERROR_NO_PERMISSION on the count
    node = _probe(fake, tmp_path)
    assert node.gpus[0].c2c is None
    assert node.unknown_reasons["gpu0.c2c"] == "NVML field 170 (C2C link count): no_permission"
