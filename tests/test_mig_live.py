"""MIG mode and a VM's remapped NVLink bus ids, through the live probe and the fake pynvml.

The fake's ``nvmlDeviceGetMigMode`` is compared with nvidia-ml-py's own (constants, parameters, the
list it returns); the probe's reading of it, and of a guest whose NVLinks name the host's bus ids,
is driven through the fake.
"""

from __future__ import annotations

import inspect
import itertools
import types
from pathlib import Path

import pytest
from fake_pynvml import CONSTANTS, fake_sysfs_pci, make_fake_pynvml

from pytest_nvlink.model import Gpu, Node, NvLinkInfo, P2PStatus, PairPath
from pytest_nvlink.sources.live import mig
from pytest_nvlink.sources.live.probe import probe_node
from pytest_nvlink.sources.snapshot.file import load_snapshot

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"


@pytest.fixture
def real() -> types.ModuleType:
    module: types.ModuleType = pytest.importorskip("pynvml")
    return module


@pytest.fixture
def cpuinfo(tmp_path: Path) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text("flags\t\t: fpu hypervisor\n")
    return path


def _probe(fake: types.ModuleType, cpuinfo: Path) -> Node:
    sysfs = fake_sysfs_pci(fake.fake_state.node, cpuinfo.parent / "sys-bus-pci-devices")
    return probe_node(fake, cpuinfo_path=cpuinfo, sysfs_pci=sysfs)


def _healthy() -> Node:
    return load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")


# --- the fake's nvmlDeviceGetMigMode is the real one's ------------------------------------------------


def test_mig_constants_are_the_real_modules(real: types.ModuleType) -> None:
    fake = make_fake_pynvml(None)
    for name, ours in (("NVML_DEVICE_MIG_DISABLE", mig.NVML_DEVICE_MIG_DISABLE), ("NVML_DEVICE_MIG_ENABLE", 1)):
        assert getattr(real, name) == CONSTANTS[name] == getattr(fake, name) == ours, name
    assert mig.NVML_DEVICE_MIG_ENABLE == real.NVML_DEVICE_MIG_ENABLE


def test_get_mig_mode_takes_the_real_parameters_and_returns_a_list_as_the_real_one(real: types.ModuleType) -> None:
    fake = make_fake_pynvml(None)
    assert list(inspect.signature(fake.nvmlDeviceGetMigMode).parameters) == list(
        inspect.signature(real.nvmlDeviceGetMigMode).parameters
    )
    # nvidia-ml-py builds a list from two c_uint outputs: a caller unpacks it, never indexes a struct.
    assert "return [c_currentMode.value, c_pendingMode.value]" in inspect.getsource(real.nvmlDeviceGetMigMode)
    node = _healthy()
    node.gpus[0].mig_mode_current, node.gpus[0].mig_mode_pending = "enabled", "disabled"
    fake = make_fake_pynvml(node)
    fake.nvmlInit()
    answer = fake.nvmlDeviceGetMigMode(fake.nvmlDeviceGetHandleByIndex(0))
    assert type(answer) is list and answer == [real.NVML_DEVICE_MIG_ENABLE, real.NVML_DEVICE_MIG_DISABLE]


def test_the_probe_calls_get_mig_mode_as_the_real_module_names_it(real: types.ModuleType) -> None:
    source = inspect.getsource(mig)
    assert '"nvmlDeviceGetMigMode"' in source and callable(real.nvmlDeviceGetMigMode)


# --- the probe -----------------------------------------------------------------------------------------


def test_probe_reads_current_and_pending_mig_mode(cpuinfo: Path) -> None:
    node = _healthy()
    for gpu in node.gpus:
        gpu.mig_mode_current = gpu.mig_mode_pending = "disabled"
    node.gpus[2].mig_mode_current = "enabled"  # enabled now, disabled after the next reset
    node.gpus[5].mig_mode_pending = "enabled"
    probed = _probe(make_fake_pynvml(node), cpuinfo)
    modes = [(gpu.mig_mode_current, gpu.mig_mode_pending) for gpu in probed.gpus]
    assert modes[2] == ("enabled", "disabled")
    assert modes[5] == ("disabled", "enabled")
    assert modes.count(("disabled", "disabled")) == 6
    assert not [key for key in probed.unknown_reasons if "mig" in key]


