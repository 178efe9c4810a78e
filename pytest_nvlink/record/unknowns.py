"""Facts a passing run could not establish, listed so that a green summary does not hide them.

Some unknowns do not fail a check on their own (a driver too old to report the NVLink bandwidth
mode, nccl-tests run with ``-c 0``); the checks record them as JUnit properties and this module
names them once more in the terminal summary.
"""

from __future__ import annotations

from pytest_nvlink.config.thresholds import Thresholds
from pytest_nvlink.judges.platform import fabric_health_known
from pytest_nvlink.model import Node


def recorded_unknowns(node: Node, thresholds: Thresholds) -> list[str]:
    """One line per unknown the checks passed over or could not judge, in a stable order."""
    lines: list[str] = []
    expects_links = int(thresholds.value("nvlink.active_links", 0)) > 0
    if expects_links and node.nvlink_bw_mode is None and node.gpus:
        reason = node.unknown_reason("nvlink_bw_mode", "the source does not report it")
        lines.append(f"NVLink bandwidth mode unknown ({reason}): a reduced system mode could not be excluded")
    unreported = [
        gpu.index
        for gpu in node.gpus
        if gpu.fabric is not None and gpu.fabric.state == "completed" and not fabric_health_known(gpu.fabric)
    ]
    if unreported and thresholds.value("fabric.required", False) is True:
        reason = node.unknown_reason(f"gpu{unreported[0]}.fabric.health", "the source does not report it")
        lines.append(
            f"fabric health unknown on GPU(s) {_indices(unreported)} ({reason}); registration alone was judged"
        )
    unread = sorted({key.split(".", 1)[0] for key in node.unknown_reasons if ".errors_run" in key})
    if unread and node.error_window_s is not None:
        lines.append(f"NVLink error counters not read around the campaign on {', '.join(unread)} (see unknown reasons)")
    unvalidated = sorted({m.op for m in node.measurements.collectives if m.correct is None and m.error is None})
    if unvalidated:
        lines.append(f"collectives not validated (nccl-tests -c 0 or #wrong N/A): {', '.join(unvalidated)}")
    return lines


def _indices(indices: list[int]) -> str:
    return ", ".join(str(i) for i in indices)
