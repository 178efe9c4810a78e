"""The evidence formats registry: every format is one module, and a new one needs nothing else."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from conftest import EVIDENCE, sample

from pytest_nvlink.record.coverage import coverage
from pytest_nvlink.sources.evidence.families import FAMILIES
from pytest_nvlink.sources.evidence.load import EvidenceError, load_evidence
from pytest_nvlink.sources.evidence.parsers import detect, registry

# The kinds detect told apart before the registry; the registry must know every one of them.
KNOWN_KINDS = {
    "topo_matrix",
    "topo_p2p",
    "nvlink_status",
    "nvlink_errors",
    "nvlink_caps",
    "nvlink_remote",
    "nvlink_mixed",
    "nccl_tests",
    "p2p_bandwidth_latency",
    "nvbandwidth",
    "nccl_log",
    "snapshot_json",
    "nvidia_smi_q",
    "kernel_log",
    "bandwidth_test",
    "dcgm_diag",
}


def test_the_registry_lists_every_format_detect_knows() -> None:
    assert set(detect.kinds()) == KNOWN_KINDS
    assert len(detect.kinds()) == len(KNOWN_KINDS)  # no kind claimed by two formats
    for path in sorted(EVIDENCE.rglob("*.txt")):
        for part in detect.split_parts(sample(path.relative_to(EVIDENCE).as_posix())):
            kind = detect.detect_kind(part.text)
            assert kind is None or registry.format_of(kind) is not None, path


def test_every_family_is_fed_by_a_format_and_every_format_feeds_known_families() -> None:
    fed = {family for fmt in registry.formats() for family in fmt.families}
    assert fed == set(FAMILIES)


def test_detection_runs_from_the_most_specific_format() -> None:
    names = [fmt.name for fmt in registry.in_detection_order()]
    assert names == [
        "snapshot_json",
        "smi_query",
        "nvbandwidth",
        "dcgm_diag",
        "p2p_latency",
        "bandwidth_test",
        "nccl_tests",
        "nvlink",
        "nccl_log",
        "topo_p2p",
        "topo",
        "kernel_log",
    ]


def test_unknown_text_names_every_tool(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("just some words\n")
    with pytest.raises(EvidenceError) as raised:
        load_evidence([tmp_path / "notes.md"])
    assert str(raised.value) == (
        f"{tmp_path / 'notes.md'}: cannot tell which tool produced this text; expected output of nvidia-smi "
        "topo -m/-p2p, nvidia-smi nvlink -s/-e/-c/-R, nvidia-smi -q, nccl-tests, p2pBandwidthLatencyTest, "
        "nvbandwidth, an NCCL_DEBUG=INFO log, a pytest-nvlink snapshot, a kernel log (dmesg, journalctl -k, "
        "kern.log), cuda-samples bandwidthTest or dcgmi diag (leave other files out with "
        "--nvlink-evidence-exclude=GLOB)"
    )


# A whole format in one module: detection, parser, families and merge step, registered on import.
TOY_MODULE = """
from __future__ import annotations

import re

from pytest_nvlink.sources.evidence.parsers.common import ParseError
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

KIND = "toy_gpus"


def parse(text: str) -> int:
    match = re.search(r"^toytool: (\\d+) GPUs$", text, re.MULTILINE)
    if match is None:
        raise ParseError("no 'toytool: N GPUs' line", 0)
    return int(match.group(1))


def _merge(into: Into, count: int) -> None:
    into.merger.count(count, into.part.name)
    into.note(f"toytool counted {count} GPUs")


FORMAT = register(
    Format(
        name="toy",
        kinds=(KIND,),
        order=15,
        detect=lambda text: KIND if text.startswith("toytool:") else None,
        parse=parse,
        families=("inventory",),
        label="toytool",
        merge=_merge,
        start=re.compile(r"^toytool:"),
    )
)
"""


@pytest.fixture
def toy_format(tmp_path: Path) -> Iterator[ModuleType]:
    path = tmp_path / "toy_format.py"
    path.write_text(textwrap.dedent(TOY_MODULE))
    spec = importlib.util.spec_from_file_location("toy_format", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["toy_format"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        registry.unregister("toy")
        sys.modules.pop("toy_format", None)


@pytest.mark.usefixtures("toy_format")
def test_a_new_format_is_one_module(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "count.txt").write_text("toytool: 4 GPUs\n")
    # In a file with another tool's output, its start line cuts the file as a built-in format's does.
    (evidence / "both.txt").write_text(sample("topo/l40s-4gpu-pcie-only-node-sys.txt") + "\ntoytool: 4 GPUs\n")
    node = load_evidence([evidence])
    assert len(node.gpus) == 4
    inventory = dict(coverage(node))["inventory"]
    assert str(evidence / "count.txt") in inventory
    assert f"{evidence / 'both.txt'} (line" in inventory
    assert node.evidence_notes[str(evidence / "count.txt")] == ["toytool counted 4 GPUs"]
    assert "toytool" in detect.expected_tools()


def test_registering_a_taken_kind_is_refused() -> None:
    taken = registry.formats()[0]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(taken)
