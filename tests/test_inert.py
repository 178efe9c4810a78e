"""Without --nvlink-suite the plugin is inert: it loads nothing of its own beyond the plugin module."""

from __future__ import annotations

import pytest

HEAVY = ("torch", "pynvml", "tabulate", "numpy", "jinja2", "jsonschema")


def test_inert_plugin_imports_no_heavy_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain=f"""
        import sys

        def test_only_the_plugin_module_is_loaded():
            ours = sorted(m for m in sys.modules if m.startswith("pytest_nvlink"))
            # the hooks and the keys they share with the checks (plugin.kit imports pytest only), and the
            # hookspecs a site implements: registered on every run, so that a conftest implementing them
            # also loads without --nvlink-suite (plugin.hookspecs imports pytest only; its hooks have no bodies)
            expected = ["pytest_nvlink", "pytest_nvlink.plugin"]
            expected += ["pytest_nvlink.plugin.hookspecs", "pytest_nvlink.plugin.kit"]
            assert ours == expected, ours
            heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
            assert heavy == [], heavy
        """
    )
    # pytest-html (a dev extra) imports jinja2 itself; without it the check is about this plugin alone.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:html")
    result.assert_outcomes(passed=1)


def test_a_run_without_report_options_never_imports_jinja2(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import sys

        def pytest_unconfigure():
            print("jinja2 loaded:", "jinja2" in sys.modules)
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:html", "-s", "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(["jinja2 loaded: False"])


def test_inert_plugin_adds_no_autouse_fixture(pytester: pytest.Pytester) -> None:
    # An autouse fixture would join every test's fixture closure, a cost paid per test by every project.
    pytester.makepyfile(test_plain="def test_closure(request):\n    assert request.fixturenames == ['request']\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_a_check_module_whose_every_check_is_absent_is_not_imported(pytester: pytest.Pytester) -> None:
    """One host, no --nvlink-baseline: the rack and baseline checks, and their judges, are never imported."""
    pytester.makeconftest(
        """
        import sys

        def pytest_unconfigure():
            names = ("checks.test_rack", "checks.test_baseline", "judges.rack", "judges.baseline", "baseline")
            print("loaded:", sorted(n for n in names if "pytest_nvlink." + n in sys.modules))
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-s", "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(["loaded: []"])
    rack = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-s", "--nvlink-suite=gb200-nvl72", "--nvlink-replay=gb200-nvl72-healthy"
    )
    rack.stdout.fnmatch_lines(["loaded: ['checks.test_rack', 'judges.rack']"])


def test_whole_module_areas_name_each_modules_own_area() -> None:
    from pytest_nvlink.plugin import shape as plugin_shape

    for name, area in plugin_shape.WHOLE_MODULE_AREAS.items():
        module = __import__(f"pytest_nvlink.checks.{name.removesuffix('.py')}", fromlist=["pytestmark"])
        assert module.pytestmark.args == (area,), name
        checks = [value for key, value in vars(module).items() if key.startswith("test_") and callable(value)]
        assert checks, name
        assert all(not getattr(check, "pytestmark", []) for check in checks), f"{name}: a check with its own marks"
