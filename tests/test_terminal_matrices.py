"""The terminal's pair matrices: full up to 16 GPUs, per-GPU rows naming what differs above that."""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic_node import degrade_pair, synthetic_node, write_synthetic

from pytest_nvlink.model import Node
from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.audit import AuditCounts
from pytest_nvlink.record.items import ItemLog, ItemResult
from pytest_nvlink.record.results import Results
from pytest_nvlink.record.run import Run, RunOptions
from pytest_nvlink.report.html import render_html
from pytest_nvlink.report.matrices import p2p_lines, topology_lines


def _run(tmp_path: Path, node: Node, count: int) -> Run:
    files = write_synthetic(tmp_path, count, node=node)
    return build_run(RunOptions(suite=str(files.suite), replay=files.snapshot), _no_probe)


def judged(pytester: pytest.Pytester, run: Run, *args: str) -> list[ItemResult]:
    """The results record's items of the run's P2P checks, judged by the plugin itself."""
    suite, replay = f"--nvlink-suite={run.suite.file}", f"--nvlink-replay={run.options.replay}"
    recorded = pytester.inline_run(suite, replay, "-k", "test_p2p_", "-p", "no:cacheprovider", *args)
    log = ItemLog()
    for report in recorded.getreports("pytest_runtest_logreport"):
        log.add(report)
    return log.results()


def _no_probe() -> Node:
    raise AssertionError("a replay must not probe")


def _with_wrong_path(node: Node, a: int, b: int, path: str) -> Node:
    for pair in node.paths or []:
        if (pair.a, pair.b) == (a, b):
            pair.path = path
    return node


def test_up_to_16_gpus_the_matrices_are_printed_whole(tmp_path: Path, pytester: pytest.Pytester) -> None:
    node = synthetic_node(16)
    degrade_pair(node, 5, 9)
    run = _run(tmp_path, _with_wrong_path(node, 2, 7, "PIX"), 16)
    topology = topology_lines(run)
    assert topology[0].startswith("topology (nvidia-smi topo -m layout")
    assert len(topology) == 1 + 17 + 1  # head, header row and 16 GPU rows, blank
    assert "PIX!NV18" in topology[1 + 1 + 2] and "PIX!NV18" in topology[1 + 1 + 7]
    p2p = p2p_lines(run, judged(pytester, run))
    assert p2p[1].split()[0] == "src\\dst" and len(p2p) == 1 + 17 + 2
    assert "37.2!" in p2p[2 + 5]
    assert p2p[-2] == "worst unidirectional pair: GPU 5 -> GPU 9 at 37.2 GB/s"


def test_above_16_gpus_a_healthy_domain_prints_the_spread_and_no_matrix(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    run = _run(tmp_path, synthetic_node(24), 24)
    assert topology_lines(run) == [
        "topology of 24 GPUs, pairs per path class ('A!B' = measured A where the suite expects B, '-' = another "
        "host, '?' = not reported; the full matrix is in the JSON and HTML reports): NV18 x276",
        "every reported pair has the path class the suite expects",
        "",
    ]
    assert p2p_lines(run, judged(pytester, run)) == [
        "P2P unidirectional GB/s over 552 ordered pairs of 24 GPUs: lowest 373.0, median 373.0, highest 373.0, "
        "floor 335 GB/s (the full matrix is in the JSON and HTML reports):",
        "no source GPU has a failing pair or a failed measurement",
        "worst unidirectional pair: GPU 0 -> GPU 1 at 373.0 GB/s",
        "",
    ]


def test_above_16_gpus_each_gpu_with_a_differing_cell_or_low_figure_gets_a_row(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    node = synthetic_node(24)
    degrade_pair(node, 17, 3)
    degrade_pair(node, 17, 20, uni_gbps=120.0)
    for m in node.measurements.p2p:
        if (m.src, m.dst, m.kind) == (4, 6, "unidirectional"):
            m.value, m.error = None, "copy timed out"
    run = _run(tmp_path, _with_wrong_path(node, 2, 7, "PIX"), 24)

    topology = topology_lines(run)
    assert topology[0].endswith("reports): NV18 x275, PIX!NV18 x1")
    rows = {line.split()[0]: line.split() for line in topology[3:-1]}
    assert set(rows) == {"GPU2", "GPU7"}
    assert rows["GPU2"][1:] == ["1", "GPU7", "PIX!NV18"] and rows["GPU7"][1:] == ["1", "GPU2", "PIX!NV18"]

    p2p = p2p_lines(run, judged(pytester, run))
    assert p2p[0].startswith("P2P unidirectional GB/s over 551 ordered pairs of 24 GPUs: lowest 37.2, median 373.0")
    rows = {line.split()[0]: line.split() for line in p2p[3:-2]}
    assert rows == {"GPU4": ["GPU4", "23", "0", "1"], "GPU17": ["GPU17", "23", "2", "0", "37.2", "(GPU3)"]}
    assert p2p[-2] == "worst unidirectional pair: GPU 17 -> GPU 3 at 37.2 GB/s"


def test_a_pair_failing_as_impossibly_fast_is_marked_in_the_matrix_and_the_heatmap(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    # 5000 GB/s is far above the floor and far beyond what 18 NVLinks carry: the pair fails as a timing error,
    # and its mark comes from that verdict, not from a comparison with the floor.
    node = synthetic_node(8)
    for m in node.measurements.p2p:
        if (m.src, m.dst, m.kind) == (1, 2, "unidirectional"):
            m.value = 5000.0
    run = _run(tmp_path, node, 8)
    items = judged(pytester, run)
    verdict = next(item for item in items if item.nodeid.endswith("test_p2p_unidirectional[gpu1-gpu2]"))
    assert verdict.outcome == "fail" and "cannot be true" in verdict.message
    p2p = p2p_lines(run, items)
    assert p2p[0] == "P2P unidirectional GB/s ('!' = the pair fails its check):"
    row = p2p[2 + 1].split()
    assert row[0] == "GPU1" and row[3] == "5000.0!"
    assert sum(cell.endswith("!") for line in p2p[2:10] for cell in line.split()) == 1
    page = render_html(Results(run, items, "partial audit: 1 of 1 checks had evidence", AuditCounts(1, 1)))
    assert page.count(">5000.0!</text>") == 1 and "!</text>" not in page.replace(">5000.0!</text>", "")
