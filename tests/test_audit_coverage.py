"""A run must judge something to pass (holes 13 and 14 of issue 7).

An nvlink-marked test that never hands a verdict to ``nvlink_judge`` would pass every node; a run
whose checks all lacked evidence would exit 0 with "N skipped". Both fail, and every run says how
many checks had evidence.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest
from conftest import EVIDENCE

from pytest_nvlink.record.audit import UNJUDGED, AuditTally, evidence_header_line
from pytest_nvlink.sources.evidence.load import load_evidence

TOPO = EVIDENCE / "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
USER_TESTS = """
import pytest
from pytest_nvlink.judges import inventory

@pytest.mark.nvlink("inventory")
def test_forgets_to_judge(nvlink_context):
    inventory.gpu_count(nvlink_context)  # the verdict is built, then dropped

@pytest.mark.nvlink("inventory")
def test_judges(nvlink_context, nvlink_judge):
    nvlink_judge(inventory.gpu_count(nvlink_context))

def test_not_an_nvlink_check():
    pass
"""


def _report(nodeid: str, when: str, outcome: str | None, passed: bool = True, nvlink: bool = True) -> SimpleNamespace:
    props = [("suite", "x")] + ([("outcome", outcome)] if outcome else [])
    keywords = {"nvlink": 1} if nvlink else {}
    return SimpleNamespace(nodeid=nodeid, when=when, user_properties=props, keywords=keywords, passed=passed)


def test_tally_counts_verdicts_made_on_facts() -> None:
    tally = AuditTally()
    for report in (
        _report("a", "call", "pass"),
        _report("b", "call", "fail"),
        _report("c", "call", "no_evidence"),
        _report("d", "call", "not_applicable"),
        _report("e", "call", None),  # never judged
        _report("f", "setup", None, passed=False),  # setup error: the call never ran
        _report("a", "teardown", None),
        _report("g", "call", "pass", nvlink=False),  # not an nvlink check
    ):
        tally.add(report)
    assert tally.outcomes == {
        "a": "pass",
        "b": "fail",
        "c": "no_evidence",
        "d": "not_applicable",
        "e": UNJUDGED,
        "f": UNJUDGED,
    }
    assert (tally.judged, tally.applicable) == (2, 5)
    assert not tally.judged_nothing()
    assert tally.line() == (
        "partial audit: 2 of 5 checks had evidence (1 without evidence, 2 never judged, 1 not applicable)"
    )


def test_tally_of_skips_only_judged_nothing() -> None:
    tally = AuditTally()
    tally.add(_report("a", "call", "no_evidence"))
    tally.add(_report("b", "call", "not_applicable"))
    assert tally.judged_nothing()
    assert not AuditTally().judged_nothing()  # no nvlink check ran at all: nothing to refuse


def test_evidence_header_names_the_families_covered() -> None:
    line = evidence_header_line(load_evidence([TOPO]))
    assert line.startswith("partial audit: evidence covers 2 of 11 check families (inventory, paths); ")
    assert "no evidence for p2p, nvlinks, nvlink_errors, p2p_bandwidth, host_link, collectives, nccl_transport" in line


# --- hole 13: an nvlink test that never judges --------------------------------------------------


def test_nvlink_test_that_never_judges_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    xml_path = pytester.path / "user.xml"
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", f"--junitxml={xml_path}", "test_user.py"
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_forgets_to_judge is marked nvlink but never called nvlink_judge(verdict), so it judged nothing "
            "and cannot pass; hand the check's Verdict to the nvlink_judge fixture*"
        ]
    )
    cases = {case.get("name"): case for case in ET.parse(xml_path).getroot().iter("testcase")}
    failure = cases["test_forgets_to_judge"].find("failure")
    assert failure is not None and "never called nvlink_judge" in failure.get("message", "")
    assert cases["test_judges"].find("failure") is None
    assert cases["test_not_an_nvlink_check"].find("failure") is None
    result.stdout.fnmatch_lines(["partial audit: 1 of 2 checks had evidence (1 never judged)"])


def test_without_a_suite_the_marker_alone_changes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="import pytest\n@pytest.mark.nvlink('inventory')\ndef test_x():\n    pass\n")
    result = pytester.runpytest("test_user.py")
    result.assert_outcomes(passed=1)
    assert "partial audit" not in result.stdout.str()


# --- hole 14: a run that judged nothing ---------------------------------------------------------


def test_skip_mode_with_evidence_that_covers_no_selected_check_exits_non_zero(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu",
        f"--nvlink-evidence={TOPO}",
        "--nvlink-evidence-missing=skip",
        "-k",
        "nvlink_errors or collective",
    )
    result.assert_outcomes(skipped=14, deselected=result.parseoutcomes()["deselected"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "nvlink partial audit: evidence covers 2 of 11 check families (inventory, paths); no evidence for *",
            "partial audit: 0 of 14 checks had evidence (14 without evidence)",
            "pytest-nvlink: no check was judged (partial audit: 0 of 14 checks had evidence (14 without evidence)): "
            "this run says nothing about the node, so it fails*",
        ]
    )


def test_partial_evidence_run_passes_and_says_how_partial(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu", f"--nvlink-evidence={TOPO}", "--nvlink-evidence-missing=skip"
    )
    result.assert_outcomes(passed=29, skipped=359)
    assert result.ret == pytest.ExitCode.OK
    # 359 skips: 351 without evidence (8 of them test_xid: no kernel log, 8 test_host_link: no host-link figures),
    # and the 8 fabric checks a100-sxm4
    # does not require (fabric.required).
    result.stdout.fnmatch_lines(
        [
            "nvlink partial audit: evidence covers 2 of 11 check families*",
            "partial audit: 29 of 380 checks had evidence (351 without evidence, 8 not applicable)",
        ]
    )


def test_full_replay_states_its_counts(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", "-k", "test_path")
    result.assert_outcomes(passed=28, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(["partial audit: 28 of 28 checks had evidence"])
    assert "evidence covers" not in result.stdout.str()
