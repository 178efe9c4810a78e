"""Verdict maths and messages, on the shipped snapshots and hand-made measurements."""

from __future__ import annotations

import copy

import pytest
from conftest import SNAPSHOTS, as_recorded

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.judges import bandwidth, collectives, inventory, nvlink, platform, topology
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import CollectiveMeasurement, NcclAudit, P2PMeasurement, TransportChannel
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome

GB = 10**9


def context(snapshot: str = "h100-8gpu-healthy", suite: str = "h100-8gpu") -> Context:
    loaded = load_suite(suite)
    node = load_snapshot(SNAPSHOTS / f"{snapshot}.json")
    return Context(node, loaded, load_thresholds(loaded.thresholds_ref))


def uni(value: float | None, nvlink: int | None = 10 * GB, pcie: int | None = 0) -> P2PMeasurement:
    return P2PMeasurement(
        0, 1, "unidirectional", value, "GB/s", bytes_copied=10 * GB, nvlink_bytes=nvlink, pcie_bytes=pcie
    )


def test_bandwidth_threshold_is_inclusive_and_names_key_and_file() -> None:
    ctx = context()
    assert bandwidth.p2p_figure(ctx, 0, 1, "unidirectional", uni(335.0)).ok
    verdict = bandwidth.p2p_figure(ctx, 0, 1, "unidirectional", uni(334.9))
    assert verdict.outcome is Outcome.FAIL
    assert "334.9 GB/s, below 335.0 GB/s (h100-sxm.toml:p2p.unidirectional_min_gbps)" in verdict.message
    props = dict(verdict.properties)
    assert props["threshold_key"] == "p2p.unidirectional_min_gbps" and props["measured"] == "334.9"


def test_pcie_like_figure_is_called_silent_fallback() -> None:
    verdict = bandwidth.p2p_figure(context(), 0, 1, "unidirectional", uni(37.0))
    assert "silent PCIe fallback" in verdict.message
    assert "NVIDIA/nccl#1264" in verdict.message


def test_latency_is_a_maximum() -> None:
    ctx = context()
    fast = P2PMeasurement(0, 1, "latency", 3.1, "us")
    slow = P2PMeasurement(0, 1, "latency", 24.0, "us")
    assert bandwidth.p2p_figure(ctx, 0, 1, "latency", fast).ok
    assert "above 10.0 us" in bandwidth.p2p_figure(ctx, 0, 1, "latency", slow).message


def test_missing_or_crashed_measurement_fails_with_its_error() -> None:
    crashed = P2PMeasurement(0, 1, "unidirectional", None, "GB/s", error="timed out after 900 s")
    ctx = context()
    verdict = as_recorded(bandwidth.p2p_figure(ctx, 0, 1, "unidirectional", crashed), ctx)
    assert verdict.outcome is Outcome.FAIL and "timed out after 900 s" in verdict.message
    assert as_recorded(bandwidth.p2p_figure(ctx, 0, 1, "bidirectional", None), ctx).outcome is Outcome.FAIL


def test_pcie_pairs_are_not_judged_against_nvlink_figures() -> None:
    ctx = context(suite="h100-nvl-4gpu")
    verdict = bandwidth.p2p_figure(ctx, 0, 2, "unidirectional", None)
    assert verdict.outcome is Outcome.NOT_APPLICABLE


@pytest.mark.parametrize(
    ("nvlink", "pcie", "outcome", "text"),
    [
        (10 * GB, 0, Outcome.PASS, "100% of the copied bytes crossed NVLink"),
        (9 * GB, 0, Outcome.PASS, "90%"),
        (int(8.9 * GB), 0, Outcome.FAIL, "bytes bypassed NVLink"),
        (
            0,
            10 * GB,
            Outcome.FAIL,
            "silent PCIe fallback — NVLink counters moved 0.00 GB of 10.00 GB copied (0%), "
            "PCIe counters moved 10.00 GB",
        ),
    ],
)
def test_path_proof_fraction(nvlink: int, pcie: int, outcome: Outcome, text: str) -> None:
    verdict = bandwidth.path_proof(context(), 0, 1, uni(370.0, nvlink, pcie))
    assert verdict.outcome is outcome
    assert text in verdict.message


