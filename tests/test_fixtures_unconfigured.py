"""The plugin's fixtures outside a run, or asked for in a way the run does not parametrize, fail with one sentence."""

from __future__ import annotations

import pytest


def test_fixtures_without_a_suite_say_that_they_need_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_site="""
        def test_node(nvlink_node):
            pass

        def test_measurements(nvlink_measurements):
            pass

        def test_gpu(nvlink_gpu_index):
            pass

        def test_judge(nvlink_judge):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=4)
    assert result.stdout.str().count("pytest-nvlink fixtures need --nvlink-suite=NAME|PATH|auto") >= 4


def test_a_parametrized_fixture_asked_for_at_run_time_names_itself(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_site="""
        def test_dynamic(request):
            request.getfixturevalue("nvlink_pair")
        """
    )
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", "test_site.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*nvlink_pair takes its values from the suite only as an argument of a test function*"]
    )


def test_session_fixtures_answer_the_innermost_session(pytester: pytest.Pytester) -> None:
    # pytester runs this session inside the outer one, which has no run: the inner run's fixtures must answer.
    pytester.makepyfile(
        test_site="""
        def test_suite(nvlink_run, nvlink_measurements, nvlink_gpu_index):
            assert nvlink_run.suite.name == "h100-8gpu"
            assert nvlink_measurements is not None and 0 <= nvlink_gpu_index < 8
        """
    )
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", "test_site.py")
    result.assert_outcomes(passed=8)
