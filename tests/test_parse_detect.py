"""Detecting which tool printed a text, by content only."""

from __future__ import annotations

import json

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.parsers import (
    detect,
    nccl_log,
    nccl_tests,
    nvbandwidth,
    nvlink,
    p2p_latency,
    snapshot_json,
    topo,
    topo_p2p,
)
from pytest_nvlink.sources.evidence.parsers.common import ParseError
from pytest_nvlink.sources.evidence.parsers.topo import TopoMatrix


@pytest.mark.parametrize(
    ("relative", "kind"),
    [
        ("topo/a100-sxm4-80gb-8gpu-distserve3.txt", topo.MATRIX),
        ("topo/h100-pcie-nvlink-bridge-pair-hpe-dl380a.txt", topo.MATRIX),
        ("topo/h100-sxm-8gpu-baremetal-supermicro-nccl1264-partial.txt", topo.MATRIX),
        ("topo/l40s-4gpu-pcie-only-node-sys.txt", topo.MATRIX),
        ("nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt", nvlink.STATUS),
        ("nvlink/a100-sxm4-40gb-vm-brev-nvlink-e-all.txt", nvlink.ERRORS),
        ("nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt", nccl_tests.KIND),
        ("p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt", p2p_latency.KIND),
        ("nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt", nvbandwidth.KIND),
        ("nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt", nccl_log.KIND),
    ],
)
def test_every_sample_is_detected_and_parses(relative: str, kind: str) -> None:
    text = sample(relative)
    assert detect.detect_kind(text) == kind
    found, result = detect.parse_any(text)
    assert found == kind and result is not None


def test_other_kinds() -> None:
    assert detect.detect_kind("nvidia-smi topo -p2p w\n\tGPU0\tGPU1\nGPU0\tX\tOK\nGPU1\tOK\tX\n") == topo_p2p.KIND
    caps = "GPU 0: A (UUID: GPU-1)\n\t Link 0, P2P is supported: true\n"
    assert detect.detect_kind(caps) == nvlink.CAPS
    remote = "GPU 0: A (UUID: GPU-1)\n\t Link 0: Remote Device 00000000:1B:00.0: Link 3\n"
    assert detect.detect_kind(remote) == nvlink.REMOTE
    document = {"kind": "pytest-nvlink-snapshot", "schema_version": 1, "node": {"source": "live"}}
    kind, result = detect.parse_any(json.dumps(document))
    assert kind == snapshot_json.KIND and result == document


def test_parse_any_returns_typed_result() -> None:
    kind, result = detect.parse_any(sample("topo/l40s-4gpu-pcie-only-node-sys.txt"))
    assert kind == topo.MATRIX and isinstance(result, TopoMatrix)


def test_unknown_text() -> None:
    assert detect.detect_kind("just some words\n") is None
    with pytest.raises(ParseError, match="not output of a supported tool"):
        detect.parse_any("just some words\n")


def test_broken_snapshot_json_names_the_line() -> None:
    with pytest.raises(ParseError, match="invalid JSON") as info:
        detect.parse_any('{"kind": "pytest-nvlink-snapshot",\n "node": }')
    assert info.value.line_no == 2
