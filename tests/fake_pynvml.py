"""A faithful fake of nvidia-ml-py's ``pynvml`` module, answering from a :class:`Node`.

It mirrors the real module where it matters to callers, including its traps:

* the same function names and parameter names, constants with the same values (including the
  tuple ``NVML_P2P_CAPS_INDEX_READ = (0,)``, on which ``nvmlDeviceGetP2PStatus`` raises
  ``ctypes.ArgumentError`` exactly like the real ctypes call);
* an ``NVMLError`` whose constructor maps a code to a generated subclass
  (``NVMLError(3)`` is an ``NVMLError_NotSupported``), and ``nvmlExceptionClass``;
* calls before ``nvmlInit`` (or after the last ``nvmlShutdown``) raise ``NVMLError_Uninitialized``;
* wrappers return ``str`` but struct ``char[]`` fields (``busId``) are ``bytes``; structs are real
  ctypes structures; fabric info must be passed as ``ctypes.byref(struct)``;
* ``nvmlDeviceGetFieldValues`` reports an unsupported field in that entry's ``nvmlReturn``
  instead of raising;
* NVLink ids past a GPU's real links answer ``InvalidArgument`` (the GB200 pitfall), and a GPU
  without NVLink answers ``NotSupported``.

A fact that is ``None`` in the node raises the NVML error named by the node's unknown reason for
it (``"NVML: Function Not Found"`` raises ``NVMLError_FunctionNotFound``), else a sensible default,
so that snapshot -> fake -> probe reproduces the snapshot.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from pathlib import Path

from fake_nvml_api import (
    CONSTANTS,
    ERROR_CLASSES,
    C,
    NVMLError,
    c_nvmlDevice_t,
    c_nvmlEventData_t,
    c_nvmlEventSet_t,
    c_nvmlFieldValue_t,
    c_nvmlGpuFabricInfo_t,
    c_nvmlGpuFabricInfo_v2_t,
    c_nvmlGpuFabricInfo_v3_t,
    c_nvmlGpuFabricInfoV_t,
    c_nvmlValue_t,
    nvmlExceptionClass,
    nvmlPciInfo_t,
    struct_c_nvmlDevice_t,
    struct_c_nvmlEventSet_t,
)
from fake_nvml_state import FakeNvml

from pytest_nvlink.model import Node

# The definitions live in fake_nvml_api and the behaviour in fake_nvml_state (to keep each file
# small); this module stays the one entry point, so ``from fake_pynvml import ...`` keeps working.
__all__ = [
    "CONSTANTS",
    "ERROR_CLASSES",
    "C",
    "FakeNvml",
    "NVMLError",
    "c_nvmlDevice_t",
    "c_nvmlEventData_t",
    "c_nvmlEventSet_t",
    "c_nvmlFieldValue_t",
    "c_nvmlGpuFabricInfoV_t",
    "c_nvmlGpuFabricInfo_t",
    "c_nvmlGpuFabricInfo_v2_t",
    "c_nvmlGpuFabricInfo_v3_t",
    "c_nvmlValue_t",
    "fake_sysfs_pci",
    "make_fake_pynvml",
    "nvmlExceptionClass",
    "nvmlPciInfo_t",
    "struct_c_nvmlDevice_t",
    "struct_c_nvmlEventSet_t",
]


def make_fake_pynvml(
    node: Node | None,
    *,
    missing_functions: Iterable[str] = (),
    absent_functions: Iterable[str] = (),
    library_missing: bool = False,
    driver_not_loaded: bool = False,
    max_links: int = 36,
    nvml_order: Iterable[int] | None = None,
    unsupported_fields: Iterable[int] = (),
    lost_gpus: Iterable[int] = (),
    counters_no_permission: bool = False,
    pcie_levels: Mapping[tuple[int, int], str] | None = None,
    pcie_counter_bits: int | None = None,
    remote_bus_id_junk: bytes = b"",
    raw_fields: Mapping[tuple[int, int | None], int] | None = None,
    counter_lag_reads: int = 0,
    background_bytes_per_read: int = 0,
    counter_refresh_s: float | None = None,
    aggregate_scope_fails: bool = False,
    fabric_versions: Iterable[int] = (C["nvmlGpuFabricInfo_v2"], C["nvmlGpuFabricInfo_v3"]),
    architectures: Mapping[int, int] | None = None,
    no_xid_events: Iterable[int] = (),
    field_errors: Mapping[int, int] | None = None,
    remote_bus_ids: Mapping[str, str] | None = None,
) -> types.ModuleType:
    """A module that behaves like ``pynvml`` on the machine ``node`` describes.

    ``missing_functions`` raise NVMLError_FunctionNotFound (an older driver); ``absent_functions``
    are not in the module at all (older bindings; also struct names such as ``c_nvmlGpuFabricInfo_v3_t``).
    ``fabric_versions`` are the fabric-info struct versions the driver accepts (R550: only v2);
    ``architectures`` maps node GPU indices to the ``NVML_DEVICE_ARCH_*`` they answer. ``nvml_order``
    lists node GPU indices in NVML enumeration order. ``lost_gpus`` are node GPU indices whose calls
    raise GpuIsLost. ``no_xid_events`` are node GPU indices whose driver offers no Xid events (a VM,
    MIG); ``module.queue_xid(gpu, xid)`` queues an Xid that the next event wait delivers.
    ``field_errors`` maps field ids to the NVML error their entries answer. C2C fields answer from
    ``Gpu.c2c`` (a Grace GPU), NotSupported where the node has none (a PCIe host).
    ``remote_bus_ids`` maps a GPU's bus id to the one its peers' NVLinks report as their far end (a VM
    guest, whose bus ids the hypervisor remapped, sees the host's there).
    The fake's state is ``module.fake_state``; ``module.add_traffic`` / ``add_copy`` advance the
    traffic counters (with ``counter_refresh_s``, reads see them, and their timestamps move, only at
    the driver's refresh: the first read that long after the previous refresh) and
    ``module.inject_error`` makes a function fail.
    """
    state = FakeNvml(
        node,
        nvml_order=nvml_order,
        max_links=max_links,
        missing_functions=missing_functions,
        library_missing=library_missing,
        driver_not_loaded=driver_not_loaded,
        unsupported_fields=unsupported_fields,
        lost_gpus=lost_gpus,
        counters_no_permission=counters_no_permission,
        pcie_levels=pcie_levels,
        pcie_counter_bits=pcie_counter_bits,
        remote_bus_id_junk=remote_bus_id_junk,
        raw_fields=raw_fields,
        counter_lag_reads=counter_lag_reads,
        background_bytes_per_read=background_bytes_per_read,
        counter_refresh_s=counter_refresh_s,
        aggregate_scope_fails=aggregate_scope_fails,
        fabric_versions=fabric_versions,
        architectures=architectures,
        no_xid_events=no_xid_events,
        field_errors=field_errors,
        remote_bus_ids=remote_bus_ids,
    )
    module = types.ModuleType("pynvml", "Fake pynvml (tests/fake_pynvml.py)")
    module.__dict__.update(CONSTANTS)
    module.__dict__.update(ERROR_CLASSES)
    module.__dict__.update(
        NVML_NVLINK_MAX_LINKS=max_links,
        c_nvmlGpuFabricInfo_t=c_nvmlGpuFabricInfo_t,
        c_nvmlGpuFabricInfo_v2_t=c_nvmlGpuFabricInfo_v2_t,
        c_nvmlGpuFabricInfo_v3_t=c_nvmlGpuFabricInfo_v3_t,
        c_nvmlGpuFabricInfoV_t=c_nvmlGpuFabricInfoV_t,
        c_nvmlDevice_t=c_nvmlDevice_t,
        struct_c_nvmlDevice_t=struct_c_nvmlDevice_t,
        c_nvmlEventSet_t=c_nvmlEventSet_t,
        struct_c_nvmlEventSet_t=struct_c_nvmlEventSet_t,
        c_nvmlEventData_t=c_nvmlEventData_t,
    )
    for value in (NVMLError, nvmlExceptionClass, nvmlPciInfo_t, c_nvmlValue_t, c_nvmlFieldValue_t):
        setattr(module, value.__name__, value)
    for name in dir(FakeNvml):
        if name.startswith("nvml"):
            setattr(module, name, state.wrap(name))
    for name in absent_functions:
        delattr(module, name)
    module.__dict__.update(
        fake_state=state,
        add_traffic=state.add_traffic,
        add_copy=state.add_copy,
        inject_error=state.inject_error,
        grow_errors_on_read=state.grow_errors_on_read,
        queue_xid=state.queue_xid,
    )
    return module


def fake_sysfs_pci(node: Node, root: Path) -> Path:
    """A ``/sys/bus/pci/devices`` tree giving each GPU's CPU NUMA node (-1 where the node has none)."""
    for gpu in node.gpus:
        if gpu.pci_bus_id:
            device = root / gpu.pci_bus_id
            device.mkdir(parents=True, exist_ok=True)
            (device / "numa_node").write_text(f"{gpu.numa_node if gpu.numa_node is not None else -1}\n")
    return root
