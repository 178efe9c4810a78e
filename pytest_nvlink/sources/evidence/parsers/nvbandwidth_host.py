"""nvbandwidth's host<->device testcases as host-link figures, one per GPU and direction.

Each of these testcases copies between pinned host memory and one GPU at a time and prints one CPU row
with a column per GPU (``memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)``; NVIDIA/nvbandwidth
``testcases_ce.cpp``/``testcases_sm.cpp``). The bidirectional ones print the figure of the named direction
while a copy the other way runs at once, under the title's ``<->``; the testcase's name, not the arrow,
says which direction that is. Columns are CUDA device numbers, read as GPU indices exactly as the parser
reads the columns of its GPU pair matrices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from pytest_nvlink.model import WRONG_DATA
from pytest_nvlink.model.host_link import PINNED, HostLinkMeasurement


class Testcase(Protocol):
    """What is read of one parsed testcase (:class:`.nvbandwidth.Testcase`); this module imports no parser."""

    @property
    def name(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def row_kind(self) -> str: ...
    @property
    def column_kind(self) -> str: ...
    @property
    def unit(self) -> str: ...
    @property
    def matrix(self) -> Mapping[tuple[int, int], float | None]: ...


class NvbandwidthResult(Protocol):
    """What is read of a parsed output (:class:`.nvbandwidth.NvbandwidthResult`)."""

    @property
    def testcases(self) -> Mapping[str, Testcase]: ...
    @property
    def devices(self) -> Mapping[int, str]: ...
    @property
    def waived(self) -> Sequence[str]: ...
    @property
    def aborted(self) -> Mapping[str, str]: ...


__all__ = ["HOST_LINK_CASES", "host_link_measurements", "host_link_notes", "other_host_cases"]

# testcase -> (direction, method). Every one copies one GPU at a time from or to pinned host memory.
HOST_LINK_CASES: dict[str, tuple[str, str]] = {
    f"{name}_{method}": (direction, method)
    for method in ("ce", "sm")
    for name, direction in (
        ("host_to_device_memcpy", "h2d"),
        ("device_to_host_memcpy", "d2h"),
        ("host_to_device_bidirectional_memcpy", "bidir_h2d"),
        ("device_to_host_bidirectional_memcpy", "bidir_d2h"),
    )
}


def host_link_measurements(result: NvbandwidthResult, file: str) -> list[HostLinkMeasurement]:
    """Every GPU's figure of every host-link testcase; N/A cells, waived and aborted testcases as errors."""
    found: list[HostLinkMeasurement] = []
    for name, case in result.testcases.items():
        if name in HOST_LINK_CASES and case.unit == "GB/s" and "CPU" in (case.row_kind, case.column_kind):
            found.extend(_figures(name, case, file))
    gpus = sorted(result.devices)
    for name in result.waived:
        if name in HOST_LINK_CASES:
            found.extend(_unmeasured(name, gpus, f"nvbandwidth {name} was waived: no figure", file))
    for name, line in result.aborted.items():
        if name in HOST_LINK_CASES:
            error = f"{WRONG_DATA}: nvbandwidth {name} aborted in its data check ({line.strip()})"
            found.extend(_unmeasured(name, gpus, error, file))
    return found


def _figures(name: str, case: Testcase, file: str) -> list[HostLinkMeasurement]:
    direction, method = HOST_LINK_CASES[name]
    gpu_is_column = case.column_kind == "GPU"
    return [
        HostLinkMeasurement(
            gpu=column if gpu_is_column else row,
            direction=direction,
            value=value,
            method=method,
            error="nvbandwidth printed N/A" if value is None else None,
            source=f"nvbandwidth {name}: {file}",
            conditions={"memory": PINNED, "testcase": name},
        )
        for (row, column), value in sorted(case.matrix.items())
    ]


def _unmeasured(name: str, gpus: list[int], error: str, file: str) -> list[HostLinkMeasurement]:
    direction, method = HOST_LINK_CASES[name]
    source = f"nvbandwidth {name}: {file}"
    conditions = {"memory": PINNED, "testcase": name}
    return [
        HostLinkMeasurement(gpu, direction, None, method=method, error=error, source=source, conditions=conditions)
        for gpu in gpus
    ]


def other_host_cases(result: NvbandwidthResult) -> list[Testcase]:
    """Testcases with a CPU row or column that are no single GPU's host link (all GPUs at once, latency)."""
    return [
        case
        for name, case in result.testcases.items()
        if "CPU" in (case.row_kind, case.column_kind) and not (name in HOST_LINK_CASES and case.unit == "GB/s")
    ]


def host_link_notes(result: NvbandwidthResult) -> list[str]:
    """What was read but is no host-link figure, and host-link testcases that named no GPU."""
    notes = [
        f"nvbandwidth {case.name} ({case.title}) read but not a host-link figure: it is no copy between "
        "pinned host memory and one GPU at a time (all GPUs at once, or a latency); never GPU pairs"
        for case in other_host_cases(result)
    ]
    if not result.devices:
        notes += [
            f"nvbandwidth {name} has no figure and its 'Device N:' lines are missing, so no GPU can be named"
            for name in [*result.waived, *result.aborted]
            if name in HOST_LINK_CASES
        ]
    return notes