def test_path_proof_without_counters_fails_unless_waived() -> None:
    ctx = context()
    missing = P2PMeasurement(
        0,
        1,
        "unidirectional",
        370.0,
        "GB/s",
        bytes_copied=GB,
        counters_note="NVML counters need admin (RmProfilingAdminOnly)",
    )
    verdict = as_recorded(bandwidth.path_proof(ctx, 0, 1, missing), ctx)
    assert verdict.outcome is Outcome.FAIL and "RmProfilingAdminOnly" in verdict.message
    assert '[waive] "p2p.nvlink_counter_fraction_min"' in verdict.message
    waived = copy.deepcopy(ctx)
    from pytest_nvlink.config.thresholds import Waiver

    key = "p2p.nvlink_counter_fraction_min"
    del waived.thresholds.values[key]
    waived.thresholds.waivers[key] = Waiver(key, "counters are admin-only here", ctx.suite.file)
    verdict = bandwidth.path_proof(waived, 0, 1, missing)
    assert verdict.outcome is Outcome.NOT_APPLICABLE
    assert verdict.message == f"waived by h100-8gpu.toml:waive.{key}: counters are admin-only here"


def coll(op: str, size_mib: int, busbw: float, **extra: object) -> CollectiveMeasurement:
    return CollectiveMeasurement(op, size_mib << 20, 8, 1000.0, busbw / 1.75, busbw, **extra)  # type: ignore[arg-type]


def test_collective_picks_threshold_size_and_compares() -> None:
    ctx = context()
    results = [coll("all_reduce", 64, 100.0), coll("all_reduce", 4096, 450.0, correct=True)]
    verdict = collectives.collective(ctx, "all_reduce", results)
    assert verdict.ok and "450.0" in verdict.message
    low = collectives.collective(ctx, "all_reduce", [coll("all_reduce", 4096, 350.0, nvls_available=False)])
    assert low.outcome is Outcome.FAIL
    assert "below 400.0 GB/s (h100-sxm.toml:collectives.all_reduce.busbw_min_gbps)" in low.message
    assert "NVLS" in low.message


def test_collective_wrong_data_fails_even_when_fast() -> None:
    verdict = collectives.collective(context(), "all_reduce", [coll("all_reduce", 4096, 480.0, correct=False)])
    assert verdict.outcome is Outcome.FAIL and "WRONG DATA" in verdict.message


def test_collective_at_other_size_is_not_the_judged_figure() -> None:
    # The minimum is defined at 4096 MiB; a passing figure at another size does not answer it.
    ctx = context()
    verdict = as_recorded(collectives.collective(ctx, "all_gather", [coll("all_gather", 1024, 320.0)]), ctx)
    assert verdict.outcome is Outcome.FAIL
    assert "no all_gather result at 4096 MiB" in verdict.message and "sizes recorded: 1024 MiB" in verdict.message


def test_wrong_data_at_any_size_fails_the_collective() -> None:
    good = coll("all_gather", 4096, 320.0)
    broken = coll("all_gather", 1024, 310.0)
    broken.correct = False
    verdict = collectives.collective(context(), "all_gather", [good, broken])
    assert verdict.outcome is Outcome.FAIL and "at 1024 MiB returned WRONG DATA" in verdict.message


def test_nccl_transport_names_shm_channels_and_env() -> None:
    ctx = context()
    audit = NcclAudit(
        channels=[
            TransportChannel(0, 0, 0, 1, 1, "P2P", "P2P/CUMEM"),
            TransportChannel(1, 2, 2, 6, 6, "SHM", "SHM/direct/direct"),
        ],
        env={"NCCL_P2P_DISABLE": "1"},
    )
    verdict = collectives.nccl_transport(ctx, audit)
    assert verdict.outcome is Outcome.FAIL
    assert "rank 2[GPU 2] -> rank 6[GPU 6] via SHM/direct/direct" in verdict.message
    assert "NCCL_P2P_DISABLE=1" in verdict.message
    ring = [TransportChannel(0, r, r, (r + 1) % 8, (r + 1) % 8, "P2P", "P2P/CUMEM") for r in range(8)]
    assert collectives.nccl_transport(ctx, NcclAudit(channels=ring, nvls_available=True)).ok
    # One P2P channel between GPUs 0 and 1 says nothing about the other six GPUs of the suite.
    partial = as_recorded(
        collectives.nccl_transport(ctx, NcclAudit(channels=audit.channels[:1], nvls_available=True)), ctx
    )
    assert partial.outcome is Outcome.FAIL
    assert "covers 2 rank(s) (0, 1) on GPU(s) 0, 1" in partial.message
    assert "no channel of GPU(s) 2, 3, 4, 5, 6, 7 was seen" in partial.message
    assert as_recorded(collectives.nccl_transport(ctx, None), ctx).outcome is Outcome.FAIL


