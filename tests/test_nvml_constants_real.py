"""The probe's own NVML constants and units, anchored on facts that do not come from the fake.

The snapshot -> fake -> probe round trip cannot catch a wrong unit: the fake encodes with the exact
inverse of the probe's decoding. These tests compare with the real nvidia-ml-py module instead, and
with an nvidia-smi capture and NVIDIA's published per-link rate kept in the repository.

The fake cannot drift either: the P2P capability indices it answers, every field id the probe reads,
the struct fields the code reads and the NVMLError subclasses by code are compared by name and value
with the real module, as the fake uses them and not only as it lists them.
"""

from __future__ import annotations

import ctypes
import inspect
import re
import time
import types
from pathlib import Path

import fake_nvml_state
import pytest
from conftest import REPO, sample
from fake_nvml_api import CONSTANTS, ERROR_CLASSES
from fake_pynvml import make_fake_pynvml

from pytest_nvlink.model import NVLINK5_ERROR_COUNTER_NAMES
from pytest_nvlink.model.host_link import C2CInfo, C2CLink
from pytest_nvlink.sources.evidence.parsers import nvlink as nvlink_parser
from pytest_nvlink.sources.live import fields as nvml_fields
from pytest_nvlink.sources.live.counters import read_traffic
from pytest_nvlink.sources.live.probe import probe_node
from pytest_nvlink.sources.snapshot.file import load_snapshot

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"
AWS_P5_STATUS = "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt"


@pytest.fixture
def real() -> types.ModuleType:
    module: types.ModuleType = pytest.importorskip("pynvml")
    return module


def test_field_ids_match_the_real_module(real: types.ModuleType) -> None:
    assert (
        tuple(getattr(real, f"NVML_FI_DEV_NVLINK_SPEED_MBPS_L{link}") for link in range(12))
        == nvml_fields.FI_NVLINK_SPEED_MBPS_PER_LINK
    )
    pairs = {
        "FI_NVLINK_SPEED_MBPS_COMMON": "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON",
        "FI_NVLINK_LINK_COUNT": "NVML_FI_DEV_NVLINK_LINK_COUNT",
        "FI_NVLINK_THROUGHPUT_DATA_TX": "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
        "FI_NVLINK_THROUGHPUT_DATA_RX": "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
        "FI_NVLINK_GET_SPEED": "NVML_FI_DEV_NVLINK_GET_SPEED",
        "FI_PCIE_COUNT_TX_BYTES": "NVML_FI_DEV_PCIE_COUNT_TX_BYTES",
        "FI_PCIE_COUNT_RX_BYTES": "NVML_FI_DEV_PCIE_COUNT_RX_BYTES",
        "NVML_SUCCESS": "NVML_SUCCESS",
        "NVML_ERROR_NOT_SUPPORTED": "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_NO_PERMISSION": "NVML_ERROR_NO_PERMISSION",
    }
    for ours, theirs in pairs.items():
        assert getattr(nvml_fields, ours) == getattr(real, theirs), ours


