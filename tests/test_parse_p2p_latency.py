"""p2pBandwidthLatencyTest parsing."""

from __future__ import annotations

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.parsers import p2p_latency
from pytest_nvlink.sources.evidence.parsers.common import ParseError

SAMPLE = "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt"


def test_a100_sample_devices_and_access() -> None:
    result = p2p_latency.parse(sample(SAMPLE))
    assert result.gpu_count == 8
    assert {d.name for d in result.devices} == {"NVIDIA A100-SXM4-80GB"}
    assert result.devices[1].pci_bus_id == "0000:0a:00.0"
    assert len(result.can_access) == 56 and all(result.can_access.values())
    assert len(result.connectivity) == 64 and all(result.connectivity.values())
    assert result.data_flows_row_to_column


def test_a100_sample_matrices() -> None:
    result = p2p_latency.parse(sample(SAMPLE))
    assert set(result.matrices) == {
        (kind, enabled)
        for kind in ("unidirectional", "bidirectional", "latency", "latency_cpu")
        for enabled in (False, True)
    }
    assert all(len(m) == 64 for m in result.matrices.values())
    uni = result.matrices[("unidirectional", True)]
    assert uni[(1, 0)] == 265.05
    assert uni[(0, 0)] == 1528.86
    assert min(v for (a, b), v in uni.items() if a != b and v is not None) == 265.05
    bidir = result.matrices[("bidirectional", True)]
    assert bidir[(4, 5)] == 517.80 and bidir[(0, 1)] == 416.29
    assert result.matrices[("unidirectional", False)][(4, 5)] == 10.65
    assert result.matrices[("latency", True)][(0, 1)] == 3.38
    assert result.matrices[("latency_cpu", False)][(7, 0)] == 8.02
    assert result.units["latency"] == "us" and result.units["bidirectional"] == "GB/s"


def test_cannot_access_and_reads_variant() -> None:
    text = (
        "Device: 0, Tesla T4, pciBusID: 3b, pciDeviceID: 0, pciDomainID:0\n"
        "Device: 1, Tesla T4, pciBusID: d8, pciDeviceID: 0, pciDomainID:0\n"
        "Device=0 CANNOT Access Peer Device=1\n"
        "Device=1 CANNOT Access Peer Device=0\n"
        "Unidirectional P2P=Enabled Bandwidth (P2P Reads) Matrix (GB/s)\n"
        "   D\\D     0      1\n"
        "     0 240.00   5.00\n"
        "     1   6.00 241.00\n"
    )
    result = p2p_latency.parse(text.replace("\n", "\r\n"))
    assert result.can_access == {(0, 1): False, (1, 0): False}
    assert not result.data_flows_row_to_column
    assert result.matrices[("unidirectional", True)][(0, 1)] == 5.0


def test_short_row_names_the_line() -> None:
    lines = sample(SAMPLE).split("\n")
    index = next(i for i, line in enumerate(lines) if line.startswith("Bidirectional P2P=Enabled")) + 3
    lines[index] = "     1 418.74 1553.95 418.73"
    with pytest.raises(ParseError, match="row 1 with 8 values") as info:
        p2p_latency.parse("\n".join(lines))
    assert info.value.line_no == index + 1


def test_dropped_row_is_an_error() -> None:
    lines = sample(SAMPLE).split("\n")
    index = next(i for i, line in enumerate(lines) if line.startswith("Bidirectional P2P=Enabled")) + 3
    del lines[index]
    with pytest.raises(ParseError, match="bidirectional"):
        p2p_latency.parse("\n".join(lines))


def test_unrelated_text_is_an_error() -> None:
    with pytest.raises(ParseError, match="p2pBandwidthLatencyTest"):
        p2p_latency.parse("hello\n")
