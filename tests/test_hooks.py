"""A site's conftest adds a check and report fields through the plugin's hooks, importing nothing of ours."""

from __future__ import annotations

import inspect
import json
import re

import jsonschema
import pytest

from pytest_nvlink.plugin import hookspecs
from pytest_nvlink.record.results import ReportSection, report_sections
from pytest_nvlink.report.json_results import load_schema

REPLAY = ("-p", "no:cacheprovider", "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-degraded")

SITE_CONFTEST = """
import json

seen = []


def pytest_nvlink_verdict(item, verdict):
    seen.append((item.nodeid, verdict.outcome.value))
    item.user_properties.append(("site_seen", "yes"))


def pytest_nvlink_report_sections(results):
    nvlink = [item for item in results.items]
    return [("site asset tags", [f"verdicts seen: {len(seen)}", f"record items: {len(nvlink)}", "rack <B7>"])]


def pytest_unconfigure(config):
    with open("seen.json", "w") as out:
        json.dump(seen, out)
"""


def _run(pytester: pytest.Pytester, conftest: str, *args: str) -> pytest.RunResult:
    pytester.makeconftest(conftest)
    json_file, html_file = pytester.path / "r.json", pytester.path / "r.html"
    return pytester.runpytest_subprocess(*REPLAY, f"--nvlink-json={json_file}", f"--nvlink-report={html_file}", *args)


def test_the_verdict_hook_sees_every_verdict_and_the_section_reaches_every_report(pytester: pytest.Pytester) -> None:
    result = _run(pytester, SITE_CONFTEST)
    assert result.ret == 1  # the degraded node fails; the hooks change nothing of that
    seen = json.loads((pytester.path / "seen.json").read_text())
    document = json.loads((pytester.path / "r.json").read_text())
    jsonschema.validate(document, load_schema())
    judged = [item for item in document["items"] if item["outcome"] != "unjudged"]
    assert len(seen) == len(judged) == len(document["items"]) > 20
    assert sorted(nodeid for nodeid, _ in seen) == sorted(item["nodeid"] for item in judged)
    assert {outcome for _, outcome in seen} >= {"pass", "fail"}
    assert {item["outcome"] for item in judged} == {outcome for _, outcome in seen}
    assert all(item["properties"]["site_seen"] == "yes" for item in judged)  # a property the hook added
    lines = [f"verdicts seen: {len(seen)}", f"record items: {len(judged)}", "rack <B7>"]
    assert document["sections"] == [{"title": "site asset tags", "lines": lines}]
    result.stdout.fnmatch_lines(["*pytest-nvlink summary*", "*- site asset tags -*", *lines])
    html = (pytester.path / "r.html").read_text()
    assert "<h2>site asset tags</h2>" in html
    assert f"verdicts seen: {len(seen)}" in html and "rack &lt;B7&gt;" in html  # escaped like every value


def test_a_site_check_fails_an_item_its_verdict_passed(pytester: pytest.Pytester) -> None:
    conftest = """
import pytest

def pytest_nvlink_verdict(item, verdict):
    if item.name == "test_gpu_count" and verdict.ok:
        pytest.fail("site rule: asset tag missing", pytrace=False)
"""
    pytester.makeconftest(conftest)
    json_file = pytester.path / "r.json"
    healthy = ("-p", "no:cacheprovider", "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy")
    result = pytester.runpytest_subprocess(*healthy, f"--nvlink-json={json_file}")
    result.assert_outcomes(failed=1, passed=result.parseoutcomes()["passed"])
    result.stdout.fnmatch_lines(["*test_gpu_count*", "site rule: asset tag missing"])
    document = json.loads(json_file.read_text())
    assert document["verdict"] == "FAIL"
    (item,) = [item for item in document["items"] if item["check"] == "test_gpu_count"]
    assert (item["outcome"], item["pytest_outcome"]) == ("pass", "failed")  # the verdict as judged, and the failure


def test_no_sections_no_key_and_a_broken_hook_is_reported(pytester: pytest.Pytester) -> None:
    quiet = _run(pytester, "def pytest_nvlink_report_sections(results):\n    return None\n")
    assert quiet.ret == 1
    assert "sections" not in json.loads((pytester.path / "r.json").read_text())
    broken = _run(pytester, "def pytest_nvlink_report_sections(results):\n    return [('title', 'not a list')]\n")
    assert broken.ret == pytest.ExitCode.INTERNAL_ERROR
    broken.stdout.fnmatch_lines(["pytest-nvlink: could not add the report sections of a *hook: TypeError(*"])
    document = json.loads((pytester.path / "r.json").read_text())
    assert "sections" not in document  # the reports are still written, without the broken sections
    jsonschema.validate(document, load_schema())


def test_a_conftest_with_the_hooks_loads_in_an_inert_run(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SITE_CONFTEST)
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert json.loads((pytester.path / "seen.json").read_text()) == []


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        ([("t", "one line")], "a section is"),
        ([("t", ["a", 3])], "a section is"),
        ([("t",)], "a section is"),
        ([(1, ["a"])], "a section is"),
        (("t", ["a"]), "a section is"),  # one section not in a list: its title is read as a section
        ("t", "expected a list"),
    ],
)
def test_report_sections_refuses_other_shapes(returned: object, error: str) -> None:
    with pytest.raises(TypeError, match=error):
        report_sections([returned])


def test_report_sections_keeps_every_implementations_sections_in_order() -> None:
    returned = [None, [("a", ["1"])], [("b", []), ["c", ("2", "3")]]]
    assert report_sections(returned) == [
        ReportSection("a", ["1"]),
        ReportSection("b", []),
        ReportSection("c", ["2", "3"]),
    ]


def test_every_hook_is_documented_with_when_it_is_called_and_what_it_returns() -> None:
    hooks = [value for name, value in vars(hookspecs).items() if name.startswith("pytest_nvlink_")]
    assert {hook.__name__ for hook in hooks} == {"pytest_nvlink_verdict", "pytest_nvlink_report_sections"}
    for hook in hooks:
        doc = inspect.getdoc(hook) or ""
        assert re.search(r"\bCalled\b", doc), hook.__name__
        assert re.search(r"\b[Rr]eturn", doc), hook.__name__


def test_under_xdist_the_controller_adds_the_sections_once(pytester: pytest.Pytester) -> None:
    conftest = "def pytest_nvlink_report_sections(results):\n    return [('site', [f'{len(results.items)} items'])]\n"
    result = _run(pytester, conftest, "-n", "2")
    assert result.ret == 1
    document = json.loads((pytester.path / "r.json").read_text())
    assert document["sections"] == [{"title": "site", "lines": [f"{len(document['items'])} items"]}]
    assert result.stdout.str().count("- site -") == 1