def test_enums_match_the_real_module(real: types.ModuleType) -> None:
    assert {
        "read": real.NVML_P2P_CAPS_INDEX_READ[0],  # the tuple (0,) in the real module
        "write": real.NVML_P2P_CAPS_INDEX_WRITE,
        "nvlink": real.NVML_P2P_CAPS_INDEX_NVLINK,
        "atomics": real.NVML_P2P_CAPS_INDEX_ATOMICS,
    } == nvml_fields.P2P_INDEX
    for code, name in nvml_fields.P2P_STATUS_NAMES.items():
        assert getattr(real, f"NVML_P2P_STATUS_{name.upper()}") == code, name
    topology = {"PIX": "SINGLE", "PXB": "MULTIPLE", "PHB": "HOSTBRIDGE", "NODE": "NODE", "SYS": "SYSTEM"}
    for level, path in nvml_fields.TOPOLOGY_CLASSES.items():
        if level:  # 0 is NVML_TOPOLOGY_INTERNAL (one board), which nvidia-smi shows as PIX
            assert getattr(real, f"NVML_TOPOLOGY_{topology[path]}") == level, path
    assert real.NVML_TOPOLOGY_INTERNAL == 0
    for code, kind in nvml_fields.NVLINK_REMOTE_TYPES.items():
        assert getattr(real, f"NVML_NVLINK_DEVICE_TYPE_{kind.upper()}") == code
    names = {"replay": "REPLAY", "recovery": "RECOVERY", "crc_flit": "CRC_FLIT", "crc_data": "CRC_DATA"}
    for ours, index in nvml_fields.NVLINK_ERROR_COUNTERS.items():
        assert getattr(real, f"NVML_NVLINK_ERROR_DL_{names.get(ours, 'ECC_DATA')}") == index, ours
    for code, mode in nvml_fields.VIRTUALIZATION_MODES.items():
        assert getattr(real, f"NVML_GPU_VIRTUALIZATION_MODE_{mode.upper()}") == code
    for code, state in nvml_fields.FABRIC_STATES.items():
        assert getattr(real, f"NVML_GPU_FABRIC_STATE_{state.upper()}") == code
    assert real.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW == nvml_fields.FABRIC_HEALTH_DEGRADED_BW_SHIFT
    assert real.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE == nvml_fields.FABRIC_HEALTH_DEGRADED_BW_TRUE
    assert real.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE == nvml_fields.FABRIC_HEALTH_DEGRADED_BW_FALSE
    members = ["dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal"]
    kinds = ["DOUBLE", "UNSIGNED_INT", "UNSIGNED_LONG", "UNSIGNED_LONG_LONG", "SIGNED_LONG_LONG", "SIGNED_INT"]
    kinds.append("UNSIGNED_SHORT")
    for kind, member in zip(kinds, members, strict=True):
        assert nvml_fields._VALUE_MEMBERS[getattr(real, f"NVML_VALUE_TYPE_{kind}")] == member
    assert [f[0] for f in real.c_nvmlValue_t._fields_] == members


def test_nvlink_version_enum_maps_to_the_marketing_generation(real: types.ModuleType) -> None:
    generation = nvml_fields.NVLINK_VERSION_TO_GENERATION
    # A100 answers NVLINK_VERSION_3_1 (= 5): NVLink 3; H100 NVLink 4; B200 NVLink 5.
    assert generation[real.NVML_NVLINK_VERSION_3_1] == 3
    assert generation[real.NVML_NVLINK_VERSION_4_0] == 4
    assert generation[real.NVML_NVLINK_VERSION_5_0] == 5
    assert generation[real.NVML_NVLINK_VERSION_2_2] == 2


def test_throughput_counters_count_kib_as_the_real_module_says(real: types.ModuleType) -> None:
    source = inspect.getsource(real)
    assert "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138 # NVLink TX Data throughput in KiB" in source
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    raw = {(138, nvml_fields.SCOPE_ALL_LINKS): 3, (197, None): 5}
    fake = make_fake_pynvml(node, raw_fields=raw)
    fake.nvmlInit()
    traffic = read_traffic(fake, fake.nvmlDeviceGetHandleByIndex(0))
    assert traffic.nvlink_tx_bytes == 3 * 1024
    assert traffic.pcie_tx_bytes == 5  # "PCIe transmit bytes": bytes, no scaling


def test_link_speed_in_mbps_reads_as_nvidia_smi_prints_it(tmp_path: Path) -> None:
    # nvidia-smi nvlink --status on an AWS p5 (H100 SXM) prints "Link 0: 26.562 GB/s" for every link.
    smi = nvlink_parser.parse(sample(AWS_P5_STATUS))
    smi_speed = smi.gpus[0].links[0].speed_gbps
    assert smi_speed == 26.562
    # NVML answers the same link's speed in MBps (nvml.h: "NVLink Speed in MBps"); NVIDIA's Health
    # Validation expects 26562 for H100. The raw value bypasses the fake's own encoding.
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    fake = make_fake_pynvml(node, raw_fields={(164, None): 26562})
    (tmp_path / "cpuinfo").write_text("flags\t: fpu\n")
    probed = probe_node(fake, cpuinfo_path=tmp_path / "cpuinfo", sysfs_pci=tmp_path)
    links = probed.gpus[0].nvlinks or []
    assert len(links) == 18 and {link.speed_gbps for link in links} == {smi_speed}
    # NVIDIA: H100 SXM has 18 NVLink 4 links, 900 GB/s bidirectional = 450 GB/s per direction; the
    # line rate per link per direction (26.562) is a little above the 25 GB/s data rate.
    per_direction = sum(link.speed_gbps or 0.0 for link in links)
    assert 450 <= per_direction <= 450 * 1.07


