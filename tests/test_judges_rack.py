"""Rack verdicts (judges.rack) on the shipped GB200 NVL72 snapshots and variants of them, and the suite key."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from conftest import SNAPSHOTS, as_recorded

from pytest_nvlink.config.required_keys import required_keys
from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.judges import bandwidth, collectives, inventory, nvlink, rack, topology
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import Gpu, Node, TransportChannel
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome, Verdict

RACK_DATA = Path(__file__).resolve().parent / "data" / "rack"


def _context(node: Node, suite: str = "gb200-nvl72") -> Context:
    loaded = load_suite(suite)
    return Context(node=node, suite=loaded, thresholds=load_thresholds(loaded.thresholds_ref))


@pytest.fixture(scope="module")
def healthy_node() -> Node:
    return load_snapshot(SNAPSHOTS / "gb200-nvl72-healthy.json")


@pytest.fixture
def healthy(healthy_node: Node) -> Context:
    return _context(copy.deepcopy(healthy_node))


def _set_fabric(gpus: list[Gpu], **change: Any) -> None:
    for gpu in gpus:
        assert gpu.fabric is not None
        gpu.fabric = dataclasses.replace(gpu.fabric, **change)


def _fails(verdict: Verdict, *phrases: str) -> None:
    assert verdict.outcome is Outcome.FAIL, verdict.message
    for phrase in phrases:
        assert phrase in verdict.message, verdict.message


# --- the suite key ---------------------------------------------------------------------------------


def test_rack_suite_places_gpus_tray_by_tray() -> None:
    suite = load_suite("gb200-nvl72")
    assert (suite.gpu_count, suite.gpus_per_host) == (72, 4)
    assert suite.host_slot(0) == 0 and suite.host_slot(71) == 17
    assert not suite.crosses_hosts(4, 7) and suite.crosses_hosts(3, 4)
    assert load_suite("gb200-4gpu").gpus_per_host is None and not load_suite("gb200-4gpu").crosses_hosts(0, 3)
    assert load_suite("gb300-nvl72").gpus_per_host == 4


@pytest.mark.parametrize(
    ("value", "problem"),
    [("0", "expected a positive integer"), ("5", "5 does not divide suite.gpu_count = 72"), ('"4"', "positive")],
)
def test_gpus_per_host_must_divide_the_gpu_count(tmp_path: Path, value: str, problem: str) -> None:
    text = (RACK_DATA.parents[2] / "suites" / "gb200-nvl72.toml").read_text()
    path = tmp_path / "rack.toml"
    path.write_text(text.replace("gpus_per_host = 4", f"gpus_per_host = {value}"))
    with pytest.raises(ConfigError, match=rf"{path}:suite\.gpus_per_host: .*{problem}"):
        load_suite(str(path))


def test_a_rack_suite_requires_the_clique_and_send_recv_keys() -> None:
    keys = required_keys(load_suite("gb200-nvl72"))
    assert {"fabric.clique_required", "p2p.sendrecv_min_gbps"} <= set(keys)
    assert "fabric.clique_required" not in required_keys(load_suite("gb200-4gpu"))
    gb300 = load_thresholds("gb300-nvl72")
    assert gb300.value("collectives.all_reduce.busbw_min_gbps") == 800.0
    assert gb300.get("p2p.sendrecv_min_gbps").file.name == "gb200-nvl72.toml"  # type: ignore[union-attr]


# --- trays and clique --------------------------------------------------------------------------------


def test_healthy_rack_passes_every_rack_check(healthy: Context) -> None:
    verdicts = [rack.rack_trays(healthy)]
    for tray in range(18):
        verdicts += [rack.tray(healthy, tray), rack.rack_clique(healthy, tray)]
        verdicts.append(rack.rack_sendrecv(healthy, tray))
    verdicts.append(collectives.nccl_transport(healthy, healthy.node.measurements.nccl))
    assert [v.message for v in verdicts if not v.ok] == []
    assert "18 trays present" in verdicts[0].message


def test_a_missing_tray_fails_as_missing_not_as_a_smaller_rack(healthy: Context) -> None:
    healthy.node.gpus = [g for g in healthy.node.gpus if g.index < 68]
    _fails(rack.rack_trays(healthy), "tray 17 (GPUs 68-71) missing", "17 of 18 trays")
    _fails(rack.tray(healthy, 17), "tray 17 missing", "gb200-nvl72.toml:suite.gpu_count = 72")
    _fails(rack.rack_clique(healthy, 17), "tray 17 missing")
    _fails(inventory.gpu_count(healthy), "found 68: tray 17 missing")
    _fails(nvlink.nvlink_active_links(healthy, 70), "tray 17 missing")
    assert rack.tray(healthy, 16).ok


def test_a_tray_in_another_clique_names_its_host_and_the_majority(healthy: Context) -> None:
    _set_fabric(healthy.node.gpus[20:24], clique_id=9)
    verdict = rack.rack_clique(healthy, 5)
    _fails(
        verdict, "tray 5 (host gb200-r07-c06) is in clique 9 of cluster", "majority (17 of 18 trays) is in clique 32766"
    )
    assert ("threshold_key", "fabric.clique_required") in verdict.properties
    assert rack.rack_clique(healthy, 4).ok


def test_a_tray_of_another_cluster_fails_even_with_the_same_clique_id(healthy: Context) -> None:
    _set_fabric(healthy.node.gpus[0:4], cluster_uuid="11111111-2222-3333-4444-555555555555")
    _fails(rack.rack_clique(healthy, 0), "cluster 11111111-2222-3333-4444-555555555555", "the rack's majority")


@pytest.mark.parametrize(
    ("change", "phrase"),
    [({"clique_id": 0}, "clique id 0"), ({"cluster_uuid": "00000000-0000-0000-0000-000000000000"}, "all zeros")],
)
def test_a_tray_outside_any_multi_node_partition_fails(
    healthy: Context, change: dict[str, object], phrase: str
) -> None:
    _set_fabric(healthy.node.gpus[8:12], **change)
    _fails(rack.rack_clique(healthy, 2), phrase, "not part of a multi-node NVLink partition")


def test_an_unread_clique_fails_closed(healthy: Context) -> None:
    healthy.node.gpus[13].fabric = None
    _fails(as_recorded(rack.rack_clique(healthy, 3), healthy), "could not determine the fabric clique of tray 3")


def test_split_trays_with_no_majority_fail(healthy: Context) -> None:
    _set_fabric(healthy.node.gpus[36:], clique_id=7)
    _fails(rack.rack_clique(healthy, 0), "no clique holds a majority of the 18 trays")


def test_gpus_without_host_cannot_prove_tray_membership(healthy: Context) -> None:
    healthy.node.gpus[6].host = None
    _fails(as_recorded(rack.tray(healthy, 1), healthy), "could not determine the host of tray 1", "name no host")
    _fails(as_recorded(rack.rack_trays(healthy), healthy), "name no host")


def test_a_host_in_two_slots_fails_both_trays(healthy: Context) -> None:
    healthy.node.gpus[4].host = healthy.node.gpus[0].host
    _fails(rack.tray(healthy, 1), "tray 1 (GPUs 4-7) mixes hosts")
    _fails(rack.tray(healthy, 0), "has 4 GPU(s) in its slots and 5 on the host")


def test_a_lost_gpu_fails_its_tray(healthy: Context) -> None:
    healthy.node.gpus[10].problem = "GPU is lost (NVML GpuIsLost)"
    _fails(rack.tray(healthy, 2), "unusable GPUs: GPU 10: GPU is lost")


# --- send/recv and the pair guard ----------------------------------------------------------------------


def test_a_slow_cross_tray_pair_names_both_gpus_hosts_figure_and_key(healthy: Context) -> None:
    (pair,) = [m for m in healthy.node.measurements.p2p if (m.src, m.dst) == (9, 56)]
    pair.value = 212.6
    verdict = rack.rack_sendrecv(healthy, 2)
    _fails(
        verdict,
        "GPU 9 (gb200-r07-c03, GPU 1 there) <-> GPU 56 (gb200-r07-c15, GPU 0 there)",
        "send/recv 212.6 GB/s per direction, below 600.0 GB/s (gb200-nvl72.toml:p2p.sendrecv_min_gbps)",
        "likely cause: links trained down",
    )
    assert ("measured", "212.6") in verdict.properties
    _fails(rack.rack_sendrecv(healthy, 14), "GPU 56")
    assert rack.rack_sendrecv(healthy, 3).ok
    pair.value = 650.0
    assert rack.rack_sendrecv(healthy, 2).ok


def test_pairs_failing_through_one_gpu_name_it(healthy: Context) -> None:
    for m in healthy.node.measurements.p2p:
        if 9 in (m.src, m.dst):
            m.value = 300.0
    _fails(rack.rack_sendrecv(healthy, 2), "GPU 9 (gb200-r07-c03, GPU 1 there) is in every failing pair")


def test_an_unmeasured_pair_fails_and_a_tray_without_cross_pairs_is_unknown(healthy: Context) -> None:
    (pair,) = [m for m in healthy.node.measurements.p2p if (m.src, m.dst) == (9, 56)]
    pair.value, pair.error = None, "rank 9 timed out after 600 s"
    _fails(rack.rack_sendrecv(healthy, 2), "not measured (rank 9 timed out after 600 s)")
    healthy.node.measurements.p2p = [m for m in healthy.node.measurements.p2p if m.src // 4 == m.dst // 4]
    _fails(
        as_recorded(rack.rack_sendrecv(healthy, 0), healthy),
        "could not determine the send/recv bandwidth between tray 0",
    )


def test_cross_tray_pairs_are_not_judged_by_one_host_checks(healthy: Context) -> None:
    for verdict in (
        topology.pair_path(healthy, 3, 4),
        topology.p2p_status(healthy, 3, 40),
        bandwidth.p2p_figure(healthy, 0, 71, "unidirectional", None),
        bandwidth.path_proof(healthy, 5, 9, None),
    ):
        assert verdict.outcome is Outcome.NOT_APPLICABLE
        assert "sit on different hosts (gb200-nvl72.toml:suite.gpus_per_host = 4)" in verdict.message
        assert "test_rack_sendrecv" in verdict.message
    assert topology.pair_path(healthy, 4, 7).ok
    within = bandwidth.p2p_figure(healthy, 4, 7, "unidirectional", None)
    assert within.outcome is Outcome.NOT_APPLICABLE and "waived by gb200-nvl72.toml" in within.message


# --- NCCL transports between trays -----------------------------------------------------------------------


def _channels(ctx: Context) -> list[TransportChannel]:
    audit = ctx.node.measurements.nccl
    assert audit is not None
    return audit.channels


def test_net_between_trays_fails_as_rack_traffic_leaving_nvlink(healthy: Context) -> None:
    hop = next(c for c in _channels(healthy) if c.src_rank == 31)
    hop.transport, hop.detail = "NET", "NET/IB/0/GDRDMA"
    verdict = collectives.nccl_transport(healthy, healthy.node.measurements.nccl)
    _fails(
        verdict,
        "rack traffic left NVLink: NCCL used NET between trays on 1 of 36 channel(s)",
        "rank 31 [GPU 31 (gb200-r07-c08, GPU 3 there)] -> rank 32 [GPU 32 (gb200-r07-c09, GPU 0 there)] via NET/IB/0",
        "expected P2P over MNNVL or NVLS",
    )
    assert ("suite_key", "suite.gpus_per_host") in verdict.properties


def test_socket_between_trays_fails_and_shm_within_a_tray_fails(healthy: Context) -> None:
    hop = next(c for c in _channels(healthy) if c.src_rank == 3)
    hop.transport, hop.detail = "NET", "NET/Socket/0"
    _fails(collectives.nccl_transport(healthy, healthy.node.measurements.nccl), "via NET/Socket/0")
    hop.transport, hop.detail = "P2P", "P2P/MNNVL/read"
    inner = next(c for c in _channels(healthy) if c.src_rank == 1)
    inner.transport, inner.detail = "SHM", "SHM/direct/direct"
    _fails(
        collectives.nccl_transport(healthy, healthy.node.measurements.nccl),
        "SHM instead of NVLink P2P within a tray",
    )


def test_rack_audit_places_channels_by_rank_not_by_per_host_device(healthy: Context) -> None:
    # Device numbers restart on every host (0..3), yet every one of the 72 GPUs counts as seen.
    assert {c.src_dev for c in _channels(healthy)} == {0, 1, 2, 3}
    assert collectives.nccl_transport(healthy, healthy.node.measurements.nccl).ok
    audit = healthy.node.measurements.nccl
    assert audit is not None
    audit.channels = [c for c in audit.channels if c.src_rank < 64 and c.dst_rank < 64]
    _fails(collectives.nccl_transport(healthy, audit), "no channel of GPU(s) 64, 65", "tray(s) 16, 17")


def test_without_a_collective_naming_its_ranks_rank_r_is_gpu_r(healthy: Context) -> None:
    healthy.node.measurements.collectives = []
    assert rack.rank_to_gpu(healthy) == {r: r for r in range(72)}
    assert collectives.nccl_transport(healthy, healthy.node.measurements.nccl).ok


def test_a_site_waiver_of_the_send_recv_floor_makes_the_check_not_apply(healthy: Context, tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text('[waive]\n"p2p.sendrecv_min_gbps" = "pairs are accepted by the vendor burn-in"\n')
    ctx = dataclasses.replace(healthy, thresholds=load_thresholds("gb200-nvl72", site))
    verdict = rack.rack_sendrecv(ctx, 0)
    assert verdict.outcome is Outcome.NOT_APPLICABLE and "vendor burn-in" in verdict.message


def test_pairs_failing_through_one_other_tray_name_that_tray(healthy: Context) -> None:
    for m in healthy.node.measurements.p2p:
        if 5 in {m.src // 4, m.dst // 4} and m.src // 4 != m.dst // 4:
            m.value = 46.8
    verdict = rack.rack_sendrecv(healthy, 4)
    _fails(verdict, "tray 5 (gb200-r07-c06) is in every failing pair", "a figure at network speed")
    assert "tray 5 (gb200-r07-c06) is in every" not in rack.rack_sendrecv(healthy, 5).message
