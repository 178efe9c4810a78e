"""The fake pynvml must behave like nvidia-ml-py where our code depends on it."""

from __future__ import annotations

import ctypes
import inspect
import os
import types
from pathlib import Path

import pytest
from fake_pynvml import CONSTANTS, ERROR_CLASSES, make_fake_pynvml

from pytest_nvlink.model import Node
from pytest_nvlink.sources.snapshot.file import load_snapshot

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"


@pytest.fixture
def healthy() -> Node:
    return load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")


@pytest.fixture
def nvml(healthy: Node) -> types.ModuleType:
    fake = make_fake_pynvml(healthy)
    fake.nvmlInit()
    return fake


@pytest.fixture
def real_pynvml() -> types.ModuleType:
    module: types.ModuleType = pytest.importorskip("pynvml")
    return module


# --- the fake mirrors the real module ---------------------------------------------------------


def test_constants_have_the_real_values(real_pynvml: types.ModuleType) -> None:
    compared = 0
    for name, value in CONSTANTS.items():
        if name == "NVML_NVLINK_MAX_LINKS" or not hasattr(real_pynvml, name):
            continue  # MAX_LINKS is 18 or 36 depending on the bindings' release
        assert getattr(real_pynvml, name) == value, name
        compared += 1
    assert compared > 100


def test_read_index_is_the_tuple_in_both(real_pynvml: types.ModuleType) -> None:
    assert real_pynvml.NVML_P2P_CAPS_INDEX_READ == (0,)
    assert make_fake_pynvml(None).NVML_P2P_CAPS_INDEX_READ == (0,)


def test_error_classes_exist_in_the_real_module(real_pynvml: types.ModuleType) -> None:
    for name, cls in ERROR_CLASSES.items():
        real = getattr(real_pynvml, name)
        assert real(0).value == cls(0).value, name
    # Codes in pynvml's own table; for others it asks the driver (nvmlErrorString).
    for code in (1, 2, 3, 4, 9, 12, 13, 15, 999):
        assert str(real_pynvml.NVMLError(code)) == str(make_fake_pynvml(None).NVMLError(code))


def test_function_signatures_match_the_real_module(real_pynvml: types.ModuleType) -> None:
    fake = make_fake_pynvml(None)
    names = [name for name in dir(fake) if name.startswith("nvml") and inspect.isfunction(getattr(fake, name))]
    assert len(names) > 30
    for name in names:
        real = inspect.signature(getattr(real_pynvml, name))
        assert list(inspect.signature(getattr(fake, name)).parameters) == list(real.parameters), name


@pytest.mark.parametrize("struct", ["nvmlPciInfo_t", "c_nvmlFieldValue_t", "c_nvmlGpuFabricInfoV_t"])
def test_struct_layouts_match_the_real_module(real_pynvml: types.ModuleType, struct: str) -> None:
    real, fake = getattr(real_pynvml, struct), getattr(make_fake_pynvml(None), struct)
    assert ctypes.sizeof(real) == ctypes.sizeof(fake)
    assert [f[0] for f in real._fields_] == [f[0] for f in fake._fields_]


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia"), reason="an NVIDIA driver is present")
def test_real_module_without_driver_raises_library_not_found(real_pynvml: types.ModuleType) -> None:
    with pytest.raises(real_pynvml.NVMLError_LibraryNotFound):
        real_pynvml.nvmlInit()
    with pytest.raises(make_fake_pynvml(None, library_missing=True).NVMLError_LibraryNotFound):
        make_fake_pynvml(None, library_missing=True).nvmlInit()


def test_real_ctypes_rejects_a_tuple_like_the_fake(healthy: Node) -> None:
    libc = ctypes.CDLL(None)
    with pytest.raises(ctypes.ArgumentError) as real:
        libc.abs(1, 2, (0,))
    fake = make_fake_pynvml(healthy)
    fake.nvmlInit()
    a, b = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(ctypes.ArgumentError) as faked:
        fake.nvmlDeviceGetP2PStatus(a, b, fake.NVML_P2P_CAPS_INDEX_READ)
    assert str(faked.value) == str(real.value)


@pytest.mark.parametrize("junk", [b"\xff\xfe\x01", b"0000:1b:00.0\xc3"])
def test_struct_text_fields_decode_strictly_in_both(real_pynvml: types.ModuleType, junk: bytes) -> None:
    real, fake = real_pynvml.nvmlPciInfo_t(), make_fake_pynvml(None).nvmlPciInfo_t()
    for info in (real, fake):
        info.busIdLegacy = b"0000:1B:00.0"
        info.busId = junk
    for info in (real, fake):
        with pytest.raises(UnicodeDecodeError):
            _ = info.busId
        assert info.busIdLegacy == "0000:1B:00.0"
        assert isinstance(info.busIdLegacy, str)


