"""Per-source group verdicts: pass only when every pair passes, failures name peers and the worst figure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_nvlink.config.thresholds import Waiver
from pytest_nvlink.judges.groups import PairSet, combine, pair_records
from pytest_nvlink.plugin.pairs import PER_PAIR_UP_TO_GPUS, grouped_by_source, pair_sets
from pytest_nvlink.verdict import Outcome, Verdict, failed, not_applicable, passed, unknown, waived

THRESHOLD = [("threshold_key", "p2p.unidirectional_min_gbps"), ("threshold_file", "h100-sxm.toml")]
SOURCE = PairSet(((17, 3), (17, 9), (17, 40)), ordered=True, grouped=True, suite_file="suite.toml")


def _figure(value: float, ok: bool) -> Verdict:
    props = [("measured", f"{value:g}"), ("expected", ">= 335.0"), ("unit", "GB/s"), *THRESHOLD]
    make = passed if ok else failed
    return make(f"unidirectional {value:g} GB/s", props, badness=value)


def _judge(verdicts: dict[tuple[int, int], Verdict]) -> Verdict:
    return SOURCE.verdict(lambda src, dst: verdicts[(src, dst)])


def test_all_pairs_pass_passes_naming_the_worst_pair() -> None:
    verdict = _judge({(17, 3): _figure(371.0, True), (17, 9): _figure(360.5, True), (17, 40): _figure(377.0, True)})
    assert verdict.outcome is Outcome.PASS
    assert "all 3 pairs pass" in verdict.message and "GPU 17 -> GPU 9" in verdict.message
    props = dict(verdict.properties)
    assert props["measured"] == "360.5" and props["worst_pair"] == "gpu17-gpu9"
    assert "failing_pairs" not in props


def test_one_failing_peer_fails_naming_it_with_its_reason_and_the_worst_figure() -> None:
    bad = failed(
        "unidirectional 37.2 GB/s below 335.0 GB/s; likely cause: P2P over PCIe",
        _figure(37.2, False).properties,
        badness=37.2,
    )
    verdict = _judge({(17, 3): _figure(371.0, True), (17, 9): bad, (17, 40): _figure(377.0, True)})
    assert verdict.outcome is Outcome.FAIL
    assert "1 of 3 pair(s) fail" in verdict.message
    assert "GPU 17 -> GPU 9: unidirectional 37.2 GB/s below" in verdict.message
    assert "measured 37.2" in verdict.message
    props = dict(verdict.properties)
    assert props["failing_pairs"] == "gpu17-gpu9"
    assert (props["measured"], props["expected"], props["unit"]) == ("37.2", ">= 335.0", "GB/s")
    assert props["threshold_key"] == "p2p.unidirectional_min_gbps"
    records = pair_records(verdict)
    assert records is not None and len(records) == 3
    assert [r["outcome"] for r in records] == ["pass", "fail", "pass"]
    assert records[1] == {
        "src": 17,
        "dst": 9,
        "outcome": "fail",
        "message": bad.message,
        "measured": "37.2",
        "expected": ">= 335.0",
        "unit": "GB/s",
    }


def test_the_worst_of_several_failures_is_the_lowest_figure_against_a_floor() -> None:
    verdict = _judge({(17, 3): _figure(300.0, False), (17, 9): _figure(120.0, False), (17, 40): _figure(377.0, True)})
    props = dict(verdict.properties)
    assert props["worst_pair"] == "gpu17-gpu9" and props["measured"] == "120"
    assert props["failing_pairs"] == "gpu17-gpu3, gpu17-gpu9"


def test_the_worst_latency_is_the_highest_figure_against_a_ceiling() -> None:
    def latency(value: float) -> Verdict:
        props = [("measured", f"{value:g}"), ("expected", "<= 10.0"), ("unit", "us"), *THRESHOLD]
        return failed(f"latency {value:g} us", props, badness=-value)

    verdict = _judge({(17, 3): latency(12.0), (17, 9): latency(25.0), (17, 40): latency(11.0)})
    assert dict(verdict.properties)["worst_pair"] == "gpu17-gpu9"


def test_the_worst_is_ranked_by_the_judges_figure_never_by_the_expected_words() -> None:
    # The words say nothing a parser could rank by ("at least ..."), and one verdict's ">=" words carry no
    # figure from its judge: the ranking is the judge's badness alone.
    def worded(value: float, badness: float | None) -> Verdict:
        props = [("measured", f"{value:g}"), ("expected", "at least 335.0"), ("unit", "GB/s"), *THRESHOLD]
        return failed(f"unidirectional {value:g} GB/s", props, badness=badness)

    unranked = failed("unidirectional 10 GB/s", [("measured", "10"), ("expected", ">= 335.0"), ("unit", "GB/s")])
    verdict = _judge({(17, 3): unranked, (17, 9): worded(300.0, 300.0), (17, 40): worded(120.0, 120.0)})
    props = dict(verdict.properties)
    assert props["worst_pair"] == "gpu17-gpu40" and props["measured"] == "120"


def test_unknown_figures_fail_the_group() -> None:
    props = [("measured", "unknown"), ("expected", ">= 335.0"), ("unit", "GB/s"), *THRESHOLD]
    missing = unknown("the unidirectional P2P bandwidth GPU 17 -> GPU 40", "no measurement recorded", props)
    verdict = _judge({(17, 3): _figure(371.0, True), (17, 9): _figure(372.0, True), (17, 40): missing})
    assert verdict.outcome is Outcome.FAIL
    assert "GPU 17 -> GPU 40: could not determine" in verdict.message


def test_every_pair_waived_for_the_same_reason_is_waived() -> None:
    waiver = Waiver("p2p.latency_max_us", "latency is not accepted on this site", Path("site.toml"))
    verdict = _judge(dict.fromkeys([(17, 3), (17, 9), (17, 40)], waived(waiver)))
    assert verdict.outcome is Outcome.NOT_APPLICABLE
    assert "latency is not accepted on this site" in verdict.message


def test_pairs_excused_for_different_reasons_fail() -> None:
    verdict = _judge(
        {
            (17, 3): not_applicable("suite expects a PCIe path between GPU 17 and GPU 3"),
            (17, 9): not_applicable("suite expects a PCIe path between GPU 17 and GPU 9"),
            (17, 40): not_applicable("suite expects a PCIe path between GPU 17 and GPU 40"),
        }
    )
    assert verdict.outcome is Outcome.FAIL
    assert "mixed outcomes (3 not_applicable)" in verdict.message


def test_passes_mixed_with_excused_pairs_fail_closed() -> None:
    verdict = _judge(
        {
            (17, 3): _figure(371.0, True),
            (17, 9): not_applicable("suite expects a PCIe path between GPU 17 and GPU 9"),
            (17, 40): _figure(377.0, True),
        }
    )
    assert verdict.outcome is Outcome.FAIL
    assert "mixed outcomes (2 pass, 1 not_applicable)" in verdict.message
    assert 'pair_items = "pair"' in verdict.message
    props = dict(verdict.properties)
    assert props["failing_pairs"] == "gpu17-gpu9"
    assert (props["suite_key"], props["suite_file"]) == ("suite.pair_items", "suite.toml")


def test_all_pairs_without_evidence_stay_no_evidence() -> None:
    props = [("measured", "unknown"), ("expected", ">= 335.0"), ("unit", "GB/s"), *THRESHOLD]
    evidence = dataclasses.replace(SOURCE, unknown_is=Outcome.NO_EVIDENCE)
    verdict = evidence.verdict(lambda src, dst: unknown("x", "no file", props))
    assert verdict.outcome is Outcome.NO_EVIDENCE
    assert "no pair has evidence; e.g. GPU 17 -> GPU 3: no evidence for x: no file" in verdict.message
    assert [record["outcome"] for record in pair_records(verdict) or []] == ["no_evidence"] * 3


def test_an_empty_group_fails() -> None:
    assert combine(SOURCE, []).outcome is Outcome.FAIL


def test_one_pair_is_judged_as_itself() -> None:
    single = PairSet(((0, 1),), ordered=True, grouped=False)
    verdict = single.verdict(lambda src, dst: _figure(371.0, True))
    assert single.label == "gpu0-gpu1"
    assert pair_records(verdict) is None


class _Suite:
    def __init__(self, count: int, pair_items: str) -> None:
        self.gpu_count, self.pair_items, self.file = count, pair_items, Path("s.toml")
        self.gpus_per_host: int | None = None

    def crosses_hosts(self, a: int, b: int) -> bool:
        return self.gpus_per_host is not None and a // self.gpus_per_host != b // self.gpus_per_host


@pytest.mark.parametrize(
    ("count", "mode", "grouped"),
    [
        (8, "auto", False),
        (PER_PAIR_UP_TO_GPUS, "auto", False),
        (24, "auto", True),
        (72, "pair", False),
        (4, "source", True),
    ],
)
def test_items_follow_the_domain_size_unless_the_suite_says(count: int, mode: str, grouped: bool) -> None:
    assert grouped_by_source(_Suite(count, mode)) is grouped  # type: ignore[arg-type]


def test_source_items_cover_every_pair_once() -> None:
    suite = _Suite(24, "auto")
    ordered = pair_sets(suite, ordered=True)  # type: ignore[arg-type]
    unordered = pair_sets(suite, ordered=False)  # type: ignore[arg-type]
    assert [s.label for s in ordered[:2]] == ["gpu0->*", "gpu1->*"] and len(ordered) == 24
    assert sum(len(s.pairs) for s in ordered) == 24 * 23
    # An unordered pair belongs to its lower GPU: the last GPU has no higher peer, so no item.
    assert [s.label for s in unordered][-1] == "gpu22-*" and len(unordered) == 23
    assert sum(len(s.pairs) for s in unordered) == 24 * 23 // 2


def test_a_rack_groups_only_pairs_within_a_tray() -> None:
    suite = _Suite(72, "auto")
    suite.gpus_per_host = 4
    ordered = pair_sets(suite, ordered=True)  # type: ignore[arg-type]
    assert len(ordered) == 72 and all(len(s.pairs) == 3 for s in ordered)
    assert ordered[5].pairs == ((5, 4), (5, 6), (5, 7))
    unordered = pair_sets(suite, ordered=False)  # type: ignore[arg-type]
    assert [s.label for s in unordered[:4]] == ["gpu0-*", "gpu1-*", "gpu2-*", "gpu4-*"]
