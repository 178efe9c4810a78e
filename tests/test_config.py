"""Suite and threshold loading: inheritance, site overrides and every kind of bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO

from pytest_nvlink.config.required_keys import check_required_keys, required_keys
from pytest_nvlink.config.shipped import data_dir, shipped_names
from pytest_nvlink.config.suites import load_suite, path_matches, pick_suite_for
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.config.values import ConfigError

SHIPPED_SUITES = {
    "a100-8gpu",
    "b200-8gpu",
    "gb200-4gpu",
    "gb200-nvl72",
    "gb300-nvl72",
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
    replay = h200.get("nvlink_errors.replay_total_max")
    assert replay is not None and replay.where() == "nvswitch-common.toml:nvlink_errors.replay_total_max"


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


# A key whose value is a number or a boolean, and a [waive] entry ("dotted.key" = "reason").
_JUDGED_LINE = re.compile(r'^(?:[a-z_]+\s*=\s*(?:[-+0-9.eE_]+|true|false|inf|nan)|"[a-z_.]+"\s*=\s*".*")\s*$')
# A file path cited bare (not as a URL or as owner/repo:path): it must exist in this repository.
_BARE_PATH = re.compile(r"(?<![\w/:.-])((?:[\w.-]+/)+[\w.-]+\.(?:txt|md|ya?ml|in|conf|cpp|h|py|json|toml))\b")


def citation_problems(text: str, name: str) -> list[str]:
    """Every judged key needs a `# Source:` in the comment block directly above it, citing public sources."""
    lines = text.splitlines()
    problems = []
    for i, line in enumerate(lines):
        if line.startswith("schema") or not _JUDGED_LINE.match(line):
            continue
        block: list[str] = []
        j = i - 1
        while j >= 0 and lines[j].startswith("#"):
            block.insert(0, lines[j])
            j -= 1
        if not any(c.startswith("# Source:") for c in block):
            problems.append(f"{name}:{i + 1} {line!r} has no '# Source:' comment directly above it")
    for i, line in enumerate(lines):
        if not line.startswith("#"):
            continue
        if "§" in line or re.search(r"\bshared/|reference facts|prior-art", line):
            problems.append(f"{name}:{i + 1} cites a document outside the repository: {line!r}")
        for path in _BARE_PATH.findall(line):
            if not (REPO / path).is_file():
                problems.append(f"{name}:{i + 1} cites {path}, which is not in the repository")
    return problems


def test_every_shipped_threshold_number_cites_a_public_source() -> None:
    problems = []
    for path in sorted(data_dir("thresholds").glob("*.toml")):
        problems += citation_problems(path.read_text(), path.name)
    assert problems == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# Source: vendor datasheet\n# more words\nwidth_min = 16\n", None),
        ("# Source: vendor datasheet\n\nwidth_min = 16\n", "has no '# Source:'"),
        ("# a comment that mentions the Source later\nwidth_min = 16\n", "has no '# Source:'"),
        ("# Source: x\nrequired = true\n# not a source\nversion = 4\n", "'version = 4' has no"),
        ('[waive]\n"pcie.width_min" = "no PCIe"\n', "has no '# Source:'"),
        ("# Source: shared/samples/topo/x.txt shows NV12\nactive_links = 12\n", "outside the repository"),
        ("# Source: NVML facts \u00a72.3\nwidth_min = 1\n", "outside the repository"),
        ("# Source: docs/nowhere/file.md\nwidth_min = 1\n", "docs/nowhere/file.md, which is not in the repository"),
        ("# Source: Azure/azurehpc-health-checks:conf/nd96isr_h100_v5.conf\nwidth_min = 1\n", None),
        ("# Source: tests/data/evidence/topo/l40s-4gpu-pcie-only-node-sys.txt\nwidth_min = 1\n", None),
    ],
)
def test_the_citation_check_itself(text: str, expected: str | None) -> None:
    problems = citation_problems(text, "t.toml")
    if expected is None:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[p2p]\nlatency_max_us = inf\n", r"site.toml:p2p.latency_max_us: inf is not a finite number"),
        ("[p2p]\nlatency_max_us = 1e400\n", r"site.toml:p2p.latency_max_us: inf is not a finite number"),
        (
            "[p2p]\nunidirectional_min_gbps = nan\n",
            r"site.toml:p2p.unidirectional_min_gbps: nan is not a finite number",
        ),
        ("[p2p]\nlatency_max_us = 1e300\n", r"site.toml:p2p.latency_max_us: 1e\+300 must be at most 100000"),
        ("[nvlink]\nlink_speed_min_gbps = -inf\n", r"site.toml:nvlink.link_speed_min_gbps: -inf is not a finite"),
        ("[nvlink_errors]\ncrc_flit_per_s_max = -1.0\n", r"crc_flit_per_s_max: -1.0 must be at least 0"),
        (
            "[nvlink_errors]\nreplay_max = 0\n",
            r"site.toml:nvlink_errors.replay_max: renamed: .*replay_total_max .*replay_run_max",
        ),
        (
            "[p2p]\ncounters_waived = true\n",
            r'site.toml:p2p.counters_waived: replaced by a waiver .*\[waive\] "p2p.nvlink_counter_fraction_min"',
        ),
        (
            '[waive]\n"p2p.latency_max_us" = ""\n',
            r"site.toml:waive.p2p.latency_max_us: a waiver needs a non-empty reason",
        ),
        (
            '[waive]\n"p2p.latency_max_us" = true\n',
            r"site.toml:waive.p2p.latency_max_us: a waiver needs a non-empty reason",
        ),
        ('[waive]\n"p2p.latency_max_ms" = "x"\n', r"site.toml:waive.p2p.latency_max_ms: unknown key"),
        ('waive = "all"\n', r"site.toml:waive: expected a table"),
        ('[p2p]\nlatency_max_us = 5.0\n[waive]\n"p2p.latency_max_us" = "x"\n', r"both sets and waives"),
    ],
)
def test_impossible_values_renamed_keys_and_bad_waivers_are_usage_errors(
    tmp_path: Path, text: str, expected: str
) -> None:
    site = _write(tmp_path, "site.toml", text)
    with pytest.raises(ConfigError, match=expected):
        load_thresholds("h100-sxm", site)


def test_a_site_waiver_unsets_an_inherited_key_and_names_file_and_reason(tmp_path: Path) -> None:
    site = _write(tmp_path, "site.toml", '[waive]\n"p2p.latency_max_us" = "our copies are staged by design"\n')
    merged = load_thresholds("h100-sxm", site)
    assert merged.get("p2p.latency_max_us") is None
    waiver = merged.waiver("p2p.latency_max_us")
    assert waiver is not None and waiver.file == site and waiver.reason == "our copies are staged by design"
    assert waiver.where() == "site.toml:waive.p2p.latency_max_us"
    assert merged.waiver("p2p.unidirectional_min_gbps") is None


def test_a_later_value_replaces_an_inherited_waiver(tmp_path: Path) -> None:
    shipped = load_thresholds("gb200")
    assert shipped.get("pcie.width_min") is None and shipped.waiver("pcie.width_min") is not None
    site = _write(tmp_path, "site.toml", "[pcie]\nwidth_min = 16\n")
    merged = load_thresholds("gb200", site)
    assert merged.value("pcie.width_min") == 16 and merged.waiver("pcie.width_min") is None
    assert merged.waiver("pcie.generation_min") is not None


def test_l40s_counter_proof_is_a_waiver_with_a_reason() -> None:
    waiver = load_thresholds("l40s").waiver("p2p.nvlink_counter_fraction_min")
    assert waiver is not None and "no NVLink" in waiver.reason and waiver.file.name == "l40s.toml"


def test_site_extends_within_the_suite_chain_is_laid_over_it(tmp_path: Path) -> None:
    site = _write(tmp_path, "site.toml", 'extends = "h100-sxm"\n[p2p]\nunidirectional_min_gbps = 360.0\n')
    merged = load_thresholds("h200-sxm", site)
    assert [p.name for p in merged.files] == ["nvswitch-common.toml", "h100-sxm.toml", "h200-sxm.toml", "site.toml"]
    # The suite's own set still wins over nothing: h200's bidirectional figure is kept.
    assert merged.value("p2p.bidirectional_min_gbps") == 705.0
    assert merged.value("p2p.unidirectional_min_gbps") == 360.0


def test_site_extends_another_skus_set_is_refused(tmp_path: Path) -> None:
    site = _write(tmp_path, "site.toml", 'extends = "b200-sxm"\n')
    with pytest.raises(ConfigError, match=r"site.toml:extends: reaches the shipped set 'b200-sxm', which is not part"):
        load_thresholds("h100-sxm", site)


MINIMAL_SET = """
[p2p]
# Source: test
unidirectional_min_gbps = 300.0
[collectives.all_reduce]
# Source: test
busbw_min_gbps = 300.0
"""


def _nv18_suite(tmp_path: Path, collectives: str = '["all_reduce"]') -> Path:
    text = (
        SUITE_OK.replace('thresholds = "h100-sxm"', 'thresholds = "minimal.toml"')
        .replace("nvswitch = false", "nvswitch = true")
        .replace('default = "PCIE"', 'default = "NV18"')
        .replace('pairs = [{ gpus = [0, 1], path = "NV12" }]', "")
    )
    return _write(tmp_path, "nv18.toml", text + f"[measure]\ncollectives = {collectives}\n")


def test_missing_required_keys_stop_the_run_naming_suite_set_and_key(tmp_path: Path) -> None:
    _write(tmp_path, "minimal.toml", MINIMAL_SET)
    suite = load_suite(str(_nv18_suite(tmp_path)))
    thresholds = load_thresholds(str(tmp_path / "minimal.toml"))
    with pytest.raises(ConfigError) as info:
        check_required_keys(suite, thresholds)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'minimal.toml'}:nvlink.active_links: required key missing")
    assert f"suite {tmp_path / 'nv18.toml'}" in message and "threshold set" in message
    for key in ("nvlink.version", "nvlink_errors.replay_total_max", "nvlink_errors.crc_flit_per_s_max"):
        assert key in message
    for key in ("fabric.required", "p2p.latency_max_us", "collectives.all_reduce.size_mib", "pcie.width_min"):
        assert key in message
    assert '[waive] "nvlink.active_links"' in message


def test_every_shipped_suite_has_its_required_keys() -> None:
    for name in SHIPPED_SUITES:
        suite = load_suite(name)
        check_required_keys(suite, load_thresholds(suite.thresholds_ref))


def test_required_keys_follow_the_suite_shape() -> None:
    pcie_only = required_keys(load_suite("l40s-4gpu"))
    assert "nvlink.active_links" in pcie_only and "pcie.width_min" in pcie_only
    assert "nvlink.version" not in pcie_only and "fabric.required" not in pcie_only
    assert "collectives.all_reduce.busbw_min_gbps" in pcie_only
    assert "collectives.broadcast.busbw_min_gbps" not in pcie_only
    h100 = required_keys(load_suite("h100-8gpu"))
    assert h100["fabric.required"] == "suite.nvswitch = true"
    assert h100["collectives.all_to_all.size_mib"] == "measure.collectives lists all_to_all"
    assert h100["p2p.nvlink_counter_fraction_min"] == "its topology expects NV# pairs"


def test_a_waiver_satisfies_a_required_key(tmp_path: Path) -> None:
    suite = load_suite("h100-8gpu")
    site = _write(tmp_path, "site.toml", '[waive]\n"fabric.required" = "fabric checked by our own agent"\n')
    check_required_keys(suite, load_thresholds(suite.thresholds_ref, site))


@pytest.mark.parametrize(
    ("model", "count", "expected"),
    [
        ("NVIDIA GB200", 8, None),  # B200 is a substring of GB200: substring matching picked b200-8gpu
        ("NVIDIA GB200", 4, "gb200-4gpu"),
        ("NVIDIA B200", 8, "b200-8gpu"),
        ("NVIDIA H200 NVL", 8, None),
        ("NVIDIA H200", 8, "h200-8gpu"),
        ("nvidia  h100 80gb hbm3", 8, "h100-8gpu"),
        ("A100-SXM4-40GB", 8, "a100-8gpu"),  # older drivers print the name without "NVIDIA "
        ("NVIDIA A100-SXM4-80GB-EXTRA", 8, None),
        ("NVIDIA H100 NVL", 2, "h100-nvl-pair"),
    ],
)
def test_auto_pick_matches_model_names_exactly(model: str, count: int, expected: str | None) -> None:
    assert pick_suite_for(model, count) == expected
