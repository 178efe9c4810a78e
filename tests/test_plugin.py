"""The whole plugin under pytester: inert mode, usage errors, live probe through the fake NVML, JUnit."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.sources.snapshot.file import load_snapshot

TOPOLOGY_ONLY = "not bandwidth and not collectives and not host_link"  # no measurement campaign


def test_plugin_is_inert_without_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain="""
        import sys

        def test_nothing_heavy_was_imported():
            assert "torch" not in sys.modules
            assert "pynvml" not in sys.modules
            assert "pytest_nvlink.sources.live.probe" not in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "nvlink" not in result.stdout.str().split("plugins:")[0]


def test_list_suites(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--nvlink-list-suites")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["h100-8gpu *HGX/DGX H100 SXM 8-GPU*", "l40s-4gpu *PCIe only*"])


def test_unknown_suite_is_a_usage_error_listing_suites(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--nvlink-suite=bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: bogus: unknown suite; shipped suites: a100-8gpu, *h100-8gpu*"])


def test_bad_site_thresholds_is_a_usage_error_with_file_and_key(pytester: pytest.Pytester) -> None:
    site = pytester.makefile(".toml", site="[p2p]\nunidirectional_min_gbps = 'fast'\n")
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-thresholds={site}", "--nvlink-replay=h100-8gpu-healthy"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *site.toml:p2p.unidirectional_min_gbps: expected a number*"])


def test_no_driver_fails_with_one_clear_line(pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]) -> None:
    install_fake_nvml(None, library_missing=True)
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        [
            "expected 8 GPUs, found 0: NVML library not found — is the NVIDIA driver installed?",
            "FAILED nvlink/test_inventory.py::test_gpu_count*",
        ]
    )


def test_no_driver_with_a_selection_that_leaves_nothing_still_fails(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]
) -> None:
    install_fake_nvml(None, library_missing=True)
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "-k", "topology", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["pytest-nvlink: node could not be probed: NVML library not found*"])


def test_live_probe_through_fake_nvml_passes_topology(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]
) -> None:
    install_fake_nvml("h100-8gpu-healthy")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "-k", TOPOLOGY_ONLY, "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    # 1 count + 1 driver + 8 x (model, 4 nvlink, fabric, Xid events listened for) + 28 paths + 56 P2P statuses
    assert outcomes["passed"] == 2 + 8 * 7 + 28 + 56, result.stdout.str()
    # The PCIe generation needs the load of a measurement campaign; a topology-only run cannot show it (fail closed).
    assert outcomes["failed"] == 8
    result.stdout.fnmatch_lines(["*PCIe generation of GPU 0 under load (width x16 ok): not measured under load*"])
    result.stdout.fnmatch_lines(["nvlink source: live (NVML + torch)*8 x NVIDIA H100 80GB HBM3*"])


def test_topology_selection_starts_no_measurement(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]
) -> None:
    install_fake_nvml("h100-8gpu-healthy")
    pytester.makeconftest(
        """
        import sys
        def pytest_sessionfinish(session):
            heavy = ("torch", "pytest_nvlink.measure.live")
            session.config._nvlink_seen = sorted(m for m in sys.modules if m.startswith(heavy))
        def pytest_unconfigure(config):
            print("MEASURE-MODULES", getattr(config, "_nvlink_seen", None))
        """
    )
    result = pytester.runpytest_subprocess(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", "-k", "topology", "-s"
    )
    result.stdout.fnmatch_lines(["MEASURE-MODULES []"])


def test_auto_suite_picks_and_says_so(pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]) -> None:
    install_fake_nvml("h100-8gpu-healthy")
    result = pytester.runpytest("--nvlink-suite=auto", "-k", "gpu_count", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(["nvlink: auto-selected suite h100-8gpu for 8 x NVIDIA H100 80GB HBM3"])


def test_missing_gpu_fails_its_items(pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any]) -> None:
    install_fake_nvml("h100-8gpu-healthy", lost_gpus=[7])
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "-k", "gpu_count or gpu7", "-p", "no:cacheprovider")
    text = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "expected 8 usable GPUs (h100-8gpu.toml:suite.gpu_count), found 7: GPU 7: NVML: GPU is lost" in text
    assert "GPU 7 (bus 0000:db:00.0) is unusable: NVML: GPU is lost" in text


def test_save_then_replay_round_trips(
    pytester: pytest.Pytester, install_fake_nvml: Callable[..., Any], tmp_path: Path
) -> None:
    install_fake_nvml("h100-8gpu-healthy")
    saved = tmp_path / "node.json"
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "-k", "gpu_count", f"--nvlink-save={saved}")
    assert result.ret == 0
    document = json.loads(saved.read_text())
    assert document["schema_version"] == 3 and document["plugin_version"]
    assert document["created_utc"].endswith("Z")
    # Schema 2 records what the run was made with, and how it ended (a baseline folder offers only complete
    # passes): a -k run proves only its selection, so it is saved as partial.
    environment = document["node"]["environment"]
    assert environment["suite"] == "h100-8gpu" and environment["outcome"] == "partial"
    assert environment["versions"]["kernel"] and environment["thresholds"][-1].endswith("h100-sxm.toml")
    node = load_snapshot(saved)
    original = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    assert [g.uuid for g in node.gpus] == [g.uuid for g in original.gpus]
    assert node.paths == original.paths and node.p2p == original.p2p


def test_user_tests_can_use_the_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_site="""
        def test_every_pair_nv18(nvlink_node, nvlink_pair):
            a, b = nvlink_pair
            assert nvlink_node.path(a, b) == "NV18"
        """
    )
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", "test_site.py")
    result.assert_outcomes(passed=28)


