"""Platform verdicts: NVSwitch fabric registration (Fabric Manager) and the trained PCIe link of a GPU."""

from __future__ import annotations

from pytest_nvlink.config.thresholds import Threshold
from pytest_nvlink.judges.context import Context, gpu_properties, per_gpu
from pytest_nvlink.model import FabricInfo, Gpu, Node
from pytest_nvlink.verdict import Verdict, failed, measured_properties, not_applicable, passed, unknown


@per_gpu
def fabric(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    threshold = ctx.thresholds.get("fabric.required")
    if threshold is None and not ctx.suite.nvswitch:
        return not_applicable(f"suite {ctx.suite.name} has no NVSwitch ({ctx.suite_where('suite.nvswitch')} = false)")
    if threshold is None:
        return ctx.missing_threshold("fabric.required")
    if threshold.value is not True:
        return not_applicable(f"the SKU does not register with an NVSwitch fabric ({threshold.where()} = false)")
    info = gpu.fabric
    props = measured_properties(
        info.state if info else None, "completed/success", "fabric state", threshold
    ) + gpu_properties(gpu)
    switch_events = fabric_events(ctx.node)
    if switch_events:
        return failed(
            f"GPU {index}: the NVSwitch fabric reported {len(switch_events)} error event(s) during the "
            f"run: {'; '.join(switch_events[:3])} ({threshold.where()}); likely cause: an NVSwitch or its links — "
            "check the Fabric Manager log and the SXid's entry in the Fabric Manager User Guide",
            [*props, ("fabric_events", "; ".join(switch_events))],
        )
    unplaced = ctx.node.unknown_reasons.get("fabric.unplaced_fault")
    if info is None and unplaced is not None:
        return failed(
            f"GPU {index}: no fabric state of its own, and a GPU of this node whose index the evidence does not "
            f"state reports {unplaced}, expected State Completed, Status Success and a healthy Health block "
            f"({threshold.where()}); it may be this one; likely cause: Fabric Manager is not running or failed — "
            "check `systemctl status nvidia-fabricmanager` and the full `nvidia-smi -q` of every GPU",
            props,
        )
    if info is None:
        return unknown(
            f"the NVSwitch fabric state of GPU {index}",
            ctx.node.unknown_reason(f"gpu{index}.fabric", "fabric state not reported"),
            props,
        )
    if info.state != "completed" or info.status != "success":
        shown = info.state.replace("_", " ") if info.state != "completed" else f"completed with status {info.status}"
        return failed(
            f"GPU {index}: NVSwitch fabric registration is {shown}, expected completed/success "
            f"({threshold.where()}); likely cause: Fabric Manager is not running or failed — check "
            "`systemctl status nvidia-fabricmanager` and that its version matches the driver "
            f"{ctx.node.driver_version or ''}".rstrip(),
            props,
        )
    problems = fabric_health_problems(info)
    if problems:
        props.append(("fabric_health", ", ".join(problems)))
        return failed(
            f"GPU {index}: fabric health reports {', '.join(problems)} although registration completed "
            f"({threshold.where()}); likely cause: NVSwitch links, routes or the fabric configuration unhealthy — "
            "check the Fabric Health block of nvidia-smi -q and the Fabric Manager log",
            props,
        )
    if not fabric_health_known(info):
        # The registration is what the driver reports; its age is no fault of the GPU, so the health that
        # drivers before R550 cannot report is recorded as an unknown instead of failing every GPU.
        reason = ctx.node.unknown_reason(f"gpu{index}.fabric.health", "the source does not report fabric health")
        props += [("fabric_health", "unknown"), ("fabric_health_reason", reason)]
        return passed(
            f"GPU {index}: fabric registration completed; fabric health unknown ({reason}) — recorded as an unknown",
            props,
        )
    return passed(f"GPU {index}: fabric registration completed", props)


@per_gpu
def pcie_link(ctx: Context, gpu: Gpu) -> Verdict:
    """The trained link: current width (it holds at idle) and the generation sampled under load.

    ``nvmlDeviceGetMaxPcieLink*`` is what GPU and slot could do, so a link trained at x8 or Gen4
    through a bad riser passed on it. The current generation drops at idle, so only a sample taken
    while the measurement campaign loaded the GPU counts; without one the generation is unknown.
    """
    index = gpu.index
    gen_t, width_t = ctx.thresholds.get("pcie.generation_min"), ctx.thresholds.get("pcie.width_min")
    unset = [key for key in ("pcie.generation_min", "pcie.width_min") if ctx.thresholds.get(key) is None]
    if len(unset) == 2 or any(ctx.thresholds.waiver(key) is None for key in unset):
        return ctx.missing_threshold(*unset)
    gen, width = gpu.pcie_gen_loaded, gpu.pcie_width_current
    measured = f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"
    expected = f"Gen{gen_t.value if gen_t else '?'} x{width_t.value if width_t else '?'}"
    props = measured_properties(measured, f">= {expected}", "PCIe link", gen_t or width_t) + gpu_properties(gpu)
    props += [
        ("pcie_gen_under_load", str(gen) if gen is not None else "not_measured"),
        ("pcie_width_current", str(width) if width is not None else "unknown"),
        ("pcie_gen_max", str(gpu.pcie_gen_max) if gpu.pcie_gen_max is not None else "unknown"),
    ]
    low = _pcie_below(gpu, gen_t, width_t)
    if low is not None:
        what, value, threshold = low
        return failed(
            f"GPU {index}: PCIe {what} {value}, below {threshold.value} ({threshold.where()}); likely cause: a "
            "riser/slot or BIOS setting limiting the link — check `lspci -vv` LnkSta and the slot's BIOS PCIe speed",
            props,
        )
    if width_t is not None and width is None:
        reason = ctx.node.unknown_reason(f"gpu{index}.pcie_width_current", "PCIe width not reported")
        return unknown(f"the PCIe link width of GPU {index}", reason, props)
    if gen_t is not None and gen is None:
        reason = ctx.node.unknown_reason(
            f"gpu{index}.pcie_gen_loaded",
            "no measurement campaign ran in this session (topology-only run or a snapshot without measurements)",
        )
        return unknown(
            f"the PCIe generation of GPU {index} under load (width x{width} ok)",
            f"not measured under load: {reason}; the current generation drops at idle, so it is sampled while the "
            "bandwidth/collective checks run — include them in the session",
            props,
        )
    return passed(f"GPU {index}: PCIe {measured} (generation sampled under load)", props)


def _pcie_below(gpu: Gpu, gen_t: Threshold | None, width_t: Threshold | None) -> tuple[str, str, Threshold] | None:
    """The first PCIe figure known to be below its minimum: trained width, loaded generation, or capability."""
    if width_t is not None and gpu.pcie_width_current is not None and gpu.pcie_width_current < width_t.value:
        return "link trained at width", f"x{gpu.pcie_width_current}", width_t
    if gen_t is not None and gpu.pcie_gen_loaded is not None and gpu.pcie_gen_loaded < gen_t.value:
        return "generation under load", f"Gen{gpu.pcie_gen_loaded}", gen_t
    # Even unloaded, a slot that cannot reach the minimum fails (nvmlDeviceGetMaxPcieLinkGeneration).
    if gen_t is not None and gpu.pcie_gen_max is not None and gpu.pcie_gen_max < gen_t.value:
        return "generation capability of GPU and slot", f"Gen{gpu.pcie_gen_max}", gen_t
    return None


def fabric_health_problems(info: FabricInfo) -> list[str]:
    """Every unhealthy item the source reports: the decoded health, DEGRADED_BW and the summary, once each."""
    problems = list(info.health_problems or [])
    if info.degraded_bandwidth and "degraded_bandwidth" not in problems:
        problems.append("degraded_bandwidth")
    # nvidia-smi prints "Unhealthy", the evidence reader lower-cases it; a snapshot holds what its writer wrote.
    summary = (info.health_summary or "").strip().lower() or None
    if summary not in (None, "healthy", "not_supported") and f"summary:{summary}" not in problems:
        problems.append(f"summary:{summary}")
    return problems


def fabric_health_known(info: FabricInfo) -> bool:
    """Whether the source reports any fabric health at all (None everywhere: a driver before R550)."""
    return (
        info.health_problems is not None
        or info.degraded_bandwidth is not None
        or (info.health_summary or "").strip().lower() not in ("", "not_supported")
    )


def fabric_events(node: Node) -> list[str]:
    """The NVSwitch SXids and Fabric Manager failures the event window holds, one short text each.

    An SXid names an NVSwitch, not a GPU, and a Fabric Manager line no device: either concerns every GPU of the
    fabric. Source: NVIDIA Fabric Manager User Guide (SXid errors are reported for NVSwitch hardware conditions
    in the kernel log, as Xids are for GPUs; https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/).
    """
    found = []
    for event in node.xid_events or []:
        if event.kind == "sxid":
            found.append(f"SXid {event.xid} on NVSwitch {event.pci_bus_id or '?'}: {event.text.strip()}")
        elif event.kind == "fabric_manager":
            found.append(f"Fabric Manager: {event.text.strip()}")
    return found
