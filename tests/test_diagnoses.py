"""Likely causes that must fit the facts: more links than the SKU has, impossible path classes."""

from __future__ import annotations

import sys
from importlib import import_module, metadata
from pathlib import Path

import pytest
from conftest import SNAPSHOTS

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.judges import nvlink, topology
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import NvLinkInfo, PairPath
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

REPO = Path(__file__).resolve().parents[1]


def _context(suite: str = "h100-8gpu") -> Context:
    loaded = load_suite(suite)
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    return Context(node, loaded, load_thresholds(loaded.thresholds_ref))


def _with_links(ctx: Context, index: int, count: int) -> None:
    gpu = ctx.node.gpu(index)
    assert gpu is not None
    gpu.nvlinks = [NvLinkInfo(link, active=True, version=4, speed_gbps=26.562) for link in range(count)]


def test_more_links_than_the_sku_has_blames_the_suite_not_a_link_down() -> None:
    ctx = _context()
    _with_links(ctx, 2, 20)
    verdict = nvlink.nvlink_active_links(ctx, 2)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message == (
        "GPU 2: 20 NVLinks active, more than the 18 this SKU has (h100-sxm.toml:nvlink.active_links); a link "
        "cannot appear, so the suite or threshold set does not describe this NVIDIA H100 80GB HBM3: pick the "
        "matching suite (--nvlink-suite=auto) or correct the site file"
    )
    assert "link down" not in verdict.message


def test_eighteen_links_judged_against_a_twelve_link_sku() -> None:
    ctx = _context("h100-nvl-4gpu")  # H100 NVL: 12 links per GPU
    expected = int(ctx.thresholds.value("nvlink.active_links"))
    assert expected < 18
    verdict = nvlink.nvlink_active_links(ctx, 0)
    assert verdict.message.startswith(f"GPU 0: 18 NVLinks active, more than the {expected} this SKU has")


def test_fewer_links_still_reads_as_a_link_down() -> None:
    ctx = _context()
    _with_links(ctx, 3, 16)
    assert "likely cause: a link down" in nvlink.nvlink_active_links(ctx, 3).message


def _path_verdict(path: str) -> str:
    ctx = _context()
    assert ctx.node.paths is not None
    ctx.node.paths = [p if (p.a, p.b) != (0, 1) else PairPath(0, 1, path) for p in ctx.node.paths]
    verdict = topology.pair_path(ctx, 0, 1)
    assert verdict.outcome is Outcome.FAIL
    return verdict.message


def test_path_with_more_links_than_any_gpu_of_the_sku() -> None:
    assert _path_verdict("NV99") == (
        "GPU 0 <-> GPU 1: path is NV99, expected NV18 (h100-8gpu.toml:topology.default): more NVLinks than this "
        "SKU has per GPU (h100-sxm.toml:nvlink.active_links = 18), so the suite or threshold set does not describe "
        "this node, or the source is damaged; pick the matching suite (--nvlink-suite=auto)"
    )


def test_bridge_pair_with_more_links_than_the_suite_expects() -> None:
    ctx = _context("h100-nvl-pair")
    expected = ctx.suite.expected_path(0, 1)
    assert ctx.node.paths is not None
    verdict = topology.pair_path(ctx, 0, 1)  # the healthy HGX node's NV18 against an NV12 bridge suite
    assert verdict.message.startswith(f"GPU 0 <-> GPU 1: path is NV18, expected {expected}")
    assert "PCIe placement" not in verdict.message and "does not describe" in verdict.message


def test_unknown_path_class_is_called_damaged_not_a_fallback() -> None:
    message = _path_verdict("NVX")
    assert message.endswith("'NVX' is not a path class nvidia-smi prints, so the source is damaged or mis-parsed")


# --- packaging ------------------------------------------------------------------------------------


def test_every_declared_entry_point_loads() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = dict(project.get("scripts", {}))
    for group in project.get("entry-points", {}).values():
        declared.update(group)
    assert declared, "pyproject.toml declares no entry points at all"
    for name, target in declared.items():
        module, _, attribute = target.partition(":")
        loaded = import_module(module)
        if attribute:
            assert callable(getattr(loaded, attribute)), f"{name} = {target}"


def test_every_installed_entry_point_loads() -> None:
    entry_points = metadata.distribution("pytest-nvlink").entry_points
    assert any(ep.group == "pytest11" for ep in entry_points)
    for entry_point in entry_points:
        try:
            entry_point.load()
        except ImportError as exc:
            pytest.fail(f"{entry_point.group}: {entry_point.name} = {entry_point.value} does not load: {exc}")