# --- errors and initialization ----------------------------------------------------------------


def test_nvml_error_maps_codes_to_subclasses() -> None:
    fake = make_fake_pynvml(None)
    error = fake.NVMLError(3)
    assert type(error) is fake.NVMLError_NotSupported
    assert isinstance(error, fake.NVMLError)
    assert error.value == 3
    assert str(error) == "Not Supported"
    assert fake.nvmlExceptionClass(15) is fake.NVMLError_GpuIsLost
    assert fake.NVMLError_InvalidArgument().value == 2
    with pytest.raises(ValueError, match="not valid"):
        fake.nvmlExceptionClass(12345)


def test_calls_before_init_and_after_shutdown_raise_uninitialized(healthy: Node) -> None:
    fake = make_fake_pynvml(healthy)
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 8
    fake.nvmlShutdown()
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlShutdown()


def test_library_missing_and_driver_not_loaded() -> None:
    fake = make_fake_pynvml(None, library_missing=True)
    with pytest.raises(fake.NVMLError_LibraryNotFound):
        fake.nvmlInit()
    fake = make_fake_pynvml(None, driver_not_loaded=True)
    with pytest.raises(fake.NVMLError_DriverNotLoaded):
        fake.nvmlInit()


def test_missing_and_absent_functions(healthy: Node) -> None:
    fake = make_fake_pynvml(
        healthy, missing_functions={"nvmlDeviceGetGpuFabricInfoV"}, absent_functions={"nvmlDeviceGetNumaNodeId"}
    )
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    info = fake.c_nvmlGpuFabricInfoV_t()
    with pytest.raises(fake.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    assert not hasattr(fake, "nvmlDeviceGetNumaNodeId")


def test_injected_error_hits_only_the_named_gpu(nvml: types.ModuleType) -> None:
    nvml.inject_error("nvmlDeviceGetSerial", nvml.NVML_ERROR_NOT_SUPPORTED, gpu=3)
    assert nvml.nvmlDeviceGetSerial(nvml.nvmlDeviceGetHandleByIndex(2))
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetSerial(nvml.nvmlDeviceGetHandleByIndex(3))


# --- answers ----------------------------------------------------------------------------------


def test_strings_are_str_but_struct_bus_ids_are_bytes(nvml: types.ModuleType, healthy: Node) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3"
    assert nvml.nvmlDeviceGetUUID(handle).startswith("GPU-")
    pci = nvml.nvmlDeviceGetPciInfo(handle)
    assert pci.busId == "00000000:18:00.0"  # nvidia-ml-py decodes char[] fields on access
    assert pci.busIdLegacy == "0000:18:00.0"
    assert (pci.domain, pci.bus, pci.device) == (0, 0x18, 0)
    remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, 0)
    assert remote.busId == "00000000:05:00.0"


def test_handles_by_uuid_need_the_gpu_prefix(nvml: types.ModuleType, healthy: Node) -> None:
    uuid = healthy.gpus[5].uuid
    assert uuid is not None
    handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    assert nvml.nvmlDeviceGetPciInfo(handle).busId == "00000000:AB:00.0"
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetHandleByUUID(uuid.removeprefix("GPU-"))
    assert nvml.nvmlDeviceGetHandleByPciBusId("0000:ab:00.0") is handle
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(8)


def test_p2p_status_rejects_the_read_tuple(nvml: types.ModuleType) -> None:
    a, b = nvml.nvmlDeviceGetHandleByIndex(0), nvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(ctypes.ArgumentError, match="parameter 3"):
        nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_READ)
    assert nvml.nvmlDeviceGetP2PStatus(a, b, 0) == nvml.NVML_P2P_STATUS_OK
    assert nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_NVLINK) == nvml.NVML_P2P_STATUS_OK
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_UNKNOWN)


def test_links_past_the_real_count_raise_invalid_argument(healthy: Node) -> None:
    nvml = make_fake_pynvml(healthy, max_links=36)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetNvLinkState(handle, 17) == nvml.NVML_FEATURE_ENABLED
    for link in (18, 35, 36, 99):
        with pytest.raises(nvml.NVMLError_InvalidArgument):
            nvml.nvmlDeviceGetNvLinkState(handle, link)


def test_gpu_without_nvlink_raises_not_supported() -> None:
    vm = load_snapshot(SNAPSHOTS / "h100-8gpu-vm-pcie.json")
    nvml = make_fake_pynvml(vm)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNvLinkState(handle, 0)
    (count,) = nvml.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
    assert count.nvmlReturn == nvml.NVML_ERROR_NOT_SUPPORTED