# --- the fake cannot drift from the real module ---------------------------------------------------

LIVE_SOURCES = sorted((REPO / "pytest_nvlink" / "sources" / "live").glob("*.py")) + sorted(
    (REPO / "pytest_nvlink" / "measure").glob("*.py")
)
# The struct fields the code reads (probe.py: fabric info; fields.py: field values, PCI bus ids).
FIELDS_READ = {
    "c_nvmlFieldValue_t": ("fieldId", "scopeId", "timestamp", "valueType", "nvmlReturn", "value"),
    "c_nvmlValue_t": ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal"),
    "c_nvmlGpuFabricInfo_t": ("clusterUuid", "status", "cliqueId", "state"),
    "c_nvmlGpuFabricInfo_v2_t": ("version", "clusterUuid", "status", "cliqueId", "state", "healthMask"),
    "c_nvmlGpuFabricInfoV_t": ("version", "clusterUuid", "status", "cliqueId", "state", "healthMask"),
    "c_nvmlGpuFabricInfo_v3_t": (
        "version",
        "clusterUuid",
        "status",
        "cliqueId",
        "state",
        "healthMask",
        "healthSummary",
    ),
    "nvmlPciInfo_t": ("busId", "busIdLegacy"),
    "c_nvmlEventData_t": ("device", "eventType", "eventData"),  # sources/live/events.py
}


def _real_p2p_indices(real: types.ModuleType) -> dict[str, int]:
    return {
        "read": real.NVML_P2P_CAPS_INDEX_READ[0],  # the tuple (0,) in the real module
        "write": real.NVML_P2P_CAPS_INDEX_WRITE,
        "nvlink": real.NVML_P2P_CAPS_INDEX_NVLINK,
        "atomics": real.NVML_P2P_CAPS_INDEX_ATOMICS,
    }


def test_the_fake_answers_each_p2p_capability_at_the_real_index(real: types.ModuleType) -> None:
    by_index = fake_nvml_state._P2P_CAPABILITY_BY_INDEX
    indices = _real_p2p_indices(real)
    assert indices == nvml_fields.P2P_INDEX  # what the probe asks for
    assert {name: by_index.index(name) for name in indices} == indices  # what the fake answers there
    fake = make_fake_pynvml(None)
    for name in ("READ", "WRITE", "NVLINK", "ATOMICS", "PROP", "PCI", "UNKNOWN"):  # what the fake lists
        assert getattr(fake, f"NVML_P2P_CAPS_INDEX_{name}") == getattr(real, f"NVML_P2P_CAPS_INDEX_{name}"), name
    assert len(by_index) == real.NVML_P2P_CAPS_INDEX_UNKNOWN  # PROP/PCI (4) answered, UNKNOWN (5) refused
    assert real.NVML_P2P_CAPS_INDEX_PROP == real.NVML_P2P_CAPS_INDEX_PCI == len(by_index) - 1
    for name, code in fake_nvml_state._P2P_CODES.items():
        assert getattr(real, f"NVML_P2P_STATUS_{name.upper()}") == code, name


def test_the_fake_tells_p2p_capabilities_apart_by_the_real_indices(real: types.ModuleType) -> None:
    """Every capability of one pair given another status: a swap of two indices reads a wrong one."""
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    statuses = {"read": "ok", "write": "gpu_not_supported", "nvlink": "disabled_by_regkey", "atomics": "not_supported"}
    pair = next(s for s in node.p2p or [] if (s.src, s.dst) == (0, 1))
    for name, status in statuses.items():
        setattr(pair, name, status)
    fake = make_fake_pynvml(node)
    fake.nvmlInit()
    first, second = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    for name, index in _real_p2p_indices(real).items():
        assert fake.nvmlDeviceGetP2PStatus(first, second, index) == getattr(
            real, f"NVML_P2P_STATUS_{statuses[name].upper()}"
        ), name