def test_not_supported_means_a_gpu_without_mig_and_reads_as_disabled_with_a_note(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(_healthy())
    fake.inject_error("nvmlDeviceGetMigMode", fake.NVML_ERROR_NOT_SUPPORTED, gpu=1)
    probed = _probe(fake, cpuinfo)
    assert (probed.gpus[1].mig_mode_current, probed.gpus[1].mig_mode_pending) == ("disabled", "disabled")
    assert probed.unknown_reasons["gpu1.mig_mode"] == mig.NO_MIG_NOTE


@pytest.mark.parametrize(
    ("code", "reason"),
    [("NVML_ERROR_NO_PERMISSION", "NVML: Insufficient Permissions"), ("NVML_ERROR_UNKNOWN", "NVML: Unknown Error")],
)
def test_other_errors_leave_the_mig_mode_unknown(cpuinfo: Path, code: str, reason: str) -> None:
    fake = make_fake_pynvml(_healthy())
    fake.inject_error("nvmlDeviceGetMigMode", getattr(fake, code), gpu=4)
    probed = _probe(fake, cpuinfo)
    assert (probed.gpus[4].mig_mode_current, probed.gpus[4].mig_mode_pending) == (None, None)
    assert probed.unknown_reasons["gpu4.mig_mode"] == reason


def test_bindings_without_get_mig_mode_leave_it_unknown(cpuinfo: Path) -> None:
    probed = _probe(make_fake_pynvml(_healthy(), absent_functions=["nvmlDeviceGetMigMode"]), cpuinfo)
    assert probed.gpus[0].mig_mode_current is None
    assert probed.unknown_reasons["gpu0.mig_mode"] == "nvidia-ml-py has no nvmlDeviceGetMigMode"


def test_a_gpu_lost_at_the_mig_query_is_reported_lost(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(_healthy())
    fake.inject_error("nvmlDeviceGetMigMode", fake.NVML_ERROR_GPU_IS_LOST, gpu=6)
    probed = _probe(fake, cpuinfo)
    assert probed.gpus[6].problem == "NVML: GPU is lost"
    assert any(error.startswith("GPU 6 (bus 0000:") for error in probed.probe_errors)


@pytest.mark.parametrize("answer", [(1,), 7, [1, 9]])
def test_an_answer_that_is_not_two_known_modes_is_unknown_not_a_guess(answer: object) -> None:
    fake = types.SimpleNamespace(
        nvmlDeviceGetMigMode=lambda handle: answer,
        NVMLError=RuntimeError,
        NVMLError_GpuIsLost=KeyError,
        NVMLError_NotSupported=LookupError,
    )
    reasons: dict[str, str] = {}
    assert mig.read_mig_mode(fake, object(), "gpu0.mig_mode", reasons) == (None, None)  # type: ignore[arg-type]
    assert "nvmlDeviceGetMigMode answered" in reasons["gpu0.mig_mode"]


# --- a VM guest whose NVLinks name the host's bus ids (issue 25, item 11) -------------------------------

GUEST = ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"]
HOST = ["0000:41:00.0", "0000:42:00.0", "0000:c1:00.0", "0000:c2:00.0"]


def _direct_nvlink_node(links_per_pair: int = 4, nvlink_status: str = "ok", gpus: int = 4) -> Node:
    """HGX A100 4-GPU style: every GPU has ``links_per_pair`` links straight to each peer, no NVSwitch."""

    def links(index: int) -> list[NvLinkInfo]:
        peers = [peer for peer in range(gpus) for _ in range(links_per_pair) if peer != index]
        return [
            NvLinkInfo(n, active=True, version=3, speed_gbps=25.0, remote_type="gpu", remote_pci_bus_id=GUEST[peer])
            for n, peer in enumerate(peers)
        ]

    node = Node(source="replay")
    node.gpus = [Gpu(index=i, name="NVIDIA A100-SXM4-80GB", pci_bus_id=GUEST[i], nvlinks=links(i)) for i in range(gpus)]
    node.p2p = [
        P2PStatus(src, dst, read="ok", write="ok", nvlink=nvlink_status, atomics="ok")
        for src, dst in itertools.permutations(range(gpus), 2)
    ]
    return node


def test_remapped_remote_bus_ids_fall_back_to_nvlink_p2p_status(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(_direct_nvlink_node(), remote_bus_ids=dict(zip(GUEST, HOST, strict=True)))
    probed = _probe(fake, cpuinfo)
    links = probed.gpus[0].nvlinks
    assert links is not None and links[0].remote_pci_bus_id == HOST[1]  # the host's id, no GPU of this guest
    assert {path.path for path in probed.paths or []} == {"NV4"}
    assert len(probed.paths or []) == 6
    note = probed.unknown_reasons["pair0-1.path_decided_by"]
    assert "no GPU of this node (a VM remaps bus ids)" in note and note.endswith(
        "nvmlDeviceGetP2PStatus(NVLINK) = ok: NV4"
    )
    asked = [args[2] for args in fake.fake_state.calls_to("nvmlDeviceGetP2PStatus")[:1]]
    assert asked == [CONSTANTS["NVML_P2P_CAPS_INDEX_NVLINK"]]  # the NVLink capability, before any topology call


def test_matching_remote_bus_ids_need_no_fallback(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(_direct_nvlink_node())
    probed = _probe(fake, cpuinfo)
    assert {path.path for path in probed.paths or []} == {"NV4"}
    assert not [key for key in probed.unknown_reasons if key.endswith("path_decided_by")]
    assert fake.fake_state.calls_to("nvmlDeviceGetTopologyCommonAncestor") == []


def test_nvlink_p2p_not_supported_is_taken_as_pcie_with_the_reason(cpuinfo: Path) -> None:
    node = _direct_nvlink_node(nvlink_status="not_supported")
    node.paths = [PairPath(a, b, "SYS") for a, b in itertools.combinations(range(4), 2)]  # what the guest's PCIe shows
    probed = _probe(make_fake_pynvml(node, remote_bus_ids=dict(zip(GUEST, HOST, strict=True))), cpuinfo)
    assert probed.path(0, 1) == "SYS"  # the topology's PCIe class, as before the fallback
    assert probed.unknown_reasons["pair0-1.path_decided_by"].endswith("= not_supported: taken as PCIe")


def test_a_failing_nvlink_p2p_query_leaves_the_path_unknown(cpuinfo: Path) -> None:
    fake = make_fake_pynvml(_direct_nvlink_node(), remote_bus_ids=dict(zip(GUEST, HOST, strict=True)))
    fake.inject_error("nvmlDeviceGetP2PStatus", fake.NVML_ERROR_UNKNOWN)
    probed = _probe(fake, cpuinfo)
    assert probed.path(0, 1) is None  # neither NVLink nor a PCIe class is known: the path check fails closed
    assert probed.unknown_reasons["pair0-1.path"].endswith("nvmlDeviceGetP2PStatus(NVLINK) failed: NVML: Unknown Error")


def test_the_far_ends_tell_each_pairs_own_link_count(cpuinfo: Path) -> None:
    node = _direct_nvlink_node()
    for index, link in ((0, 0), (1, 0)):  # the first link of GPU 0 to GPU 1 is down, at both ends
        links = node.gpus[index].nvlinks
        assert links is not None
        links[link].active = False
    probed = _probe(make_fake_pynvml(node, remote_bus_ids=dict(zip(GUEST, HOST, strict=True))), cpuinfo)
    assert (probed.path(0, 1), probed.path(0, 2), probed.path(2, 3)) == ("NV3", "NV4", "NV4")


def test_link_counts_the_two_ends_disagree_on_leave_the_path_unknown(cpuinfo: Path) -> None:
    node = _direct_nvlink_node()
    links = node.gpus[0].nvlinks
    assert links is not None
    links[0].active = False  # GPU 0 counts 3 links to GPU 1, GPU 1 counts 4 back
    probed = _probe(make_fake_pynvml(node, remote_bus_ids=dict(zip(GUEST, HOST, strict=True))), cpuinfo)
    assert probed.path(1, 2) == "NV4"
    assert probed.path(0, 1) is None
    assert "which of their links join them is not told" in probed.unknown_reasons["pair0-1.path"]


def test_a_two_gpu_guest_that_sees_no_far_end_is_nvlink_by_p2p_status(cpuinfo: Path) -> None:
    node = _direct_nvlink_node(links_per_pair=12, gpus=2)
    for gpu in node.gpus:
        for link in gpu.nvlinks or []:
            link.remote_pci_bus_id = None  # an H100 NVL pair in a guest: the bridge's far end not visible
    probed = _probe(make_fake_pynvml(node), cpuinfo)
    assert probed.path(0, 1) == "NV12"
    assert "far ends (none)" in probed.unknown_reasons["pair0-1.path_decided_by"]
