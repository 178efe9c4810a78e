"""Shared helpers: paths to the shipped data and a fake ``pynvml`` installed at the import seam."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = REPO / "snapshots"
DATA = Path(__file__).resolve().parent / "data"
EVIDENCE = DATA / "evidence"


def sample(relative: str) -> str:
    """A copied real sample without its three provenance header lines and the blank line after them."""
    lines = (EVIDENCE / relative).read_text(encoding="utf-8").split("\n")
    assert all(line.startswith("# ") for line in lines[:3]) and lines[3] == ""
    return "\n".join(lines[4:])


def topo_p2p_text(capability: str, count: int, cell: str = "OK") -> str:
    """``nvidia-smi topo -p2p <capability>`` output for ``count`` GPUs, every pair reading ``cell``."""
    header = " \t" + "".join(f"GPU{i}\t" for i in range(count))
    rows = [f" GPU{a}\t" + "".join("X\t" if a == b else f"{cell}\t" for b in range(count)) for a in range(count)]
    return "\n".join(
        [f"$ nvidia-smi topo -p2p {capability}", header, *rows, "", "Legend:", "", "  OK   = Status Ok", ""]
    )


@pytest.fixture
def install_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """Put a snapshot-driven fake ``pynvml`` into ``sys.modules`` for the live probe to import."""
    from fake_pynvml import make_fake_pynvml

    from pytest_nvlink.snapshot import load_snapshot

    def install(snapshot: str | None, **options: Any) -> Any:
        node = load_snapshot(SNAPSHOTS / f"{snapshot}.json") if snapshot else None
        module = make_fake_pynvml(node, **options)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install
