"""The path proof reads counters newer than its copies, by NVML's field timestamps (issue 25 item 9).

NVML refreshes the traffic counters on its own clock and stamps each value with the refresh
(``c_nvmlFieldValue_t.timestamp``, microseconds since 1970). Two equal reads 50 ms apart prove only
that no refresh came between them: with a slower refresh, both show the counters from before the
copy and the proof undercounts. The fake NVML here refreshes every ``counter_refresh_s``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import pytest
from conftest import REPO, SNAPSHOTS, serve_live_node
from fake_nvml_copies import NvmlFedEngine, live_setup

from pytest_nvlink.measure import p2p
from pytest_nvlink.measure.p2p import P2PPlan
from pytest_nvlink.measure.p2p_counters import CounterReader, counter_deltas, settled_counters, wall_clock_us
from pytest_nvlink.measure.p2p_simulated import SimulatedCopyEngine, SimulatedSample
from pytest_nvlink.measure.runner import NvmlCounterFactory
from pytest_nvlink.model import Measurements
from pytest_nvlink.sources.snapshot.file import load_snapshot

MIB = 1 << 20
COPY = 64 * MIB


def _fed(install_fake_nvml: Callable[..., Any], **options: Any) -> tuple[Any, CounterReader, NvmlFedEngine]:
    """A fake NVML serving the healthy H100 node, its counter reader, and an engine whose copies it counts."""
    fake = install_fake_nvml("h100-8gpu-healthy", **options)
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    names = tuple((gpu.index, gpu.pci_bus_id or "") for gpu in node.gpus[:2])
    engine = NvmlFedEngine(uuids=tuple(gpu.uuid or "" for gpu in node.gpus))
    import fake_nvml_copies

    fake_nvml_copies._SERVED[:] = [fake]
    return fake, NvmlCounterFactory(gpus=names)(), engine


def _plan(settle_max_s: float) -> P2PPlan:
    return P2PPlan(
        gpus=(0, 1),
        nbytes=MIB,
        iterations=4,
        warmup=1,
        latency_iterations=4,
        proof_seconds=0.01,
        settle_interval_s=0.02,
        settle_max_s=settle_max_s,
    )


def test_agreeing_reads_undercount_a_slow_refresh_and_the_timestamp_rule_waits_for_a_fresh_one(
    install_fake_nvml: Callable[..., Any],
) -> None:
    _, reader, engine = _fed(install_fake_nvml, counter_refresh_s=1.0)
    plan = _plan(settle_max_s=3.0)
    before = settled_counters(reader, (0, 1), MIB, plan)  # the first read refreshes; the second agrees
    engine.copy(0, 1, COPY, 1)
    ended = wall_clock_us()
    # The old rule, two agreeing reads: both show the counters before the copy (no refresh since).
    agreed = settled_counters(reader, (0, 1), MIB, plan)
    assert counter_deltas(before, agreed)[0] == 0
    # The timestamp rule: every counter must be dated after the copy ended; it waits for the refresh.
    fresh = settled_counters(reader, (0, 1), MIB, plan, since_us=ended)
    assert not isinstance(fresh, str)
    assert all(stamp > ended for sample in fresh for _, stamp in sample.stamps)  # type: ignore[attr-defined]
    assert counter_deltas(before, fresh)[0] == COPY


def test_the_proof_of_a_pair_counts_every_byte_despite_a_slow_refresh(install_fake_nvml: Callable[..., Any]) -> None:
    _, reader, engine = _fed(install_fake_nvml, counter_refresh_s=0.5)
    uni = p2p._Pair(_plan(settle_max_s=2.0), engine, reader).unidirectional(0, 1)
    assert uni.error is None and uni.counters_note is None
    assert uni.bytes_copied is not None and uni.bytes_copied > 0
    assert uni.nvlink_bytes == uni.bytes_copied  # on main: 0, the two stale reads agreed


@pytest.mark.parametrize(
    ("options", "counter"),
    [({}, "NVML field 138, all links"), ({"aggregate_scope_fails": True}, "NVML field 138, link 0")],
)
def test_a_counter_that_never_refreshes_makes_the_proof_unknown_naming_gpu_link_and_field(
    install_fake_nvml: Callable[..., Any], options: dict[str, Any], counter: str
) -> None:
    _, reader, engine = _fed(install_fake_nvml, counter_refresh_s=3600.0, **options)
    uni = p2p._Pair(_plan(settle_max_s=0.2), engine, reader).unidirectional(0, 1)
    assert uni.value is not None and uni.nvlink_bytes is None
    pattern = (
        r"NVML counter not refreshed 0.2 s after the copies ended: nvlink_tx_bytes \(" + re.escape(counter) + r"\) "
        r"of GPU 0000:18:00\.0 \(CUDA device 0\) still dated \d+\.\d{3} s before they ended"
    )
    assert re.fullmatch(pattern, uni.counters_note or ""), uni.counters_note


def test_a_reader_without_timestamps_keeps_the_agreement_rule_and_says_so() -> None:
    def read(gpu: int) -> SimulatedSample:
        return SimulatedSample(0, 0, 0, 0)

    uni = p2p._Pair(_plan(settle_max_s=0.2), SimulatedCopyEngine(), read).unidirectional(0, 1)
    assert uni.nvlink_bytes == 0
    assert uni.counters_note == (
        "counters read without timestamps: settled on two reads 0.02 s apart agreeing, "
        "which a slower counter refresh would undercount"
    )


SUITE = """
[suite]
description = "two H100s, live through a fake NVML whose counters refresh slowly"
thresholds = "h100-sxm"
gpu_count = 2
gpu_models = ["H100"]
nvswitch = true
[topology]
default = "NV18"
[measure]
p2p_size_mib = 1
p2p_iterations = 2
p2p_warmup = 1
latency_iterations = 10
timeout_s = 120
collectives = ["all_reduce"]
"""


@pytest.mark.parametrize("refresh_s", [0.4, 3600.0])
def test_live_path_proof_waits_for_fresh_counters_or_names_the_stale_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, refresh_s: float
) -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.measurements = Measurements()
    engine = f"NvmlFedEngine(gbps=400.0, node_path=node_path, uuids=uuids, counter_refresh_s={refresh_s})"
    serve_live_node(pytester, monkeypatch, node, 2, setup=live_setup(pytester.path / "node.json", engine, [0, 1]))
    monkeypatch.setenv("PYTHONPATH", f"{REPO}:{os.environ['PYTHONPATH']}")  # this checkout's code, also in a worktree
    pytester.makefile(".toml", suite=SUITE)
    result = pytester.runpytest_subprocess(
        f"--nvlink-suite={pytester.path / 'suite.toml'}",
        "-k",
        "path_proof",
        "-p",
        "no:cacheprovider",
        "-p",
        "fake_nvml_plugin",
        timeout=300,
    )
    if refresh_s < 1:
        result.assert_outcomes(passed=2, deselected=result.parseoutcomes()["deselected"])
        return
    result.assert_outcomes(failed=2, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        [
            "*could not determine which path GPU 0 -> GPU 1 used: NVML counter not refreshed 1 s after the copies "
            "ended: nvlink_tx_bytes (NVML field 138, all links) of GPU 0000:18:00.0 (CUDA device 0) still dated *"
        ]
    )