def test_shm_between_pcie_pairs_is_expected_on_bridge_suites() -> None:
    ctx = context(suite="h100-nvl-4gpu")
    nvlink_pairs = [TransportChannel(0, a, a, b, b, "P2P", "P2P/CUMEM") for a, b in ((0, 1), (1, 0), (2, 3), (3, 2))]
    audit = NcclAudit(channels=[*nvlink_pairs, TransportChannel(0, 0, 0, 2, 2, "SHM", "SHM/direct/direct")])
    assert collectives.nccl_transport(ctx, audit).ok


def test_degraded_snapshot_topology_verdicts() -> None:
    ctx = context("h100-8gpu-degraded")
    links = nvlink.nvlink_active_links(ctx, 3)
    assert links.outcome is Outcome.FAIL and "16 of 18 NVLinks active" in links.message
    assert "inactive link(s): 16, 17" in links.message
    path = topology.pair_path(ctx, 0, 3)
    assert "GPU 3 has only 16 of 18 NVLinks active" in path.message
    p2p = topology.p2p_status(ctx, 2, 6)
    assert "disabled_by_regkey" in p2p.message and "registry key" in p2p.message
    fabric = platform.fabric(ctx, 0)
    assert "Fabric Manager is not running" in fabric.message
    assert nvlink.nvlink_active_links(ctx, 0).ok


def test_vm_snapshot_names_silent_pcie_fallback() -> None:
    ctx = context("h100-8gpu-vm-pcie")
    path = topology.pair_path(ctx, 0, 1)
    assert path.outcome is Outcome.FAIL
    assert "silent PCIe fallback" in path.message and "passthrough VM guest" in path.message
    assert "VM guest that hides NVLink" in nvlink.nvlink_active_links(ctx, 0).message


def test_l40s_without_nvlink_passes_link_checks() -> None:
    ctx = context("h100-8gpu-vm-pcie", suite="l40s-4gpu")
    assert nvlink.nvlink_active_links(ctx, 0).ok
    assert nvlink.nvlink_speed(ctx, 0).outcome is Outcome.NOT_APPLICABLE
    assert topology.p2p_status(ctx, 0, 1).outcome is Outcome.NOT_APPLICABLE


def test_evidence_source_turns_unknown_into_no_evidence() -> None:
    ctx = context()
    ctx.node.source = "evidence"
    ctx.node.gpus[0].fabric = None
    assert platform.fabric(ctx, 0).outcome is Outcome.UNKNOWN  # the judge does not read the source
    assert as_recorded(platform.fabric(ctx, 0), ctx).outcome is Outcome.NO_EVIDENCE


def test_lost_gpu_fails_count_and_its_items() -> None:
    ctx = context()
    ctx.node.gpus[7].problem = "GPU is lost"
    count = inventory.gpu_count(ctx)
    assert count.outcome is Outcome.FAIL and "GPU 7: GPU is lost" in count.message
    assert "unusable" in topology.pair_path(ctx, 0, 7).message


def test_reduced_nvlink_bandwidth_mode_fails_speed() -> None:
    ctx = context()
    assert nvlink.nvlink_speed(ctx, 0).ok
    ctx.node.nvlink_bw_mode = "half"
    verdict = nvlink.nvlink_speed(ctx, 0)
    assert verdict.outcome is Outcome.FAIL
    assert "bandwidth mode is 'half'" in verdict.message