def _fields_read(real: types.ModuleType) -> dict[str, int]:
    """The real name and the probe's value of every field-id constant named in the live sources and the
    measuring code (FI_NVLINK_SPEED_MBPS_PER_LINK: one field per link, L0 on)."""
    names: set[str] = set()
    for path in LIVE_SOURCES:
        names |= set(re.findall(r"\b(FI_[A-Z0-9_]+)\b", path.read_text(encoding="utf-8")))
    assert {"FI_NVLINK_GET_SPEED", "FI_NVLINK_THROUGHPUT_DATA_TX", "FI_PCIE_COUNT_RX_BYTES"} <= names
    read: dict[str, int] = {}
    for name in names:
        value = getattr(nvml_fields, name)
        if isinstance(value, tuple):
            read.update({f"NVML_FI_DEV_{name[3:-9]}_L{link}": v for link, v in enumerate(value)})
        else:
            read[f"NVML_FI_DEV_{name[3:]}"] = value
    assert all(hasattr(real, theirs) for theirs in read), sorted(set(read) - set(dir(real)))
    return read


def test_every_field_id_the_probe_reads_has_the_real_value_in_the_probe_and_the_fake(real: types.ModuleType) -> None:
    read = _fields_read(real)
    assert len(read) >= 19
    for theirs, ours in read.items():
        assert getattr(real, theirs) == ours == CONSTANTS[theirs], theirs
    assert fake_nvml_state._SPEED_FIELDS == nvml_fields.FI_NVLINK_SPEED_MBPS_PER_LINK


def test_the_fake_answers_every_field_id_the_probe_reads(real: types.ModuleType) -> None:
    """Asked by the real ids (scope: link 0), the fake answers each: one keyed on a drifted id would not."""
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    fake = make_fake_pynvml(node)
    fake.nvmlInit()
    nvlink5 = set(nvml_fields.NVLINK5_ERROR_FIELDS.values())  # Blackwell and later only
    c2c = {real.NVML_FI_DEV_C2C_LINK_COUNT, real.NVML_FI_DEV_C2C_LINK_GET_STATUS, real.NVML_FI_DEV_C2C_LINK_GET_MAX_BW}
    ids = sorted(getattr(real, name) for name in _fields_read(real))
    assert c2c <= set(ids)
    answers = fake.nvmlDeviceGetFieldValues(fake.nvmlDeviceGetHandleByIndex(0), [(i, 0) for i in ids])
    # An x86 H100 has no NVLink-C2C (NotSupported), nor the NVLink 5 counters.
    hopper = [real.NVML_ERROR_NOT_SUPPORTED if i in nvlink5 | c2c else real.NVML_SUCCESS for i in ids]
    assert [(int(a.fieldId), int(a.nvmlReturn)) for a in answers] == list(zip(ids, hopper, strict=True))
    count = next(a for a in answers if a.fieldId == real.NVML_FI_DEV_NVLINK_LINK_COUNT)
    assert count.value.uiVal == len(node.gpus[0].nvlinks or [])
    for gpu in node.gpus:  # the same node as a B200 answers the NVLink 5 counters
        gpu.name = "NVIDIA B200"
        for link in gpu.nvlinks or []:
            link.errors = dict.fromkeys(nvml_fields.NVLINK5_ERROR_FIELDS, 0)
    blackwell = make_fake_pynvml(node)
    blackwell.nvmlInit()
    answers = blackwell.nvmlDeviceGetFieldValues(blackwell.nvmlDeviceGetHandleByIndex(0), [(i, 0) for i in ids])
    assert {(int(a.fieldId), int(a.nvmlReturn)) for a in answers if a.fieldId in nvlink5} == {
        (i, real.NVML_SUCCESS) for i in nvlink5
    }
    node.gpus[0].name = "NVIDIA GB200"  # a Grace-Blackwell GPU: its host link is NVLink-C2C
    node.gpus[0].c2c = C2CInfo(link_count=1, links=[C2CLink(0, True, 40.0)])
    grace = make_fake_pynvml(node)
    grace.nvmlInit()
    answers = grace.nvmlDeviceGetFieldValues(grace.nvmlDeviceGetHandleByIndex(0), [(i, 0) for i in sorted(c2c)])
    assert [(int(a.fieldId), int(a.nvmlReturn), int(a.value.uiVal)) for a in answers] == [
        (real.NVML_FI_DEV_C2C_LINK_COUNT, real.NVML_SUCCESS, 1),
        (real.NVML_FI_DEV_C2C_LINK_GET_STATUS, real.NVML_SUCCESS, 1),
        (real.NVML_FI_DEV_C2C_LINK_GET_MAX_BW, real.NVML_SUCCESS, 40_000),  # MBps, as nvml.h states
    ]


