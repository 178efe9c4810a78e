"""The device check's host-link section, on GPU 0 through the campaign's own code (issue 27).

What it shows: host->device, device->host and both at once with pinned host memory on the copy
engine (``pytest_nvlink.measure.host_link.run_host_link``: one worker, NUMA binding, blocked start,
event timing), the NUMA node the GPU hangs off and the node the buffers were bound to, the PCIe link
the probe reads and NVLink-C2C where NVML reports it, and whether NVML lets the Xid listener
register for critical-error events on this GPU (what the ``test_xid`` item depends on). With
``simulate`` the copies run on ``cuda_simulated``'s timeline and NVML is the fake of ``tests/``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from device_check_sections import CouldNotRun, Result, _cuda, _error_name, _nvml

GPU_TIMEOUT_S = 22.0  # the worker's bound: spawn, torch import and CUDA start included; inside the budget
EVENT_WAIT_MS = 200


def host_link(simulate: bool) -> Result:
    from pytest_nvlink.measure.host_link import HostLinkPlan, HostLinkTarget, as_dicts, run_host_link
    from pytest_nvlink.sources.live.probe import probe_node

    node = probe_node()
    if not node.gpus:
        raise CouldNotRun("; ".join(node.probe_errors) or "NVML reports no GPU")
    gpu = node.gpus[0]
    if simulate:
        from pytest_nvlink.measure.host_simulated import TimelineHostEngineFactory

        factory: Any = TimelineHostEngineFactory()
    else:
        _cuda()
        from pytest_nvlink.measure.host_copy import TorchHostEngineFactory

        factory = TorchHostEngineFactory()
    # CUDA device 0 is NVML GPU 0 only when CUDA_VISIBLE_DEVICES is unset: record what CUDA was asked for.
    plan = HostLinkPlan((HostLinkTarget(gpu.index, 0, gpu.numa_node),), gpu_timeout_s=GPU_TIMEOUT_S)
    figures = run_host_link(plan, factory)
    return {
        "gpu": {"index": gpu.index, "name": gpu.name, "bus": gpu.pci_bus_id},
        "gpu_numa_node": gpu.numa_node,
        "gpu_numa_node_unknown": node.unknown_reasons.get(f"gpu{gpu.index}.numa_node"),
        "pcie": {
            "gen_current": gpu.pcie_gen_current,
            "gen_max": gpu.pcie_gen_max,
            "width_current": gpu.pcie_width_current,
            "width_max": gpu.pcie_width_max,
        },
        "c2c": asdict(gpu.c2c) if gpu.c2c is not None else None,
        "c2c_unknown": {k: v for k, v in node.unknown_reasons.items() if k.startswith(f"gpu{gpu.index}.c2c")},
        "plan": {**plan.conditions(), "gpu_timeout_s": plan.gpu_timeout_s},
        "figures": as_dicts(figures),
        "host_numa_nodes_used": sorted({str(f.host_numa_node) for f in figures}),
        "xid_events": xid_registration(gpu.index),
    }


def xid_registration(index: int) -> dict[str, Any]:
    """Create an event set, register GPU ``index`` for Xid critical errors, wait once (nothing expected), free it."""
    nvml = _nvml()
    steps: dict[str, Any] = {}
    event_set = None
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        event_set = _step(steps, "nvmlEventSetCreate", nvml, nvml.nvmlEventSetCreate)
        supported = _step(
            steps, "nvmlDeviceGetSupportedEventTypes", nvml, nvml.nvmlDeviceGetSupportedEventTypes, handle
        )
        xid = int(nvml.nvmlEventTypeXidCriticalError)
        steps["xid_type_offered"] = None if supported is None else bool(int(supported) & xid)
        if event_set is not None:
            _step(steps, "nvmlDeviceRegisterEvents", nvml, nvml.nvmlDeviceRegisterEvents, handle, xid, event_set)
            _step(steps, "nvmlEventSetWait_v2", nvml, nvml.nvmlEventSetWait_v2, event_set, EVENT_WAIT_MS)
        return steps
    finally:
        if event_set is not None:
            _step(steps, "nvmlEventSetFree", nvml, nvml.nvmlEventSetFree, event_set)
        nvml.nvmlShutdown()


def _step(steps: dict[str, Any], name: str, nvml: Any, function: Any, *args: Any) -> Any:
    """Call one NVML function; record "ok" or the error's name (a Timeout from the wait is the expected answer)."""
    try:
        answer = function(*args)
    except nvml.NVMLError as exc:
        steps[name] = _error_name(nvml, exc)
        return None
    steps[name] = "ok"
    return answer
