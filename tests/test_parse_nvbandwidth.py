"""nvbandwidth parsing, old and new formats."""

from __future__ import annotations

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.parsers import nvbandwidth
from pytest_nvlink.sources.evidence.parsers.common import ParseError

SAMPLE = "nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt"


def test_old_format_sample() -> None:
    result = nvbandwidth.parse(sample(SAMPLE))
    case = result.testcases["device_to_device_memcpy_write_ce"]
    assert case.arrow == "<-" and case.unit == "GB/s"
    assert (case.row_kind, case.column_kind) == ("GPU", "GPU")
    assert len(case.matrix) == 64
    off_diagonal = [v for (a, b), v in case.matrix.items() if a != b]
    assert all(v is not None and 274.0 < v < 277.0 for v in off_diagonal)
    assert case.matrix[(6, 0)] == 274.89
    assert case.matrix[(0, 0)] == 0.0
    assert case.source_and_destination(6, 0) == (0, 6)  # "<-": data went column -> row
    assert case.total is None
    assert result.devices == {} and result.version is None


NEW_FORMAT = """nvbandwidth Version: v0.7
Built from Git version: v0.7

CUDA Runtime Version: 12080
CUDA Driver Version: 12080
Driver Version: 570.124.06

Device 0: NVIDIA H100 80GB HBM3 (00000000:18:00)
Device 1: NVIDIA H100 80GB HBM3 (00000000:2a:00)

Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0       N/A    389.37
 1    389.90       N/A

SUM device_to_device_memcpy_read_ce 779.27

Running device_to_device_bidirectional_memcpy_write_ce.
memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)
           0         1
 0       N/A    370.10
 1    370.20       N/A

SUM device_to_device_bidirectional_memcpy_write_ce 740.30

Running device_to_device_latency_sm.
Device to Device Latency SM GPU(row) <-> GPU(column) (ns)
           0         1
 0       N/A    812.50
 1    810.25       N/A

Running host_device_latency_sm.
Waived.

NOTE: The reported results may not reflect the full capabilities of the platform.
"""


def test_new_format() -> None:
    result = nvbandwidth.parse(NEW_FORMAT)
    assert result.version == "v0.7"
    assert result.versions["driver"] == "570.124.06"
    assert result.versions["cuda_runtime"] == "12080"
    assert result.devices == {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H100 80GB HBM3"}
    assert result.device_bus_ids[1] == "00000000:2a:00"
    read = result.testcases["device_to_device_memcpy_read_ce"]
    assert read.arrow == "->" and read.matrix[(0, 0)] is None and read.matrix[(0, 1)] == 389.37
    assert read.source_and_destination(0, 1) == (0, 1)
    assert read.total == 779.27
    bidir = result.testcases["device_to_device_bidirectional_memcpy_write_ce"]
    assert bidir.bidirectional and bidir.total == 740.30
    latency = result.testcases["device_to_device_latency_sm"]
    assert latency.unit == "ns" and latency.matrix[(1, 0)] == 810.25
    assert result.waived == ("host_device_latency_sm",)


def test_tabs_and_crlf() -> None:
    text = NEW_FORMAT.replace("    ", "\t").replace("\n", "\r\n")
    assert nvbandwidth.parse(text).testcases["device_to_device_memcpy_read_ce"].matrix[(1, 0)] == 389.90


def test_bad_cell_names_the_line() -> None:
    lines = sample(SAMPLE).split("\n")
    lines[5] = lines[5].replace("276.29", "27?.29", 1)
    text = "\n".join(lines)
    with pytest.raises(ParseError, match="number or N/A") as info:
        nvbandwidth.parse(text)
    assert info.value.line_no == 6


def test_short_row_names_the_line() -> None:
    lines = sample(SAMPLE).split("\n")
    lines[8] = lines[8].rsplit(maxsplit=1)[0]
    text = "\n".join(lines)
    with pytest.raises(ParseError, match="row 5 once, with 8 values") as info:
        nvbandwidth.parse(text)
    assert info.value.line_no == 9


def test_not_nvbandwidth() -> None:
    with pytest.raises(ParseError, match="nvbandwidth"):
        nvbandwidth.parse("hello\n")


def test_a_sum_line_that_is_not_the_sum_of_its_cells_is_noted() -> None:
    text = (
        "Running device_to_device_memcpy_write_ce.\n"
        "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)\n"
        "           0         1\n"
        " 0       N/A    389.10\n"
        " 1    389.20       N/A\n"
        "\n"
        "SUM device_to_device_memcpy_write_ce 778.30\n"
    )
    assert nvbandwidth.parse(text).notes == ()
    (note,) = nvbandwidth.parse(text.replace("389.20", "339.20")).notes
    assert note[0] == 7
    assert "SUM device_to_device_memcpy_write_ce 778.3 is not the sum of its 2 cells (728.30)" in note[1]
