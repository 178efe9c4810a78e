"""Judges decide from the node's facts only: what an unknown counts as is the plugin's, decided once.

No judge reads ``Node.source``; a fact the source could not give is Outcome.UNKNOWN, and
``verdict.resolved`` turns it into today's failure ("could not determine ...") or, when the run
judges evidence files, "no evidence for ...".
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.judges import bandwidth, collectives, inventory, nvlink, platform
from pytest_nvlink.judges.context import Context
from pytest_nvlink.judges.groups import PairSet, pair_records
from pytest_nvlink.plugin.kit import unknown_is
from pytest_nvlink.record.run import RunOptions
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome, Unknown, Verdict, failed, passed, resolved, unknown

JUDGES = Path(__file__).resolve().parents[1] / "pytest_nvlink" / "judges"
SOURCES = ("live", "replay", "evidence")
PROPS = [("measured", "unknown"), ("expected", ">= 335.0"), ("unit", "GB/s"), ("threshold_key", "k")]


def _is_node(expression: ast.expr) -> bool:
    """``node``, or ``<anything>.node`` (``ctx.node``, ``context.node``, ``self.node``)."""
    if isinstance(expression, ast.Name):
        return expression.id == "node"
    return isinstance(expression, ast.Attribute) and expression.attr == "node"


def node_source_reads(text: str) -> list[int]:
    """Lines of ``text`` that read the node's source: ``<node>.source`` or ``getattr(<node>, "source")``."""
    lines = []
    for found in ast.walk(ast.parse(text)):
        if isinstance(found, ast.Attribute) and found.attr == "source" and _is_node(found.value):
            lines.append(found.lineno)
        if (
            isinstance(found, ast.Call)
            and isinstance(found.func, ast.Name)
            and found.func.id == "getattr"
            and len(found.args) >= 2
            and _is_node(found.args[0])
            and isinstance(found.args[1], ast.Constant)
            and found.args[1].value == "source"
        ):
            lines.append(found.lineno)
    return lines


def test_no_judge_reads_the_nodes_source() -> None:
    modules = sorted(JUDGES.glob("*.py"))
    assert len(modules) >= 10  # the package is where it is
    reads = {f"{path.name}:{line}" for path in modules for line in node_source_reads(path.read_text(encoding="utf-8"))}
    assert not reads, f"judges read Node.source (the plugin resolves unknowns): {sorted(reads)}"


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("if ctx.node.source == 'evidence': pass", [1]),
        ("x = node.source", [1]),
        ("x = context.node.source", [1]),
        ("x = self.node.source", [1]),
        ("x = getattr(ctx.node, 'source')", [1]),
        ("x = m.source\ny = listed.source\nz = ctx.node.provenance", []),  # a measurement's file is a fact
    ],
)
def test_the_source_check_finds_what_it_looks_for(text: str, lines: list[int]) -> None:
    assert node_source_reads(text) == lines


def _context() -> Context:
    suite = load_suite("h100-8gpu")
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    node.gpus[0].fabric = None
    node.driver_version = None
    return Context(node, suite, load_thresholds(suite.thresholds_ref))


UNKNOWNS: dict[str, Callable[[Context], Verdict]] = {
    "p2p_figure": lambda ctx: bandwidth.p2p_figure(ctx, 0, 1, "unidirectional", None),
    "path_proof": lambda ctx: bandwidth.path_proof(ctx, 0, 1, None),
    "fabric": lambda ctx: platform.fabric(ctx, 0),
    "driver": inventory.driver,
    "nccl_transport": lambda ctx: collectives.nccl_transport(ctx, None),
    "collective": lambda ctx: collectives.collective(ctx, "all_reduce", []),
    "nvlink_errors": lambda ctx: nvlink.nvlink_errors(ctx, 0),
}


@pytest.mark.parametrize("judge", sorted(UNKNOWNS))
def test_a_judge_gives_the_same_unknown_whatever_the_source(judge: str) -> None:
    base = _context()
    if judge == "nvlink_errors":
        for link in base.node.gpus[0].nvlinks or []:
            link.errors = None
    verdicts = []
    for source in SOURCES:
        ctx = copy.deepcopy(base)
        ctx.node.source = source
        verdicts.append(UNKNOWNS[judge](ctx))
    first = verdicts[0]
    assert isinstance(first, Unknown) and first.outcome is Outcome.UNKNOWN, first.message
    assert first.what and first.reason
    assert all(verdict == first for verdict in verdicts[1:])  # what, reason, sentence and properties alike
    # What the plugin records, by the one policy: as before the judges stopped reading the source.
    assert resolved(first, unknown_is("live")).message.startswith(f"could not determine {first.what}: ")
    assert resolved(first, unknown_is("replay")).outcome is Outcome.FAIL
    evidence = resolved(first, unknown_is("evidence"))
    assert evidence.outcome is Outcome.NO_EVIDENCE
    assert evidence.message == f"no evidence for {first.what}: {first.reason}"