def test_nvlink5_counters_and_architectures_have_the_real_names_and_values(real: types.ModuleType) -> None:
    real_names = {
        "symbol": "SYMBOL_ERRORS",
        "effective": "EFFECTIVE_ERRORS",
        "link_recovery": "LINK_RECOVERY_EVENTS",
        "link_recovery_failed": "LINK_RECOVERY_FAILED_EVENTS",
        "malformed_packet": "MALFORMED_PACKET_ERRORS",
        "buffer_overrun": "BUFFER_OVERRUN_ERRORS",
        "rcv": "RCV_ERRORS",
        "rcv_remote": "RCV_REMOTE_ERRORS",
        "rcv_general": "RCV_GENERAL_ERRORS",
        "local_link_integrity": "LOCAL_LINK_INTEGRITY_ERRORS",
    }
    assert tuple(nvml_fields.NVLINK5_ERROR_FIELDS) == NVLINK5_ERROR_COUNTER_NAMES
    for name, field_id in nvml_fields.NVLINK5_ERROR_FIELDS.items():
        theirs = f"NVML_FI_DEV_NVLINK_COUNT_{real_names[name]}"
        assert getattr(real, theirs) == field_id == CONSTANTS[theirs], name
        assert fake_nvml_state._NVLINK5_ERROR_FIELDS[field_id] == name  # the fake answers the same counter
    assert {real.NVML_DEVICE_ARCH_BLACKWELL, real.NVML_DEVICE_ARCH_RUBIN} == nvml_fields.NVLINK5_ARCHITECTURES
    assert max(nvml_fields.DL_ARCHITECTURES) == real.NVML_DEVICE_ARCH_HOPPER
    assert min(nvml_fields.DL_ARCHITECTURES) == real.NVML_DEVICE_ARCH_KEPLER
    for name, value in CONSTANTS.items():
        if name.startswith(("NVML_DEVICE_ARCH_", "NVML_FI_DEV_NVLINK_")):
            assert getattr(real, name) == value, name


def _layout(struct: type[ctypes.Structure | ctypes.Union]) -> list[tuple[str, int, int]]:
    return [(name, getattr(struct, name).offset, getattr(struct, name).size) for name, *_ in struct._fields_]


@pytest.mark.parametrize("struct", sorted(FIELDS_READ))
def test_struct_fields_the_code_reads_match_the_real_module(real: types.ModuleType, struct: str) -> None:
    theirs, ours = getattr(real, struct), getattr(make_fake_pynvml(None), struct)
    assert _layout(ours) == _layout(theirs)  # names, offsets and sizes, in order
    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)
    names = [name for name, *_ in theirs._fields_]
    assert set(FIELDS_READ[struct]) <= set(names)
    assert [name for name, *_ in ours._fields_] == names


def test_error_classes_have_the_real_names_and_codes(real: types.ModuleType) -> None:
    real_classes = {cls.__name__: code for code, cls in real.NVMLError._valClassMapping.items()}
    fake = make_fake_pynvml(None)
    ours = {name: cls(0).value for name, cls in ERROR_CLASSES.items()}
    assert {name: real_classes.get(name) for name in ours} == ours  # each the real class of its code
    for name, code in ours.items():
        assert real.nvmlExceptionClass(code).__name__ == fake.nvmlExceptionClass(code).__name__ == name
        assert type(fake.NVMLError(code)).__name__ == type(real.NVMLError(code)).__name__ == name
        assert (
            getattr(real, f"NVML_ERROR_{_constant_suffix(name)}")
            == code
            == CONSTANTS[f"NVML_ERROR_{_constant_suffix(name)}"]
        )
    caught = set()
    for path in [*LIVE_SOURCES, *(REPO / "pytest_nvlink").rglob("*.py")]:
        caught |= set(re.findall(r"\b(NVMLError_[A-Za-z]+)\b", path.read_text(encoding="utf-8")))
    assert {"NVMLError_GpuIsLost", "NVMLError_NotSupported"} <= caught
    assert caught <= set(ours) and caught <= set(real_classes)


