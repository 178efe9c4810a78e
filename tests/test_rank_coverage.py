"""A collective figure or NCCL log counts only when its ranks are the suite's GPUs (hole 5 of issue 7).

A busbw over 2 GPUs passes an 8-GPU floor easily and says nothing about the other 6; a 2-rank NCCL
log cannot show which transport the other GPUs use. Each must fail, saying which GPUs took part.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import EVIDENCE, SNAPSHOTS, serve_live_node, tiny_collective_thresholds

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.judges import collectives
from pytest_nvlink.judges.context import Context
from pytest_nvlink.measure import live
from pytest_nvlink.measure.collectives import CollectiveRun
from pytest_nvlink.model import CollectiveMeasurement, Gpu, Measurements, Node
from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
NCCL_TESTS = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"


def _context(node: Node) -> Context:
    suite = load_suite("h100-8gpu")
    return Context(node, suite, load_thresholds(suite.thresholds_ref))


def _healthy() -> Node:
    return load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")


def _all_reduce(node: Node) -> CollectiveMeasurement:
    return next(m for m in node.measurements.collectives if m.op == "all_reduce")


def _replay(pytester: pytest.Pytester, node: Node, *args: str) -> pytest.RunResult:
    path = pytester.path / "node.json"
    save_snapshot(node, path)
    return pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-replay={path}", "-p", "no:cacheprovider", *args)


# --- the judge ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("world", "rank_gpus", "gap"),
    [
        (2, [0, 1], "2 of 8 GPUs took part"),
        (2, None, "2 of 8 GPUs took part"),
        (16, None, "16 of 8 GPUs took part"),
        (8, [0, 1, 2, 3, 4, 5, 6, 6], "GPU(s) 7 not covered; GPU(s) 6 ran more than one rank"),
        (8, [0, 1, 2, 3, 4, 5, 6, 9], "GPU(s) 7 not covered; GPU(s) 9 are not in the suite"),
    ],
)
def test_rank_gap_names_the_gpus(world: int, rank_gpus: list[int] | None, gap: str) -> None:
    node = _healthy()
    m = dataclasses.replace(_all_reduce(node), world_size=world, rank_gpus=rank_gpus)
    assert collectives.rank_gap(_context(node), m) == gap


def test_all_the_suites_gpus_have_no_gap_known_or_not() -> None:
    node = _healthy()
    m = _all_reduce(node)
    assert m.rank_gpus == list(range(8))
    assert collectives.rank_gap(_context(node), m) is None
    # Order does not matter (NCCL ranks need not follow GPU numbers), and unknown identity counts by number.
    assert collectives.rank_gap(_context(node), dataclasses.replace(m, rank_gpus=[7, 6, 5, 4, 3, 2, 1, 0])) is None
    assert collectives.rank_gap(_context(node), dataclasses.replace(m, rank_gpus=None)) is None


def test_a_full_figure_wins_over_a_partial_one() -> None:
    node = _healthy()
    full = _all_reduce(node)
    partial = dataclasses.replace(full, world_size=2, rank_gpus=[0, 1], busbw_gbps=900.0)
    verdict = collectives.collective(_context(node), "all_reduce", [partial, full])
    assert verdict.outcome is Outcome.PASS
    assert f"busbw {full.busbw_gbps:.1f} GB/s over 8 rank(s) on GPU(s) 0, 1, 2, 3, 4, 5, 6, 7" in verdict.message


# --- the whole plugin ---------------------------------------------------------------------------


def test_two_rank_collectives_in_a_snapshot_fail_every_busbw(pytester: pytest.Pytester) -> None:
    node = _healthy()
    node.measurements.collectives = [
        dataclasses.replace(m, world_size=2, rank_gpus=[0, 1]) for m in node.measurements.collectives
    ]
    result = _replay(pytester, node, "-k", "collective_busbw")
    result.assert_outcomes(failed=5, deselected=383)
    result.stdout.fnmatch_lines(
        [
            "*all_reduce: busbw * GB/s was measured over 2 rank(s) on GPU(s) 0, 1, but the suite expects all 8 GPUs "
            "(h100-8gpu.toml:suite.gpu_count): 2 of 8 GPUs took part; * likely cause: a GPU lost or hidden by "
            "CUDA_VISIBLE_DEVICES*"
        ]
    )


def test_a_rank_doubled_on_one_gpu_fails(pytester: pytest.Pytester) -> None:
    node = _healthy()
    node.measurements.collectives = [
        dataclasses.replace(m, rank_gpus=[0, 1, 2, 3, 4, 5, 6, 6]) for m in node.measurements.collectives
    ]
    result = _replay(pytester, node, "-k", "collective_busbw and all_gather")
    result.assert_outcomes(failed=1, deselected=387)
    result.stdout.fnmatch_lines(["*over 8 rank(s) on GPU(s) 0, 1, 2, 3, 4, 5, 6, 6, *GPU(s) 7 not covered*"])


def test_nccl_log_of_two_ranks_in_a_snapshot_fails_the_transport_audit(pytester: pytest.Pytester) -> None:
    node = _healthy()
    audit = node.measurements.nccl
    assert audit is not None
    audit.channels = [c for c in audit.channels if {c.src_dev, c.dst_dev} <= {0, 1}]
    assert audit.channels
    result = _replay(pytester, node, "-k", "nccl_transport")
    result.assert_outcomes(failed=1, deselected=387)
    result.stdout.fnmatch_lines(
        ["*NCCL transport audit incomplete: the log covers 2 rank(s) (0, 1) on GPU(s) 0, 1*no channel of GPU(s) 2, 3*"]
    )


def _busbw_at(line: str, ranks: int) -> str:
    """A result row with busbw = algbw x 2(n-1)/n at ``ranks`` (all_reduce), so the rows agree with the rank count."""
    tokens = line.split()
    if len(tokens) != 13 or not tokens[0].isdigit():
        return line
    for algbw in (-7, -3):
        tokens[algbw + 1] = f"{float(tokens[algbw]) * 2 * (ranks - 1) / ranks:.2f}"
    return "  ".join(tokens)


def _nccl_tests_over(pytester: pytest.Pytester, ngpus: int) -> Path:
    lines = (EVIDENCE / NCCL_TESTS).read_text().split("\n")
    kept = [_busbw_at(line, ngpus) for line in lines if not any(f"#  Rank  {r} " in line for r in range(ngpus, 8))]
    # The column check that tells the op from busbw/algbw assumes 8 ranks, so name the op as nccl-tests does.
    text = "# Collective test starting: all_reduce_perf\n" + "\n".join(kept).replace("nGpus 8", f"nGpus {ngpus}")
    path = pytester.path / "all_reduce_perf.txt"
    path.write_text(text)
    return path


def test_nccl_tests_over_two_gpus_fails_the_8_gpu_busbw(pytester: pytest.Pytester) -> None:
    path = _nccl_tests_over(pytester, 2)
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "--nvlink-evidence-missing=skip", "-k", "all_reduce"
    )
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        ["*all_reduce: busbw * GB/s was measured over 2 rank(s) on GPU(s) 0, 1, but the suite expects all 8 GPUs*"]
    )


def test_nccl_tests_over_all_gpus_records_them(pytester: pytest.Pytester) -> None:
    path = _nccl_tests_over(pytester, 8)
    from pytest_nvlink.sources.evidence.load import load_evidence

    results = load_evidence([path]).measurements.collectives
    assert results
    assert all(m.rank_gpus == list(range(8)) for m in results)


# --- live: a lost or hidden GPU shrinks the ring ------------------------------------------------


class _FakeSession:
    """Stands in for MeasurementSession: one rank per GPU handed over, as the real one runs them."""

    def __init__(self, measure: object, *, gpus: list[int] | None, world_size: int | None, **_: object) -> None:
        self.world = (world_size or 0) if gpus is None else len(gpus)

    def collective_run(self) -> CollectiveRun:
        return CollectiveRun([CollectiveMeasurement("all_reduce", 4096 << 20, self.world, 1.0, 500.0, 900.0, True)])


@pytest.mark.parametrize(
    ("backend", "lost", "hidden", "rank_gpus"),
    [
        ("nccl", 3, None, [0, 1, 2, 4, 5, 6, 7]),
        ("nccl", None, 5, [0, 1, 2, 3, 4, 6, 7]),
        ("gloo", 3, None, None),
    ],
)
def test_live_collectives_record_the_gpus_of_their_ranks(
    monkeypatch: pytest.MonkeyPatch, backend: str, lost: int | None, hidden: int | None, rank_gpus: list[int] | None
) -> None:
    monkeypatch.setattr(live, "MeasurementSession", _FakeSession)
    node = Node("live", gpus=[Gpu(i, problem="NVML: GPU is lost" if i == lost else None) for i in range(8)])
    cuda_of = {i: i for i in range(8) if i != hidden}
    ctx = _context(node)
    results, _ = live.measure_collectives(node, ctx.suite, ctx.thresholds, cuda_of, lambda _: None, backend=backend)
    assert [(m.world_size, m.rank_gpus) for m in results] == [(7, rank_gpus)]
    verdict = collectives.collective(ctx, "all_reduce", results)
    assert verdict.outcome is Outcome.FAIL
    assert "7 of 8 GPUs took part" in verdict.message


LIVE_SUITE = """
[suite]
description = "three H100 on one NVSwitch, for the lost-GPU ring test"
thresholds = "tiny.toml"
gpu_count = 3
gpu_models = ["H100"]
nvswitch = true
[topology]
default = "NV18"
[measure]
collective_iterations = 2
collective_warmup = 1
timeout_s = 120
collectives = ["all_reduce"]
"""
TINY = tiny_collective_thresholds("all_reduce")


def test_live_ring_without_a_lost_gpu_fails_the_busbw(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _healthy()
    node.measurements = Measurements()
    serve_live_node(pytester, monkeypatch, node, 3, options=", lost_gpus=[2]")
    pytester.makefile(".toml", suite=LIVE_SUITE, tiny=TINY)
    result = pytester.runpytest_subprocess(
        f"--nvlink-suite={pytester.path / 'suite.toml'}",
        "--nvlink-backend=gloo",
        "-k",
        "collective_busbw",
        "-p",
        "no:cacheprovider",
        "-p",
        "fake_nvml_plugin",
        timeout=300,
    )
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        [
            "*all_reduce: busbw * GB/s was measured over 2 rank(s), but the suite expects all 3 GPUs"
            "*2 of 3 GPUs took part*"
        ]
    )
