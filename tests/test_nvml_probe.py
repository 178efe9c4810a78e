"""The live probe and the traffic counters, driven through the fake pynvml."""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import sys
import types
from pathlib import Path

import pytest
from fake_pynvml import fake_sysfs_pci, make_fake_pynvml

from pytest_nvlink.model import FabricInfo, Gpu, Node, NvLinkInfo, P2PStatus, PairPath
from pytest_nvlink.sources.live.counters import (
    NO_PERMISSION_NOTE,
    Traffic,
    TrafficCounters,
    handle_for,
    read_traffic,
    traffic_delta,
)
from pytest_nvlink.sources.live.fields import NVLINK_VERSION_TO_GENERATION, bus_id_of
from pytest_nvlink.sources.live.mig import NO_MIG_NOTE
from pytest_nvlink.sources.live.probe import (
    LIBRARY_NOT_FOUND,
    cuda_version_text,
    join_cuda_indices,
    nvlink_count_between,
    probe_node,
    read_hypervisor_flag,
    torch_cuda_devices,
)
from pytest_nvlink.sources.snapshot.file import load_snapshot

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"
SNAPSHOT_FILES = ["h100-8gpu-healthy.json", "h100-8gpu-degraded.json", "h100-8gpu-vm-pcie.json"]
NOT_SUPPORTED = 3


def snapshot(name: str = "h100-8gpu-healthy.json") -> Node:
    node = load_snapshot(SNAPSHOTS / name)
    _drop_campaign_facts(node)  # recorded around the measurement campaign, never by the probe
    return _mig_as_probed(_health_decoded(node))


def _mig_as_probed(node: Node) -> Node:
    """The shipped snapshots predate MIG mode: the fake answers NotSupported for a GPU whose node records
    none (as a GPU without MIG does), which the probe records as disabled with its note."""
    for gpu in node.gpus:
        if gpu.mig_mode_current is None and f"gpu{gpu.index}.mig_mode" not in node.unknown_reasons:
            gpu.mig_mode_current = gpu.mig_mode_pending = "disabled"
            node.unknown_reasons[f"gpu{gpu.index}.mig_mode"] = NO_MIG_NOTE
    return node


@pytest.fixture
def cpuinfo(tmp_path: Path) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nflags\t\t: fpu vme de pse tsc msr\n\n")
    return path


def probe(fake: types.ModuleType, cpuinfo: Path) -> Node:
    sysfs = fake_sysfs_pci(fake.fake_state.node, cpuinfo.parent / "sys-bus-pci-devices")
    node = probe_node(fake, cpuinfo_path=cpuinfo, sysfs_pci=sysfs)
    assert fake.fake_state.init_count == 0, "nvmlShutdown must balance nvmlInit"
    return node


# --- round trip: snapshot -> fake -> probe -> the same facts ---------------------------------


def _drop_campaign_facts(node: Node) -> None:
    node.error_window_s = None
    for gpu in node.gpus:
        gpu.pcie_gen_loaded = None
        for link in gpu.nvlinks or []:
            link.errors_run = None


def _health_decoded(node: Node) -> Node:
    """The node as a current driver reports it: snapshots of earlier versions hold DEGRADED_BW alone, and the
    fake answers it in the health mask, which the probe decodes into the full health (its one known field)."""
    for gpu in node.gpus:
        fabric = gpu.fabric
        if fabric is not None and fabric.health_problems is None and fabric.degraded_bandwidth is not None:
            fabric.health_problems = ["degraded_bandwidth"] if fabric.degraded_bandwidth else []
    return node


