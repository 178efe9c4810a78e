"""Suite and threshold loading: inheritance, site overrides and every kind of bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_nvlink.config import (
    ConfigError,
    data_dir,
    load_suite,
    load_thresholds,
    path_matches,
    pick_suite_for,
    shipped_names,
)

SHIPPED_SUITES = {
    "a100-8gpu",
    "b200-8gpu",
    "gb200-4gpu",
    "h100-8gpu",
    "h100-nvl-4gpu",
    "h100-nvl-pair",
    "h200-8gpu",
    "l40s-4gpu",
}


def test_every_shipped_suite_loads_with_its_thresholds() -> None:
    assert set(shipped_names("suites")) == SHIPPED_SUITES
    for name in SHIPPED_SUITES:
        suite = load_suite(name)
        thresholds = load_thresholds(suite.thresholds_ref)
        assert set(suite.measure.collectives) <= set(thresholds.collectives()), name


def test_inheritance_resolves_parent_values_and_names_the_setting_file() -> None:
    h200 = load_thresholds("h200-sxm")
    assert [p.name for p in h200.files] == ["nvswitch-common.toml", "h100-sxm.toml", "h200-sxm.toml"]
    assert h200.value("nvlink.active_links") == 18
    assert h200.get("nvlink.active_links").file.name == "h100-sxm.toml"  # type: ignore[union-attr]
    assert h200.get("p2p.bidirectional_min_gbps").file.name == "h200-sxm.toml"  # type: ignore[union-attr]
    assert h200.get("nvlink_errors.replay_max").where() == "nvswitch-common.toml:nvlink_errors.replay_max"  # type: ignore[union-attr]


def test_l40s_expects_no_nvlink() -> None:
    suite = load_suite("l40s-4gpu")
    assert not suite.expects_any_nvlink()
    assert load_thresholds(suite.thresholds_ref).value("nvlink.active_links") == 0


def test_bridge_suite_expects_nvlink_only_on_bridged_pairs() -> None:
    suite = load_suite("h100-nvl-4gpu")
    assert suite.expected_path(1, 0) == "NV12"
    assert suite.expected_path(2, 3) == "NV12"
    assert suite.expected_path(0, 2) == "PCIE"
    assert path_matches("PCIE", "SYS") and not path_matches("PCIE", "NV12")
    assert path_matches("NV", "NV4") and not path_matches("NV12", "NV11")


def test_every_shipped_threshold_number_cites_a_source() -> None:
    for path in data_dir("thresholds").glob("*.toml"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if re.match(r"^[a-z_]+\s*=\s*[-0-9.]+\s*$", line) and not line.startswith("schema"):
                comments = [ln for ln in lines[max(0, i - 4) : i] if ln.startswith("#")]
                assert any("Source" in c for c in comments), f"{path.name}:{i + 1} {line!r} has no source comment"


def test_site_file_overrides_and_extends(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text("[p2p]\nunidirectional_min_gbps = 360.0\n")
    merged = load_thresholds("h100-sxm", site)
    assert merged.value("p2p.unidirectional_min_gbps") == 360.0
    assert merged.get("p2p.unidirectional_min_gbps").file == site  # type: ignore[union-attr]
    assert merged.value("nvlink.active_links") == 18


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[p2p]\nunidirectional_min_gbs = 1.0\n", r"site.toml:p2p.unidirectional_min_gbs: unknown key"),
        ("[p2p]\nunidirectional_min_gbps = 'fast'\n", r"site.toml:p2p.unidirectional_min_gbps: expected a number"),
        ("[p2p]\nunidirectional_min_gbps = -3\n", r"site.toml:p2p.unidirectional_min_gbps: -3 must be greater"),
        ("[nvlink]\nactive_links = 40\n", r"site.toml:nvlink.active_links: 40 is outside 0..36"),
        ("[p2p]\nnvlink_counter_fraction_min = 1.5\n", r"nvlink_counter_fraction_min: 1.5 must be at most 1"),
        ("[fabric]\nrequired = 'yes'\n", r"site.toml:fabric.required: expected true or false"),
        ("[p2p]\nbidirectional_min_gbps = 100.0\n", r"site.toml:p2p.bidirectional_min_gbps: 100.0 GB/s is below"),
        ("[p2p\n", r"site.toml: not valid TOML"),
        ("schema = 2\n", r"site.toml:schema: version 2 is not supported"),
        ("extends = 'nope'\n", r"site.toml:extends: unknown threshold set 'nope'; shipped sets: .*h100-sxm"),
    ],
)
def test_bad_site_files_name_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    site = _write(tmp_path, "site.toml", text)
    with pytest.raises(ConfigError, match=expected):
        load_thresholds("h100-sxm", site)


def test_missing_site_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent.toml: file not found"):
        load_thresholds("h100-sxm", tmp_path / "absent.toml")


def test_extends_cycle_is_reported(tmp_path: Path) -> None:
    _write(tmp_path, "a.toml", "extends = 'b.toml'\n")
    _write(tmp_path, "b.toml", "extends = 'a.toml'\n")
    with pytest.raises(ConfigError, match=r"inheritance cycle \(a.toml -> b.toml -> a.toml\)"):
        load_thresholds(str(tmp_path / "a.toml"))


def test_unknown_suite_lists_known_suites() -> None:
    with pytest.raises(ConfigError, match=r"bogus: unknown suite; shipped suites: a100-8gpu, .*l40s-4gpu"):
        load_suite("bogus")


SUITE_OK = """
[suite]
description = "test"
thresholds = "h100-sxm"
gpu_count = 4
gpu_models = ["H100"]
nvswitch = false
[topology]
default = "PCIE"
pairs = [{ gpus = [0, 1], path = "NV12" }]
"""


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("gpu_count = 4", "gpu_count = 0"), r"suite.gpu_count: 0 is outside"),
        (('gpu_models = ["H100"]', "gpu_models = []"), r"suite.gpu_models: expected a non-empty list"),
        (('default = "PCIE"', 'default = "NVLINK"'), r"topology.default: expected NV<n>, NV, PCIE"),
        (("gpus = [0, 1]", "gpus = [0, 4]"), r"topology.pairs\[0\].gpus: expected two different GPU indices below 4"),
        (('path = "NV12"', 'path = "fast"'), r"topology.pairs\[0\].path"),
        (("nvswitch = false", "nvswitch = false\ncolour = 1"), r"suite.colour: unknown key"),
        (('description = "test"\n', ""), r"suite.description: required key missing"),
        (("[topology]", "[measure]\npair_mode = 'random'\n[topology]"), r"measure.pair_mode: expected"),
        (("[topology]", "[measure]\ncollectives = ['allreduce']\n[topology]"), r"measure.collectives"),
        (("[topology]", "[measure]\ntimeout_s = 0\n[topology]"), r"measure.timeout_s: 0 is outside"),
    ],
)
def test_bad_suites_name_file_and_key(tmp_path: Path, edit: tuple[str, str], expected: str) -> None:
    path = _write(tmp_path, "mine.toml", SUITE_OK.replace(*edit))
    with pytest.raises(ConfigError, match=rf"mine.toml:{expected}"):
        load_suite(str(path))


def test_custom_suite_file_loads(tmp_path: Path) -> None:
    suite = load_suite(str(_write(tmp_path, "mine.toml", SUITE_OK)))
    assert suite.name == "mine"
    assert suite.expected_path(0, 1) == "NV12" and suite.expected_path(2, 3) == "PCIE"


def test_auto_pick_matches_model_and_count() -> None:
    assert pick_suite_for("NVIDIA H100 80GB HBM3", 8) == "h100-8gpu"
    assert pick_suite_for("NVIDIA A100-SXM4-80GB", 8) == "a100-8gpu"
    assert pick_suite_for("NVIDIA L40S", 4) == "l40s-4gpu"
    assert pick_suite_for("NVIDIA H100 80GB HBM3", 3) is None
    assert pick_suite_for(None, 0) is None
