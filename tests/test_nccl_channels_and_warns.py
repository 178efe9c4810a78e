"""NCCL log shapes of new NCCL releases and the NVML numbering of channel lines (issue 9, items 7-8)."""

from __future__ import annotations

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.judges import collectives
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import NcclAudit, TransportChannel
from pytest_nvlink.sources.evidence.parsers import nccl_log
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome

WARN_230 = (
    "node1:4242:4250 [0] paths.cc:396 (ncclTopoCheckP2p) NCCL WARN P2P is disabled between NVLINK "
    "connected GPUs 0 and 1. This should not be the case given their connectivity"
)
CHANNEL = "node1:4242:4251 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"


@pytest.mark.parametrize(
    "line",
    [
        WARN_230,
        f"[2026-01-05 10:11:12] {WARN_230}",  # NCCL_DEBUG_TIMESTAMP_FORMAT default "[%F %T] "
        f"[2026-01-05 10:11:12.123456] {WARN_230}",
        "node1:4242:4250 [0] graph/paths.cc:123 NCCL WARN P2P is disabled between NVLINK connected GPUs 0 and 1.",
    ],
)
def test_p2p_disabled_warn_is_found_in_old_and_new_shapes(line: str) -> None:
    log = nccl_log.parse(f"{line}\n{CHANNEL}\n")
    assert log.p2p_problems and "GPUs 0 and 1" in log.p2p_problems[0]
    assert log.warnings == log.p2p_problems
    assert log.hosts == ("node1",)
    assert len(log.channels) == 1


def test_function_group_and_timestamp_do_not_leak_into_other_messages() -> None:
    text = (
        "[2026-01-05 10:11:12] node1:1:2 [3] init.cc:1 (ncclCommInitRankFunc) NCCL INFO ncclCommInitRank comm 0x1 "
        "rank 0 nranks 2 cudaDev 3 nvmlDev 5 busId 1b000 commId 0x2 - Init START\n"
        "node1:1:2 [3] 1234.5 enqueue.cc:9 (ncclLaunch) NCCL TRACE something\n"
        "node1:1:2 [3] transport.cc:7 (ncclTransportP2pSetup) NCCL WARN the last warning\n"
    )
    log = nccl_log.parse(text)
    assert log.ranks[0].nvml_dev == 5 and log.ranks[0].cuda_dev == 3
    assert log.last_warn == "the last warning"


def test_new_warn_fails_the_transport_audit_naming_both_gpus() -> None:
    ctx = _context("h100-8gpu")
    audit = nccl_log.to_audit(nccl_log.parse(f"{WARN_230}\n{CHANNEL}\n"), "nccl.log")
    verdict = collectives.nccl_transport(ctx, audit)
    assert verdict.outcome is Outcome.FAIL
    assert "NCCL reports P2P disabled: P2P is disabled between NVLINK connected GPUs 0 and 1" in verdict.message


def _context(suite_name: str, cuda_order: list[int] | None = None) -> Context:
    suite = load_suite(suite_name)
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    for gpu, cuda in zip(node.gpus, cuda_order or [], strict=False):
        gpu.cuda_index = cuda
    return Context(node, suite, load_thresholds(suite.thresholds_ref))


def _audit(*channels: tuple[int, int, int, int, str]) -> NcclAudit:
    return NcclAudit(
        channels=[
            TransportChannel(0, sr, sd, dr, dd, detail.split("/")[0], detail) for sr, sd, dr, dd, detail in channels
        ]
    )


def test_channel_devices_are_nvml_indices_even_when_cuda_reorders_gpus() -> None:
    # h100-nvl-4gpu: NVLink bridges 0-1 and 2-3 only. CUDA_VISIBLE_DEVICES=0,2,1,3 makes NVML GPU 1
    # CUDA device 2. NCCL's "0[0] -> 1[1]" names nvmlDev 0 and 1: the bridged pair, so SHM is a failure.
    ctx = _context("h100-nvl-4gpu", cuda_order=[0, 2, 1, 3])
    verdict = collectives.nccl_transport(ctx, _audit((0, 0, 1, 1, "SHM/direct/direct")))
    assert verdict.outcome is Outcome.FAIL
    assert "rank 0[GPU 0] -> rank 1[GPU 1] via SHM/direct/direct" in verdict.message
    # "0[0] -> 2[2]" is NVML 0 -> 2, a PCIe pair in this suite: SHM is what NCCL should pick there
    # (the bridged pairs' P2P channels make the log cover every GPU the suite expects on NVLink).
    bridged = ((0, 0, 1, 1, "P2P/CUMEM/read"), (2, 2, 3, 3, "P2P/CUMEM/read"))
    across = collectives.nccl_transport(ctx, _audit(*bridged, (0, 0, 2, 2, "SHM/direct/direct")))
    assert across.outcome is Outcome.PASS, across.message


PAIR_LOG = "\n".join(
    [
        "node1:100:101 [0] NCCL INFO NCCL version 2.30.7+cuda13.0",
        "node1:100:101 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000",
        "node1:200:201 [1] NCCL INFO ncclCommInitRank comm 0x2 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 1c000",
        f"[2026-01-05 10:11:12] {WARN_230}",
        "node1:100:102 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
        "node1:200:202 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct",
        "",
    ]
)


def test_new_warn_fails_the_transport_check_through_the_plugin(pytester: pytest.Pytester) -> None:
    log = pytester.path / "nccl.log"
    log.write_text(PAIR_LOG)
    result = pytester.runpytest(
        "--nvlink-suite=h100-nvl-pair",
        f"--nvlink-evidence={log}",
        "--nvlink-evidence-missing=skip",
        "-v",
        "-k",
        "nccl_transport",
    )
    result.stdout.fnmatch_lines(["*test_nccl_transport* FAILED*"])
    result.stdout.fnmatch_lines(["*NCCL reports P2P disabled: P2P is disabled between NVLINK connected GPUs 0 and 1*"])
