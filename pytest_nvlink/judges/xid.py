"""Xid events of one GPU during the run: every Xid the source saw, those in the SKU's ``xid.fail`` list failing it.

A live run listens for NVML's Xid critical-error events from its start to its end; evidence is a kernel log
covering a window. Either way the verdict is only as good as the window (``Node.event_window``): a GPU the
window does not cover (the driver refused to register its events, a log line names a bus id no source maps)
is unknown, never a pass.
"""

from __future__ import annotations

from pytest_nvlink.judges.context import Context, gpu_properties, per_gpu
from pytest_nvlink.model import EventWindow, Gpu, XidEvent
from pytest_nvlink.verdict import Verdict, failed, measured_properties, passed, unknown

# What each Xid means and where to look first. Source for every meaning: NVIDIA's Xid catalogue,
# https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (the "Description" column) and the
# Xid Error Listing of https://docs.nvidia.com/deploy/xid-errors/index.html; the likely causes follow the
# catalogue's resolution buckets (RESTART_APP, RESET_GPU, WORKFLOW_NVLINK_ERR, RESTART_BM, CONTACT_SUPPORT).
_APP = "an application fault (catalogue: RESTART_APP); on an acceptance run it is the measurement's own process"
_ECC = "GPU memory (ECC): reset the GPU, check nvidia-smi -q -d ROW_REMAPPER,ECC and plan an RMA if it recurs"
_NVLINK = "an NVLink link or the device at its far end (cable, connector, NVSwitch port): reset the GPU and rerun"
_GSP = "GPU firmware (GSP) or the driver: reset the GPU or reboot; update the driver if it recurs"
XID_MEANINGS: dict[int, tuple[str, str]] = {
    # Source: NVIDIA Xid catalogue: 13 Graphics Engine Exception, 31 GPU memory page fault, 43 GPU stopped
    # processing (resolution RESTART_APP): faults of the application, reported, not failing by default.
    13: ("Graphics Engine Exception", _APP),
    31: ("GPU memory page fault", _APP),
    43: ("GPU stopped processing", _APP),
    # Source: NVIDIA Xid catalogue: 45 Preemptive cleanup, due to previous errors (often follows another Xid).
    45: ("Preemptive cleanup, due to previous errors", "an earlier Xid or a killed process; look at the Xid before it"),
    # Source: NVIDIA Xid catalogue: 48 Double Bit ECC Error; 63 ECC page retirement or row remapping recording
    # event; 64 ECC page retirement or row remapper recording failure; 92 High single-bit ECC error rate;
    # 94 Contained ECC error; 95 Uncontained ECC error; 140 Unrecovered ECC Error.
    48: ("Double Bit ECC Error", _ECC),
    63: ("ECC page retirement or row remapping recording event", _ECC),
    64: ("ECC page retirement or row remapper recording failure", _ECC),
    92: ("High single-bit ECC error rate", _ECC),
    94: ("Contained ECC error", _ECC),
    95: ("Uncontained ECC error", _ECC),
    140: ("Unrecovered ECC Error", _ECC),
    # Source: NVIDIA Xid catalogue: 74 NVLINK Error (resolution WORKFLOW_NVLINK_ERR).
    74: ("NVLink Error", _NVLINK),
    # Source: NVIDIA Xid catalogue: 79 GPU has fallen off the bus (resolution RESTART_BM).
    79: (
        "GPU has fallen off the bus",
        "the GPU dropped off PCIe (power, riser, seating or overheating): reboot, reseat and check the PSUs",
    ),
    # Source: NVIDIA Xid catalogue: 109 Context Switch Timeout Error.
    109: ("Context Switch Timeout Error", "a hung channel; reset the GPU and rerun"),
    # Source: NVIDIA Xid catalogue: 119 GSP RPC Timeout, 120 GSP Error.
    119: ("GSP RPC Timeout", _GSP),
    120: ("GSP Error", _GSP),
    # Source: NVIDIA Xid catalogue: 121 C2C Link Error (NVLink-C2C between Grace and the GPU).
    121: ("C2C Link Error", "the NVLink-C2C link between the Grace CPU and the GPU"),
    # Source: NVIDIA Xid catalogue: 137 NVLink FLA privilege error; 144 NVLINK: SAW Error, 145 NVLINK: RLW Error,
    # 146 NVLINK: TLW Error, 147 NVLINK: TREX Error, 148 NVLINK: NVLPW_CTRL Error, 149 NVLINK: NETIR Error,
    # 150 NVLINK: MSE Error (the NVLink5 Xids of Blackwell, resolution WORKFLOW_NVLINK5_ERR).
    137: ("NVLink FLA privilege error", _NVLINK),
    144: ("NVLink: SAW Error", _NVLINK),
    145: ("NVLink: RLW Error", _NVLINK),
    146: ("NVLink: TLW Error", _NVLINK),
    147: ("NVLink: TREX Error", _NVLINK),
    148: ("NVLink: NVLPW_CTRL Error", _NVLINK),
    149: ("NVLink: NETIR Error", _NVLINK),
    150: ("NVLink: MSE Error", _NVLINK),
    # Source: NVIDIA Xid catalogue: 154 GPU Recovery Action Changed (the driver asks for a GPU reset or reboot).
    154: ("GPU Recovery Action Changed", "an earlier error left the GPU needing a reset or a reboot"),
}

