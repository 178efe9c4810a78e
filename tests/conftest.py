"""Shared helpers: paths to the shipped data, a fake ``pynvml`` installed at the import seam, and the
Hypothesis profiles."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = REPO / "snapshots"
DATA = Path(__file__).resolve().parent / "data"
EVIDENCE = DATA / "evidence"

# Hypothesis profiles, chosen before any test module builds its settings. "ci" (with CI set) draws the
# same examples on every run, so a failure seen once is seen again on the rerun, and prints the blob
# that replays it with @reproduce_failure; it keeps no database. "dev" (otherwise) draws new examples
# each run, twice as many, and replays its failures from the default database, .hypothesis/
# (ignored by git). HYPOTHESIS_PROFILE names either (or "default") to override.
settings.register_profile(
    "ci", derandomize=True, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=200, deadline=None)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
settings.load_profile(HYPOTHESIS_PROFILE)


def examples(count: int) -> int:
    """A test's example count under the loaded profile: ``count`` as the profile's share of 100, Hypothesis's
    default (``count`` under "ci" and "default", twice it under "dev")."""
    return max(1, count * settings().max_examples // 100)


def as_recorded(verdict: Any, ctx: Any) -> Any:
    """A judge's verdict as the plugin records it for ``ctx``'s node: an UNKNOWN resolved by the run's policy
    (a failure, or "no evidence" when the node was read from evidence files)."""
    from pytest_nvlink.plugin.kit import unknown_is
    from pytest_nvlink.verdict import resolved

    return resolved(verdict, unknown_is(ctx.node.source))


def sample(relative: str) -> str:
    """A copied real sample without its three provenance header lines and the blank line after them."""
    lines = (EVIDENCE / relative).read_text(encoding="utf-8").split("\n")
    assert all(line.startswith("# ") for line in lines[:3]) and lines[3] == ""
    return "\n".join(lines[4:])


def snapshot_with_lists(path: Path) -> dict[str, Any]:
    """A snapshot file's document with its records in lists, for tests that edit records (schema 3
    writes the long lists as tables and reads either form)."""
    import dataclasses
    import json

    from pytest_nvlink.model.document import node_to_dict
    from pytest_nvlink.sources.snapshot.file import load_snapshot

    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    node = dataclasses.replace(load_snapshot(path), source=document["node"]["source"])
    return {**document, "node": json.loads(json.dumps(node_to_dict(node)))}


def topo_p2p_text(capability: str, count: int, cell: str = "OK") -> str:
    """``nvidia-smi topo -p2p <capability>`` output for ``count`` GPUs, every pair reading ``cell``."""
    header = " \t" + "".join(f"GPU{i}\t" for i in range(count))
    rows = [f" GPU{a}\t" + "".join("X\t" if a == b else f"{cell}\t" for b in range(count)) for a in range(count)]
    return "\n".join(
        [f"$ nvidia-smi topo -p2p {capability}", header, *rows, "", "Legend:", "", "  OK   = Status Ok", ""]
    )


# A -p plugin for a child pytest: it is imported before pytest_configure, so the fake pynvml is in
# place when the plugin probes. ``setup`` may adjust ``module``; ``hooks`` may add plugin hooks.
FAKE_NVML_PLUGIN = """
import sys
from pathlib import Path
from fake_pynvml import make_fake_pynvml
from pytest_nvlink.sources.snapshot.file import load_snapshot
module = make_fake_pynvml(load_snapshot(Path({path!r})){options})
{setup}
sys.modules["pynvml"] = module
{hooks}
"""


def tiny_collective_thresholds(*ops: str) -> str:
    """gloo on CPU says nothing about NVLink: tiny sizes and floors exercise the harness, not the node."""
    return 'extends = "h100-sxm"\n' + "".join(
        f"[collectives.{op}]\nsize_mib = 1\nbusbw_min_gbps = 0.0001\n" for op in ops
    )


def serve_live_node(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    node: Any,
    gpu_count: int,
    *,
    options: str = "",
    setup: str = "",
    hooks: str = "",
) -> None:
    """Save the first ``gpu_count`` GPUs of ``node`` as a live node and write ``fake_nvml_plugin`` serving it."""
    import dataclasses

    from pytest_nvlink.model.document import save_snapshot

    node.gpus = node.gpus[:gpu_count]
    node.paths = [p for p in node.paths or [] if p.b < gpu_count]
    node.p2p = [s for s in node.p2p or [] if s.src < gpu_count and s.dst < gpu_count]
    save_snapshot(dataclasses.replace(node, source="live"), pytester.path / "node.json")
    plugin = FAKE_NVML_PLUGIN.format(path=str(pytester.path / "node.json"), options=options, setup=setup, hooks=hooks)
    pytester.makepyfile(fake_nvml_plugin=plugin)
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{REPO / 'tests'}")


@pytest.fixture
def install_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """Put a snapshot-driven fake ``pynvml`` into ``sys.modules`` for the live probe to import."""
    from fake_pynvml import make_fake_pynvml

    from pytest_nvlink.sources.snapshot.file import load_snapshot

    def install(snapshot: str | None, **options: Any) -> Any:
        node = load_snapshot(SNAPSHOTS / f"{snapshot}.json") if snapshot else None
        module = make_fake_pynvml(node, **options)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install