def test_nvlink_version_is_the_enum_not_the_generation(nvml: types.ModuleType) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetNvLinkVersion(handle, 0) == nvml.NVML_NVLINK_VERSION_4_0 == 6
    assert nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, 0) == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH


def test_field_values_report_per_field_status(healthy: Node) -> None:
    nvml = make_fake_pynvml(healthy, unsupported_fields={nvml_field := 164})
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    count, speed, common = nvml.nvmlDeviceGetFieldValues(handle, [91, (nvml_field, 0), 90])
    assert (count.nvmlReturn, count.valueType, count.value.uiVal) == (0, nvml.NVML_VALUE_TYPE_UNSIGNED_INT, 18)
    assert speed.nvmlReturn == nvml.NVML_ERROR_NOT_SUPPORTED
    assert (speed.fieldId, speed.scopeId) == (164, 0)
    assert common.value.uiVal == 26562
    (past_end,) = nvml.nvmlDeviceGetFieldValues(handle, [(nvml.NVML_FI_DEV_NVLINK_GET_VERSION, 20)])
    assert past_end.nvmlReturn == nvml.NVML_ERROR_INVALID_ARGUMENT


def test_fabric_info_fills_the_struct_passed_by_reference(nvml: types.ModuleType) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    info = nvml.c_nvmlGpuFabricInfoV_t()
    assert info.version == nvml.nvmlGpuFabricInfo_v2
    assert nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info)) == nvml.NVML_SUCCESS
    assert info.state == nvml.NVML_GPU_FABRIC_STATE_COMPLETED
    assert info.status == nvml.NVML_SUCCESS
    assert info.healthMask == nvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE
    with pytest.raises(TypeError, match="byref"):
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, info)
    wrong_version = nvml.c_nvmlGpuFabricInfoV_t()
    wrong_version.version = 1
    with pytest.raises(nvml.NVMLError_ArgumentVersionMismatch):
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.pointer(wrong_version))


def test_topology_gives_the_pcie_level_under_nvlink(healthy: Node) -> None:
    nvml = make_fake_pynvml(healthy, pcie_levels={(0, 1): "PIX"})
    nvml.nvmlInit()
    h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1, 2, 5)]
    assert nvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]) == nvml.NVML_TOPOLOGY_SINGLE
    assert nvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[2]) == nvml.NVML_TOPOLOGY_NODE
    assert nvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[3]) == nvml.NVML_TOPOLOGY_SYSTEM


def test_nvml_order_permutes_enumeration(healthy: Node) -> None:
    nvml = make_fake_pynvml(healthy, nvml_order=[7, 6, 5, 4, 3, 2, 1, 0])
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetPciInfo(nvml.nvmlDeviceGetHandleByIndex(0)).busId == "00000000:DB:00.0"
    with pytest.raises(ValueError, match="permutation"):
        make_fake_pynvml(healthy, nvml_order=[0, 1])


def test_lost_gpu_answers_only_pci_info(healthy: Node) -> None:
    nvml = make_fake_pynvml(healthy, lost_gpus={3})
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(3)
    assert nvml.nvmlDeviceGetPciInfo(handle).busId == "00000000:5D:00.0"
    with pytest.raises(nvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetName(handle)


def test_add_traffic_advances_cumulative_counters(healthy: Node) -> None:
    nvml = make_fake_pynvml(healthy)
    nvml.nvmlInit()
    uuid0 = healthy.gpus[0].uuid
    handle = nvml.nvmlDeviceGetHandleByUUID(uuid0)
    fields = [(138, 0xFFFFFFFF), (139, 0xFFFFFFFF), (197, 0), (198, 0)]
    nvml.add_traffic(uuid0, nvlink_bytes=10 * 1024 * 1024, pcie_bytes=4096)
    tx, rx, pcie_tx, pcie_rx = nvml.nvmlDeviceGetFieldValues(handle, fields)
    assert tx.value.ullVal == 10 * 1024  # KiB
    assert (rx.value.ullVal, pcie_tx.value.ullVal, pcie_rx.value.ullVal) == (0, 4096, 0)
    nvml.add_copy(uuid0, healthy.gpus[1].uuid, 2048, via="pcie")
    assert nvml.nvmlDeviceGetFieldValues(handle, fields)[2].value.ullVal == 4096 + 2048
    (per_link,) = nvml.nvmlDeviceGetFieldValues(handle, [(138, 0)])
    assert per_link.value.ullVal == 10 * 1024 // 18