_NO_WINDOW = (
    "the source watched for no driver events (a snapshot saved before events were recorded, or evidence "
    "without a kernel log: give dmesg, journalctl -k or /var/log/kern.log of the run's window)"
)


def meaning(xid: int) -> str:
    """``79 (GPU has fallen off the bus)``; an Xid the table lacks is named by its number only."""
    known = XID_MEANINGS.get(xid)
    return f"{xid} ({known[0]})" if known else f"{xid} (not in this plugin's table; see NVIDIA's Xid catalogue)"


def when(event: XidEvent, window: EventWindow) -> str:
    """When the event happened, relative to the window and the measurement campaigns that ran in it."""
    if event.at_s is None:
        return f"at {event.stamp}" if event.stamp else "at a time the source does not give"
    at = event.at_s
    stamp = f" ({event.stamp})" if event.stamp else ""
    during = next((c for c in window.campaigns if c.start_s <= at <= c.end_s), None)
    if during is not None:
        return f"{at:.1f} s into the run{stamp}, during the {during.name} campaign ({at - during.start_s:.1f} s in)"
    before = [c for c in window.campaigns if c.end_s < at]
    if before:
        last = max(before, key=lambda c: c.end_s)
        return f"{at:.1f} s into the run{stamp}, {at - last.end_s:.1f} s after the {last.name} campaign ended"
    if window.campaigns:
        return f"{at:.1f} s into the run{stamp}, before the measurement campaigns began"
    if window.end is None:  # a live run's window: it ends when the run does
        return f"{at:.1f} s into the run{stamp}, no measurement campaign having run yet"
    began = f" at {window.start}" if window.start else ""
    return f"at {event.stamp or f'{at:.1f} s'}, {at:.1f} s after the window began{began}"


def window_text(window: EventWindow) -> str:
    length = f"{window.length_s:.0f} s" if window.length_s is not None else "a window of unknown length"
    span = f" from {window.start}" + (f" to {window.end}" if window.end else "") if window.start else ""
    return f"{length} of {window.source}{span}"


@per_gpu
def xid(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    threshold = ctx.thresholds.get("xid.fail")
    if threshold is None:
        return ctx.missing_threshold("xid.fail")
    fail = set(threshold.value)
    node = ctx.node
    window, events = node.event_window, node.xid_events
    mine = [e for e in events or [] if e.kind == "xid" and e.gpu == index and e.xid is not None]
    seen = "; ".join(f"Xid {e.xid}" + (f" at {e.at_s:.1f} s" if e.at_s is not None else "") for e in mine)
    expected = f"no Xid of {', '.join(str(x) for x in sorted(fail))}"
    props = measured_properties(seen or "no Xid", expected, "Xid events", threshold) + gpu_properties(gpu)
    if window is None or events is None:
        return unknown(
            f"the Xid events of GPU {index}", node.unknown_reason(f"gpu{index}.xid_events", _NO_WINDOW), props
        )
    props.append(("event_window", window_text(window)))
    failing = [e for e in mine if e.xid in fail]
    if failing:
        return failed(_failure(index, failing, window, threshold.where()), props)
    uncovered = _uncovered(ctx, gpu, window, events)
    if uncovered is not None:
        return unknown(f"the Xid events of GPU {index}", uncovered, props)
    noted = [e for e in mine if e.xid not in fail]
    note = ""
    if noted:
        shown = "; ".join(f"Xid {meaning(e.xid or 0)} {when(e, window)}" for e in noted)
        note = f"; seen but not in {threshold.where()}: {shown}"
    return passed(f"GPU {index}: no failing Xid in {window_text(window)}{note}", props)


def _failure(index: int, failing: list[XidEvent], window: EventWindow, where: str) -> str:
    first = failing[0]
    xid = first.xid or 0
    cause = XID_MEANINGS[xid][1] if xid in XID_MEANINGS else "see NVIDIA's Xid catalogue for this Xid"
    others = f" (and {len(failing) - 1} more: {', '.join(str(e.xid) for e in failing[1:])})" if len(failing) > 1 else ""
    return (
        f"GPU {index}: Xid {meaning(xid)} {when(first, window)}{others}, an Xid that fails the GPU ({where}); "
        f"the driver logged: {first.text.strip()}; likely cause: {cause}"
    )


def _uncovered(ctx: Context, gpu: Gpu, window: EventWindow, events: list[XidEvent]) -> str | None:
    """Why the window cannot vouch for this GPU, or None when it can."""
    index = gpu.index
    if index not in window.gpus:
        return ctx.node.unknown_reason(
            f"gpu{index}.xid_events", f"the {window.source} window does not cover GPU {index}"
        )
    unnamed = [e for e in events if e.kind == "xid" and e.gpu is None]
    if unnamed and gpu.pci_bus_id is None:
        buses = ", ".join(sorted({e.pci_bus_id or "?" for e in unnamed}))
        return (
            f"Xid(s) {', '.join(str(e.xid) for e in unnamed)} name PCI bus id(s) {buses}, and no source gives GPU "
            f"{index}'s bus id to tell whether one is its own (add nvidia-smi -q to the evidence)"
        )
    return None