def test_ini_keys_configure_the_run(pytester: pytest.Pytester) -> None:
    site = pytester.makefile(".toml", site="[nvlink]\nactive_links = 16\n")
    pytester.makeini(
        f"[pytest]\nnvlink_suite = h100-8gpu\nnvlink_replay = h100-8gpu-healthy\nnvlink_thresholds = {site}\n"
    )
    pytester.makepyfile(
        test_x="def test_links(nvlink_context):\n"
        "    assert nvlink_context.thresholds.value('nvlink.active_links') == 16\n"
    )
    result = pytester.runpytest("test_x.py")
    result.assert_outcomes(passed=1)


def _junit(pytester: pytest.Pytester, *args: str) -> ET.Element:
    xml_path = pytester.path / "report.xml"
    pytester.runpytest(*args, f"--junitxml={xml_path}", "-p", "no:cacheprovider")
    return ET.parse(xml_path).getroot()


def _case_properties(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def test_junit_carries_measured_expected_and_threshold(pytester: pytest.Pytester) -> None:
    root = _junit(pytester, "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-degraded", "-k", TOPOLOGY_ONLY)
    props_node = root.find("testsuite/properties")
    assert props_node is not None
    suite_props = {p.get("name", ""): p.get("value", "") for p in props_node}
    assert suite_props["nvlink_suite"] == "h100-8gpu"
    assert suite_props["gpu_count"] == "8"
    assert suite_props["driver_version"]
    assert "serial=" in suite_props["gpu3"]
    cases = {c.get("name"): c for c in root.iter("testcase")}
    links = cases["test_nvlink_active_links[gpu3]"]
    props = _case_properties(links)
    assert props["measured"] == "16" and props["expected"] == "18" and props["unit"] == "links"
    assert props["threshold_key"] == "nvlink.active_links"
    assert props["threshold_file"].endswith("h100-sxm.toml")
    assert props["gpu_uuid"].startswith("GPU-")
    failure = links.find("failure")
    assert failure is not None and "16 of 18 NVLinks active" in failure.get("message", "")
    assert cases["test_path[gpu0-gpu1]"].find("failure") is None
    pair = _case_properties(cases["test_path[gpu0-gpu3]"])
    assert pair["measured"] == "NV16"
    assert pair["gpu_dst"] == "3"
    assert pair["gpu_dst_uuid"].startswith("GPU-")
    # The key and its file are separate properties, as threshold_key/threshold_file are.
    assert (pair["suite_key"], Path(pair["suite_file"]).name) == ("topology.default", "h100-8gpu.toml")
    assert links.get("classname") == "nvlink.test_nvlink"


def test_ini_suite_alone_collects_the_shipped_checks(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nnvlink_suite = h100-8gpu\nnvlink_replay = h100-8gpu-healthy\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=388)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--nvlink-pair-mode=random", "--nvlink-pair-mode: expected serial or concurrent, got 'random'"),
        ("--nvlink-backend=mpi", "--nvlink-backend: expected nccl or gloo, got 'mpi'"),
        ("--nvlink-evidence-missing=warn", "--nvlink-evidence-missing: expected fail or skip, got 'warn'"),
    ],
)
def test_bad_option_values_are_usage_errors(pytester: pytest.Pytester, option: str, message: str) -> None:
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])


def test_shipped_checks_hang_from_the_session_beside_a_users_scoped_fixtures(pytester: pytest.Pytester) -> None:
    """The checks' modules hang from the session, whatever folders lead to the installed package; a user's
    autouse fixtures of every scope still reach them, each set up as often as its scope says."""
    pytester.makeconftest(
        """
        import pytest

        SET_UP = []

        @pytest.fixture(scope="package", autouse=True)
        def per_package():
            SET_UP.append("package")

        @pytest.fixture(scope="module", autouse=True)
        def per_module():
            SET_UP.append("module")

        def pytest_collection_finish(session):
            chains = {tuple(type(node).__name__ for node in item.listchain()) for item in session.items}
            print("chains:", sorted(chains))

        def pytest_sessionfinish(session):
            print("set up:", SET_UP.count("package"), "package,", SET_UP.count("module"), "module")
        """
    )
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-replay={SNAPSHOTS / 'h100-8gpu-healthy.json'}",
        "-s",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["chains: [('Session', 'Module', 'Function')]"])
    modules = {line.split()[0] for line in result.stdout.lines if line.startswith("nvlink/test_")}
    set_up = next(line for line in result.stdout.lines if "set up:" in line).split("set up:")[1]
    assert set_up == f" 1 package, {len(modules)} module" and len(modules) > 1


def test_the_shipped_checks_kit_shares_the_sessions_provider_and_judge(pytester: pytest.Pytester) -> None:
    """nvlink_check bundles the very objects the public fixtures give: one provider, so one live campaign."""
    pytester.makepyfile(
        test_mine="""
        def test_same_objects(nvlink_check, nvlink_context, nvlink_measurements, nvlink_judge):
            assert nvlink_check.context is nvlink_context
            assert nvlink_check.measurements is nvlink_measurements
            assert nvlink_check.judge is nvlink_judge

        def test_first_asks_the_kit(nvlink_check):
            pass

        def test_then_the_fixture(nvlink_measurements, nvlink_check):
            assert nvlink_measurements is nvlink_check.measurements
        """
    )
    result = pytester.runpytest(
        "test_mine.py",
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-replay={SNAPSHOTS / 'h100-8gpu-healthy.json'}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3)