@pytest.mark.parametrize("name", SNAPSHOT_FILES)
def test_probe_reproduces_the_snapshot(name: str, tmp_path: Path) -> None:
    expected = snapshot(name)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t: fpu" + (" hypervisor" if expected.hypervisor else "") + "\n")
    node = probe(make_fake_pynvml(expected), cpuinfo)
    assert node.source == "live"
    assert node.probe_errors == []
    for gpu, want in zip(node.gpus, expected.gpus, strict=True):
        assert gpu == want, f"gpu{want.index}"
    assert node.paths == expected.paths
    assert node.p2p == expected.p2p
    assert node.unknown_reasons == expected.unknown_reasons
    # A probe measures nothing; the snapshot's measurements come from the measurement session, and its
    # environment (versions, suite, outcome: snapshot schema 2) is recorded when the run saves; the Xid
    # events and their window come from the listener that runs beside the session (sources/live/events.py).
    assert node.xid_events is None and node.event_window is None
    probed = dataclasses.replace(
        node,
        source="replay",
        host=expected.host,
        measurements=expected.measurements,
        environment=expected.environment,
        xid_events=expected.xid_events,
        event_window=expected.event_window,
    )
    assert probed == expected
    assert node.measurements.p2p == []


def test_degraded_snapshot_reads_as_degraded(cpuinfo: Path) -> None:
    node = probe(make_fake_pynvml(snapshot("h100-8gpu-degraded.json")), cpuinfo)
    assert node.path(3, 0) == "NV16"
    assert node.path(2, 6) == "NV18"
    assert node.gpus[3].active_link_count() == 16
    status = node.p2p_status(6, 2)
    assert status is not None
    assert (status.read, status.write, status.nvlink) == ("disabled_by_regkey", "disabled_by_regkey", "ok")
    assert {gpu.fabric.state for gpu in node.gpus if gpu.fabric} == {"not_started"}
    links = node.gpus[5].nvlinks
    assert links is not None
    assert links[7].errors == {"replay": 3, "recovery": 0, "crc_flit": 12, "crc_data": 0, "ecc_data": 0}


def test_system_facts(cpuinfo: Path) -> None:
    node = probe(make_fake_pynvml(snapshot()), cpuinfo)
    assert (node.driver_version, node.cuda_driver_version, node.nvml_version) == ("550.54.15", "12.4", "12.550.54.15")
    assert node.hypervisor is False
    assert node.gpus[0].pci_bus_id == "0000:18:00.0"  # NVML's bytes "00000000:18:00.0", normalized
    links = node.gpus[0].nvlinks
    assert links is not None
    assert (links[0].version, links[0].speed_gbps, links[0].remote_pci_bus_id) == (4, 26.562, "0000:05:00.0")


def test_nvlink_bw_mode_is_reported_when_supported(cpuinfo: Path) -> None:
    node = snapshot()
    node.nvlink_bw_mode = "half"
    assert probe(make_fake_pynvml(node), cpuinfo).nvlink_bw_mode == "half"


# --- pitfalls ---------------------------------------------------------------------------------