def test_the_resolver_words_an_unknown_as_a_failure_or_as_no_evidence() -> None:
    verdict = unknown("the NVLink state of GPU 0", "the source does not report it", PROPS)
    assert verdict.outcome is Outcome.UNKNOWN
    as_failure = resolved(verdict, Outcome.FAIL)
    assert as_failure == Verdict(
        Outcome.FAIL, "could not determine the NVLink state of GPU 0: the source does not report it", PROPS
    )
    as_no_evidence = resolved(verdict, Outcome.NO_EVIDENCE)
    assert as_no_evidence == Verdict(
        Outcome.NO_EVIDENCE, "no evidence for the NVLink state of GPU 0: the source does not report it", PROPS
    )
    assert unknown_is("evidence") is Outcome.NO_EVIDENCE
    assert unknown_is("live") is unknown_is("replay") is Outcome.FAIL


def test_an_unknown_with_its_own_failure_sentence_keeps_it() -> None:
    verdict = unknown("GPU 3's PCIe width", None, PROPS, failure="GPU 3: changed since the baseline: ...")
    assert resolved(verdict, Outcome.FAIL).message == "GPU 3: changed since the baseline: ..."
    assert resolved(verdict, Outcome.NO_EVIDENCE).message == "no evidence for GPU 3's PCIe width"


def test_the_resolver_leaves_other_verdicts_alone_and_refuses_other_policies() -> None:
    done = failed("slow", PROPS)
    assert resolved(done, Outcome.NO_EVIDENCE) is done
    with pytest.raises(ValueError, match="not pass"):
        resolved(unknown("x", "y", []), Outcome.PASS)


def test_a_groups_unknown_pair_ranks_as_its_resolved_outcome() -> None:
    group = PairSet(((17, 3), (17, 9), (17, 40)), ordered=True, grouped=True, suite_file="suite.toml")
    verdicts = {
        (17, 3): passed("ok", [("measured", "371"), ("expected", ">= 335.0"), ("unit", "GB/s")]),
        (17, 9): passed("ok", [("measured", "372"), ("expected", ">= 335.0"), ("unit", "GB/s")]),
        (17, 40): unknown("the figure GPU 17 -> GPU 40", "no measurement recorded", PROPS),
    }

    def judge(src: int, dst: int) -> Verdict:
        return verdicts[src, dst]

    as_failure = group.verdict(judge)
    assert as_failure.outcome is Outcome.FAIL and "1 of 3 pair(s) fail" in as_failure.message
    assert "GPU 17 -> GPU 40: could not determine the figure" in as_failure.message
    evidence = dataclasses.replace(group, unknown_is=Outcome.NO_EVIDENCE).verdict(judge)
    assert evidence.outcome is Outcome.FAIL and "mixed outcomes (2 pass, 1 no_evidence)" in evidence.message
    records = pair_records(evidence) or []
    assert [record["outcome"] for record in records] == ["pass", "pass", "no_evidence"]
    one = PairSet(((17, 40),), ordered=True, grouped=False, unknown_is=Outcome.NO_EVIDENCE)
    assert one.verdict(judge).outcome is Outcome.NO_EVIDENCE


def test_totals_only_wording_follows_whether_the_run_measures_the_node() -> None:
    base = _context()
    base.node.error_window_s = None
    for gpu in base.node.gpus:
        for link in gpu.nvlinks or []:
            link.errors_run = None
    said = {}
    for source in SOURCES:
        for measures in (True, False):
            ctx = dataclasses.replace(copy.deepcopy(base), measures_node=measures)
            ctx.node.source = source
            verdict = nvlink.nvlink_errors(ctx, 1)
            assert verdict.ok, verdict.message
            said[source, measures] = verdict.message
    assert {said[source, True] for source in SOURCES} == {said["live", True]}
    assert {said[source, False] for source in SOURCES} == {said["live", False]}
    assert "no increase during a run was recorded (no measurement campaign ran)" in said["live", True]
    assert "no increase during a run was recorded (the source holds totals only)" in said["live", False]


@pytest.mark.parametrize(("source", "measures"), [("live", True), ("replay", False), ("evidence", False)])
def test_a_run_measures_its_node_only_when_it_probed_it(source: str, measures: bool) -> None:
    from pytest_nvlink.model import Node
    from pytest_nvlink.record.run import Run

    suite = load_suite("h100-8gpu")
    run = Run(RunOptions(suite="h100-8gpu"), Node(source=source), suite, load_thresholds(suite.thresholds_ref))
    assert run.context.measures_node is measures


def test_files_that_list_no_gpus_cannot_say_one_is_missing_but_a_probe_can(tmp_path: Path) -> None:
    from conftest import sample

    from pytest_nvlink.model import Node
    from pytest_nvlink.sources.evidence.load import load_evidence

    log = tmp_path / "nccl.txt"
    log.write_text(sample("nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt"), encoding="utf-8")
    suite = load_suite("h100-8gpu")
    thresholds = load_thresholds(suite.thresholds_ref)
    files = Context(load_evidence([log]), suite, thresholds)  # an NCCL log alone: no GPU listed
    for verdict in (inventory.gpu_count(files), nvlink.nvlink_active_links(files, 0)):
        assert verdict.outcome is Outcome.UNKNOWN
        assert resolved(verdict, unknown_is("evidence")).message.endswith(": the evidence files list no GPUs")
    probed = Context(Node(source="live"), suite, thresholds)  # NVML counted no GPU: that is an answer
    assert inventory.gpu_count(probed).outcome is Outcome.FAIL
    assert "expected 8 GPUs" in inventory.gpu_count(probed).message