def _constant_suffix(class_name: str) -> str:
    """``NVMLError_GpuIsLost`` -> ``GPU_IS_LOST``, the part after ``NVML_ERROR_``."""
    words = re.findall(r"[A-Z][a-z]*", class_name.removeprefix("NVMLError_"))
    return "_".join(words).upper()


# --- events: the listener's calls, constants and the wait's Timeout, as the real module has them ---

EVENT_FUNCTIONS = (
    "nvmlEventSetCreate",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetWait",
    "nvmlEventSetFree",
)


def test_event_constants_match_the_real_module(real: types.ModuleType) -> None:
    names = [name for name in CONSTANTS if name.startswith("nvmlEvent")]
    assert "nvmlEventTypeXidCriticalError" in names and "nvmlEventTypeAll" in names
    fake = make_fake_pynvml(None)
    for name in names:
        assert getattr(real, name) == CONSTANTS[name] == getattr(fake, name), name
    real_types = {name for name in dir(real) if name.startswith("nvmlEventType")}
    assert real_types <= set(names)  # every event type the real module defines is in the fake
    assert real.NVMLError_Timeout(0).value == real.NVML_ERROR_TIMEOUT == fake.NVMLError_Timeout(0).value


def test_event_functions_take_the_real_parameters(real: types.ModuleType) -> None:
    fake = make_fake_pynvml(None)
    for name in EVENT_FUNCTIONS:
        theirs = list(inspect.signature(getattr(real, name)).parameters)
        assert list(inspect.signature(getattr(fake, name)).parameters) == theirs, name
    source = (REPO / "pytest_nvlink" / "sources" / "live" / "events.py").read_text(encoding="utf-8")
    called = set(re.findall(r"\bnvml\.(nvml[A-Za-z_0-9]+)\(", source))
    assert {"nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2", "nvmlEventSetFree"} <= called
    assert all(callable(getattr(real, name)) and callable(getattr(fake, name)) for name in called), called


def test_the_wait_returns_the_real_event_struct_and_times_out_as_documented(real: types.ModuleType) -> None:
    # nvidia-ml-py: "raises NVML_ERROR_TIMEOUT exception on timeout" above nvmlEventSetWait_v2.
    assert "# raises NVML_ERROR_TIMEOUT exception on timeout\ndef nvmlEventSetWait_v2(" in inspect.getsource(real)
    assert not hasattr(real.struct_c_nvmlEventSet_t, "_fields_")  # an opaque handle, as the fake's
    assert not hasattr(make_fake_pynvml(None).struct_c_nvmlEventSet_t, "_fields_")
    assert _layout(make_fake_pynvml(None).c_nvmlEventData_t) == _layout(real.c_nvmlEventData_t)


def test_field_value_timestamps_are_signed_microseconds_since_1970_in_both(real: types.ModuleType) -> None:
    # nvml.h: "long long timestamp; CPU Timestamp of this value in microseconds since 1970". The path
    # proof compares it with the host clock after the copies' sync (time.time_ns() // 1000).
    for module in (real, make_fake_pynvml(None)):
        stamp_type = dict(module.c_nvmlFieldValue_t._fields_)["timestamp"]
        assert ctypes.sizeof(stamp_type) == 8 and stamp_type(-1).value == -1, module
    fake = make_fake_pynvml(load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json"))
    fake.nvmlInit()
    before_us = time.time_ns() // 1000
    (entry,) = fake.nvmlDeviceGetFieldValues(fake.nvmlDeviceGetHandleByIndex(0), [(138, 0xFFFFFFFF)])
    assert before_us <= entry.timestamp <= time.time_ns() // 1000
    (reading,) = nvml_fields.read_fields(fake, fake.nvmlDeviceGetHandleByIndex(0), [(138, 0xFFFFFFFF)])
    assert reading.timestamp_us is not None and before_us <= reading.timestamp_us