def test_p2p_read_tuple_constant_is_not_used(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(snapshot())
    fake.nvmlInit()
    a, b = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(ctypes.ArgumentError):
        fake.nvmlDeviceGetP2PStatus(a, b, fake.NVML_P2P_CAPS_INDEX_READ)
    fake.nvmlShutdown()
    node = probe(fake, cpuinfo)
    assert node.p2p is not None
    assert len(node.p2p) == 56
    assert {s.read for s in node.p2p} == {"ok"}
    assert {call[2] for call in fake.fake_state.calls_to("nvmlDeviceGetP2PStatus")[1:]} == {0, 1, 2, 3}


def test_link_count_field_bounds_the_link_queries(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(snapshot(), max_links=36)
    probe(fake, cpuinfo)
    assert len(fake.fake_state.calls_to("nvmlDeviceGetNvLinkState")) == 8 * 18


def test_unsupported_link_count_falls_back_to_scanning(cpuinfo: Path) -> None:
    # GB200 pitfall: links 18..35 answer InvalidArgument, not NotSupported.
    expected = snapshot()
    fake = make_fake_pynvml(expected, max_links=36, unsupported_fields={91})
    node = probe(fake, cpuinfo)
    assert len(fake.fake_state.calls_to("nvmlDeviceGetNvLinkState")) == 8 * 36
    assert node.gpus == expected.gpus
    assert node.unknown_reasons == expected.unknown_reasons


def test_scan_on_gpu_without_nvlink_gives_empty_list(cpuinfo: Path) -> None:
    node = probe(make_fake_pynvml(snapshot("h100-8gpu-vm-pcie.json")), cpuinfo)
    assert [gpu.nvlinks for gpu in node.gpus] == [[]] * 8
    assert node.path(0, 1) == "PHB"
    assert node.path(0, 4) == "SYS"


def test_unscoped_speed_fields_are_the_fallback(cpuinfo: Path) -> None:
    expected = snapshot()
    node = probe(make_fake_pynvml(expected, unsupported_fields={164}), cpuinfo)
    assert node.gpus == expected.gpus  # links 0-11 from per-link fields, 12-17 from the common field


def test_link_speed_unknown_when_no_field_answers(cpuinfo: Path) -> None:
    fields = {164, 90, 84, 85, 86, 87, 88, 89, 132, 133, 134, 135, 136, 137}
    node = probe(make_fake_pynvml(snapshot(), unsupported_fields=fields), cpuinfo)
    links = node.gpus[0].nvlinks
    assert links is not None
    assert links[0].speed_gbps is None
    assert node.unknown_reasons["gpu0.nvlink0.speed_gbps"] == "NVML field 84: not_supported"
    assert node.unknown_reasons["gpu0.nvlink17.speed_gbps"] == "NVML field 90: not_supported"


def test_older_driver_without_fabric_v_uses_the_deprecated_call(cpuinfo: Path) -> None:
    node = probe(make_fake_pynvml(snapshot(), missing_functions={"nvmlDeviceGetGpuFabricInfoV"}), cpuinfo)
    # The old struct has no health mask, so degraded bandwidth is unknown.
    assert node.gpus[0].fabric == FabricInfo(state="completed", status="success", clique_id=0)


def test_driver_without_fabric_calls_leaves_fabric_unknown(cpuinfo: Path) -> None:
    missing = {"nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"}
    node = probe(make_fake_pynvml(snapshot(), missing_functions=missing), cpuinfo)
    assert node.gpus[0].fabric is None
    assert node.unknown_reasons["gpu0.fabric"] == "NVML: Function Not Found"
    node = probe(make_fake_pynvml(snapshot(), absent_functions=missing), cpuinfo)
    assert node.unknown_reasons["gpu0.fabric"] == "nvidia-ml-py has no GPU fabric call"


def test_fabric_not_supported_and_degraded(cpuinfo: Path) -> None:
    node = snapshot()
    node.gpus[0].fabric = FabricInfo(state="not_supported")
    node.gpus[1].fabric = FabricInfo(
        state="completed",
        status="success",
        clique_id=7,
        cluster_uuid="12345678-1234-5678-1234-567812345678",
        degraded_bandwidth=True,
    )
    probed = probe(make_fake_pynvml(node), cpuinfo)
    assert probed.gpus[0].fabric == FabricInfo(state="not_supported")
    assert probed.gpus[1].fabric == dataclasses.replace(node.gpus[1].fabric, health_problems=["degraded_bandwidth"])


def test_older_driver_without_remote_device_type(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(snapshot(), missing_functions={"nvmlDeviceGetNvLinkRemoteDeviceType"})
    node = probe(fake, cpuinfo)
    links = node.gpus[0].nvlinks
    assert links is not None
    assert links[0].remote_type is None
    assert node.unknown_reasons["gpu0.nvlink0.remote_type"] == "NVML: Function Not Found"
    # The far ends are no GPU, so the links still count as NVSwitch links.
    assert node.path(0, 7) == "NV18"


def test_per_counter_not_supported_omits_the_key(cpuinfo: Path) -> None:
    node = snapshot()
    links = node.gpus[0].nvlinks
    assert links is not None
    links[0].errors = {"replay": 1, "recovery": 0}
    probed = probe(make_fake_pynvml(node), cpuinfo)
    probed_links = probed.gpus[0].nvlinks
    assert probed_links is not None
    assert probed_links[0].errors == {"replay": 1, "recovery": 0}
    assert "gpu0.nvlink0.errors" not in probed.unknown_reasons


def test_no_error_counter_supported_gives_none(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(snapshot())
    fake.inject_error("nvmlDeviceGetNvLinkErrorCounter", NOT_SUPPORTED)
    node = probe(fake, cpuinfo)
    links = node.gpus[2].nvlinks
    assert links is not None
    assert links[4].errors is None
    assert node.unknown_reasons["gpu2.nvlink4.errors"] == "NVML: Not Supported"


def test_optional_fact_failure_is_recorded_not_raised(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(snapshot())
    fake.inject_error("nvmlDeviceGetSerial", NOT_SUPPORTED, gpu=3)
    fake.inject_error("nvmlDeviceGetCurrPcieLinkGeneration", fake.NVML_ERROR_NO_PERMISSION)
    node = probe(fake, cpuinfo)
    assert node.gpus[3].serial is None
    assert node.gpus[2].serial is not None
    assert node.unknown_reasons["gpu3.serial"] == "NVML: Not Supported"
    assert node.unknown_reasons["gpu0.pcie_gen_current"] == "NVML: Insufficient Permissions"
    assert node.gpus[0].pcie_gen_max == 5


def test_garbage_remote_bus_id_in_a_vm_is_unknown(cpuinfo: Path) -> None:
    node = snapshot()
    links = node.gpus[0].nvlinks
    assert links is not None
    links[0].remote_pci_bus_id = None
    probed = probe(make_fake_pynvml(node, remote_bus_id_junk=b"\xff\xfe\x01"), cpuinfo)
    probed_links = probed.gpus[0].nvlinks
    assert probed_links is not None
    assert probed_links[0].remote_pci_bus_id is None
    assert "not visible" in probed.unknown_reasons["gpu0.nvlink0.remote_pci_bus_id"]


def test_bus_id_of_decodes_struct_bytes() -> None:
    fake = make_fake_pynvml(None)
    info = fake.nvmlPciInfo_t()
    info.busId = b"00000000:AB:00.0"
    assert bus_id_of(info) == "0000:ab:00.0"
    info.busId = b""
    info.busIdLegacy = b"0000:2A:00.0"
    assert bus_id_of(info) == "0000:2a:00.0"
    assert bus_id_of(fake.nvmlPciInfo_t()) is None


def test_version_enum_is_converted_to_generation() -> None:
    # A100 answers 5 (NVML_NVLINK_VERSION_3_1): NVLink 3, not NVLink 5.
    assert NVLINK_VERSION_TO_GENERATION[5] == 3
    assert NVLINK_VERSION_TO_GENERATION[6] == 4
    assert NVLINK_VERSION_TO_GENERATION[7] == 5


def test_topology_not_supported_omits_the_pair(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(snapshot("h100-8gpu-vm-pcie.json"))
    fake.inject_error("nvmlDeviceGetTopologyCommonAncestor", NOT_SUPPORTED)
    node = probe(fake, cpuinfo)
    assert node.paths == []
    assert node.unknown_reasons["pair0-1.path"] == "NVML: Not Supported"
    assert node.path(0, 1) is None


def test_p2p_call_failure_leaves_that_capability_unknown(cpuinfo: Path) -> None:
    expected = snapshot()
    expected.p2p = [s for s in expected.p2p or [] if (s.src, s.dst) != (1, 0)]
    node = probe(make_fake_pynvml(expected), cpuinfo)
    assert node.p2p_status(1, 0) == P2PStatus(src=1, dst=0)
    assert node.unknown_reasons["p2p1-0.read"] == "NVML: Unknown Error"


def test_direct_gpu_links_count_per_peer(cpuinfo: Path) -> None:
    """DGX-1 style: links go straight to peer GPUs, so NV# differs per pair."""
    buses = ["0000:06:00.0", "0000:07:00.0", "0000:0a:00.0", "0000:85:00.0"]
    wiring = {0: [1, 1, 2, 3], 1: [0, 0, 2, 3], 2: [0, 1], 3: [0, 1]}

    def links(index: int) -> list[NvLinkInfo]:
        return [
            NvLinkInfo(
                link=n, active=True, version=2, speed_gbps=25.781, remote_type="gpu", remote_pci_bus_id=buses[peer]
            )
            for n, peer in enumerate(wiring[index])
        ]

    node = Node(source="replay", gpus=[Gpu(index=i, pci_bus_id=bus, nvlinks=links(i)) for i, bus in enumerate(buses)])
    node.paths = [PairPath(0, 1, "NV2"), PairPath(2, 3, "SYS")]
    probed = probe(make_fake_pynvml(node), cpuinfo)
    assert probed.path(0, 1) == "NV2"
    assert probed.path(0, 2) == "NV1"
    assert probed.path(2, 3) == "SYS"
    assert nvlink_count_between(probed.gpus[2], probed.gpus[3]) == 0


# --- conditions that stop the probe -----------------------------------------------------------


def test_library_not_found_is_a_sentence_not_an_exception(cpuinfo: Path) -> None:
    node = probe_node(make_fake_pynvml(None, library_missing=True), cpuinfo_path=cpuinfo)
    assert node.probe_errors == [LIBRARY_NOT_FOUND]
    assert node.gpus == []


def test_driver_not_loaded(cpuinfo: Path) -> None:
    node = probe_node(make_fake_pynvml(None, driver_not_loaded=True), cpuinfo_path=cpuinfo)
    assert len(node.probe_errors) == 1
    assert "driver is not loaded" in node.probe_errors[0]


def test_missing_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch, cpuinfo: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    node = probe_node(cpuinfo_path=cpuinfo)
    assert len(node.probe_errors) == 1
    assert node.probe_errors[0].startswith("nvidia-ml-py is not installed (import pynvml failed:")


def test_lost_gpu_is_reported_and_the_rest_probed(cpuinfo: Path) -> None:
    node = probe(make_fake_pynvml(snapshot(), lost_gpus={3}), cpuinfo)
    assert node.probe_errors == ["GPU 3 (bus 0000:5d:00.0) is lost: GPU is lost"]
    assert node.gpus[3].pci_bus_id == "0000:5d:00.0"
    assert node.gpus[3].problem == "NVML: GPU is lost"
    assert node.gpus[3].nvlinks is None
    assert node.gpus[4].nvlinks is not None
    assert node.path(3, 4) is None
    assert node.path(2, 4) == "NV18"
    assert node.p2p_status(3, 4) == P2PStatus(src=3, dst=4)
    assert node.unknown_reasons["pair3-4.path"] == "GPU 3 could not be probed"
    assert "NVLink state of GPU(s) [3]" in node.unknown_reasons["paths"]


def test_lost_gpu_at_handle_time(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(snapshot())
    fake.inject_error("nvmlDeviceGetHandleByIndex", fake.NVML_ERROR_GPU_IS_LOST, gpu=6)
    node = probe(fake, cpuinfo)
    assert node.probe_errors == ["GPU 6 (bus unknown) is lost: GPU is lost"]
    assert node.gpus[6] == Gpu(index=6, problem="NVML: GPU is lost")


def test_gpu_that_cannot_be_opened(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(snapshot())
    fake.inject_error("nvmlDeviceGetHandleByIndex", fake.NVML_ERROR_NO_PERMISSION, gpu=1)
    node = probe(fake, cpuinfo)
    assert node.gpus[1].problem == "NVML cannot open it: Insufficient Permissions"
    assert node.probe_errors == ["GPU 1: NVML cannot open it: Insufficient Permissions"]


def test_snapshot_with_a_lost_gpu_round_trips(cpuinfo: Path) -> None:
    lost = probe(make_fake_pynvml(snapshot(), lost_gpus={2}), cpuinfo)
    again = probe(make_fake_pynvml(lost), cpuinfo)
    assert again == lost


# --- CUDA order and host facts ----------------------------------------------------------------


def test_nvml_order_differs_from_cuda_order_joined_by_uuid(cpuinfo: Path) -> None:
    expected = snapshot()
    node = probe(make_fake_pynvml(expected, nvml_order=[4, 5, 6, 7, 0, 1, 2, 3]), cpuinfo)
    assert node.gpus[0].pci_bus_id == "0000:9a:00.0"
    # CUDA (PCI order) numbers the GPUs like the snapshot; torch drops the "GPU-" prefix.
    cuda: list[tuple[int, str | None, str | None]] = []
    for gpu in expected.gpus:
        assert gpu.uuid is not None
        cuda.append((gpu.index, gpu.uuid.removeprefix("GPU-") if gpu.index % 2 else gpu.uuid, None))
    cuda[7] = (7, None, "0000:DB:00.0")
    join_cuda_indices(node, cuda)
    assert [gpu.cuda_index for gpu in node.gpus] == [4, 5, 6, 7, 0, 1, 2, 3]


def test_unmatched_cuda_devices_are_noted() -> None:
    node = Node(source="live", gpus=[Gpu(index=0, uuid="GPU-abc", pci_bus_id="0000:18:00.0"), Gpu(index=1)])
    join_cuda_indices(node, [(0, None, "18:00.0"), (1, "GPU-zzz", None)])
    assert node.gpus[0].cuda_index == 0
    assert "matches no NVML GPU" in node.unknown_reasons["cuda1"]
    assert node.unknown_reasons["gpu1.cuda_index"] == "not visible to CUDA in this process"


def test_torch_cuda_devices_without_cuda() -> None:
    assert torch_cuda_devices() == []


def test_torch_cuda_devices_reads_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    props = [
        types.SimpleNamespace(
            uuid="8d2bc5a1-0000-1111-2222-333344445555", pci_bus_id=0x18, pci_domain_id=0, pci_device_id=0
        ),
        types.SimpleNamespace(),  # an old torch without these attributes
    ]
    cuda = types.SimpleNamespace(
        is_available=lambda: True, device_count=lambda: 2, get_device_properties=props.__getitem__
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert torch_cuda_devices() == [(0, "8d2bc5a1-0000-1111-2222-333344445555", "0000:18:00.0"), (1, None, None)]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("flags\t\t: fpu vme hypervisor lahf_lm\n", True),
        ("processor : 0\nflags\t\t: fpu vme\n", False),
        ("Features\t: fp asimd\n", None),  # aarch64 has no flags line
    ],
)
def test_hypervisor_flag(tmp_path: Path, content: str, expected: bool | None) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(content)
    assert read_hypervisor_flag(path) is expected


def test_unreadable_cpuinfo_is_unknown(tmp_path: Path) -> None:
    node = probe_node(make_fake_pynvml(None, library_missing=True), cpuinfo_path=tmp_path / "missing")
    assert node.hypervisor is None
    assert "hypervisor" in node.unknown_reasons


def test_cuda_version_text() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(11080) == "11.8"
    assert cuda_version_text(13000) == "13.0"


# --- traffic counters -------------------------------------------------------------------------


@pytest.fixture
def counters_fake() -> types.ModuleType:
    fake = make_fake_pynvml(snapshot())
    fake.nvmlInit()
    return fake


def test_read_traffic_scales_nvlink_kib_to_bytes(counters_fake: types.ModuleType) -> None:
    uuid = counters_fake.fake_state.gpus[0].uuid
    handle = handle_for(counters_fake, uuid)
    before = read_traffic(counters_fake, handle)
    assert before == Traffic(0, 0, 0, 0, stamps=before.stamps)
    # Every value carries its NVML timestamp, named by counter, field and scope (the path proof's freshness).
    assert [label for label, _ in before.stamps] == [
        "nvlink_tx_bytes (NVML field 138, all links)",
        "nvlink_rx_bytes (NVML field 139, all links)",
        "pcie_tx_bytes (NVML field 197)",
        "pcie_rx_bytes (NVML field 198)",
    ]
    counters_fake.add_traffic(uuid, nvlink_bytes=64 * 1024 * 1024, pcie_bytes=1000, pcie_rx_bytes=10)
    delta = traffic_delta(before, read_traffic(counters_fake, handle))
    assert delta == Traffic(nvlink_tx_bytes=64 * 1024 * 1024, nvlink_rx_bytes=0, pcie_tx_bytes=1000, pcie_rx_bytes=10)


def test_copy_over_nvlink_vs_pcie_fallback(counters_fake: types.ModuleType) -> None:
    src, dst = (gpu.uuid for gpu in counters_fake.fake_state.gpus[:2])
    handles = [handle_for(counters_fake, src.removeprefix("GPU-")), handle_for(counters_fake, "0000:2a:00.0")]
    before = [read_traffic(counters_fake, h) for h in handles]
    counters_fake.add_copy(src, dst, 256 << 20, via="pcie")
    after = [read_traffic(counters_fake, h) for h in handles]
    deltas = [traffic_delta(b, a) for b, a in zip(before, after, strict=True)]
    sums = [sum(d.value(name) or 0 for d in deltas) for name in ("nvlink_tx_bytes", "pcie_tx_bytes", "pcie_rx_bytes")]
    assert all(d.note is None for d in deltas)
    assert sums == [0, 256 << 20, 256 << 20]


def test_counters_without_permission() -> None:
    fake = make_fake_pynvml(snapshot(), counters_no_permission=True)
    fake.nvmlInit()
    traffic = read_traffic(fake, fake.nvmlDeviceGetHandleByIndex(0))
    assert traffic == Traffic(note=NO_PERMISSION_NOTE)
    fake.inject_error("nvmlDeviceGetFieldValues", fake.NVML_ERROR_NO_PERMISSION)
    assert read_traffic(fake, fake.nvmlDeviceGetHandleByIndex(0)).note == NO_PERMISSION_NOTE


def test_counters_on_a_gpu_without_nvlink() -> None:
    fake = make_fake_pynvml(snapshot("h100-8gpu-vm-pcie.json"))
    fake.nvmlInit()
    traffic = read_traffic(fake, fake.nvmlDeviceGetHandleByIndex(0))
    assert (traffic.nvlink_tx_bytes, traffic.pcie_tx_bytes) == (None, 0)
    assert traffic.note is not None
    assert "nvlink_tx_bytes: NVML field 138 not_supported" in traffic.note


def test_wrapped_counter_gives_none() -> None:
    fake = make_fake_pynvml(snapshot(), pcie_counter_bits=32)
    fake.nvmlInit()
    uuid = fake.fake_state.gpus[0].uuid
    handle = handle_for(fake, uuid)
    fake.add_traffic(uuid, pcie_bytes=(1 << 32) - 10)
    before = read_traffic(fake, handle)
    fake.add_traffic(uuid, pcie_bytes=20)
    delta = traffic_delta(before, read_traffic(fake, handle))
    assert delta.pcie_tx_bytes is None
    assert delta.note == "pcie_tx_bytes: counter went backwards (wrapped or reset)"


def test_traffic_counters_context_manager() -> None:
    fake = make_fake_pynvml(snapshot())
    uuid = fake.fake_state.gpus[1].uuid
    with TrafficCounters([uuid, "GPU-nope"], nvml=fake) as counters:
        assert fake.fake_state.init_count == 1
        before = counters.read()
        fake.add_traffic(uuid, nvlink_bytes=4096)
        after = counters.read()
    assert fake.fake_state.init_count == 0
    assert traffic_delta(before[uuid], after[uuid]).nvlink_tx_bytes == 4096
    assert after["GPU-nope"] == Traffic(note="NVML cannot open GPU GPU-nope: Not Found")


def test_traffic_counters_without_nvml() -> None:
    with TrafficCounters(["GPU-x"], nvml=make_fake_pynvml(None, library_missing=True)) as counters:
        assert counters.read() == {"GPU-x": Traffic(note="NVML unavailable: NVML Shared Library Not Found")}


def test_snapshot_nodes_are_not_mutated_by_the_fake(cpuinfo: Path) -> None:
    node = snapshot()
    before = copy.deepcopy(node)
    probe(make_fake_pynvml(node), cpuinfo)
    assert node == before
