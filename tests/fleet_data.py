"""Fleet result sets for the fleet tests: copies of a real ``--nvlink-json`` file, each changed a little.

The base file comes from a pytest-nvlink run replaying a shipped snapshot (produced once per
process, in a subprocess, so it always has the current schema); each node of a set is a copy with
its own host and, where a test asks, a slower pair, a failing check or an error.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
Document = dict[str, Any]


@functools.lru_cache(maxsize=4)
def _produced(replay: str) -> str:
    with tempfile.TemporaryDirectory(prefix="fleet-data-") as folder:
        out = Path(folder) / "results.json"
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist",
            "--nvlink-suite=h100-8gpu", f"--nvlink-replay={replay}", f"--nvlink-json={out}",
        ]  # fmt: skip
        finished = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600, check=False)
        if not out.is_file():
            raise RuntimeError(
                f"the replay run wrote no results JSON:\n{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}"
            )
        return out.read_text(encoding="utf-8")


def real_results(replay: str = "h100-8gpu-healthy") -> Document:
    """A fresh copy of the results document of a replayed shipped snapshot."""
    document: Document = json.loads(_produced(replay))
    return document


def with_host(document: Document, host: str) -> Document:
    changed = copy.deepcopy(document)
    changed["node"]["host"] = host
    return changed


def slower_pair(document: Document, src: int, dst: int, kind: str, factor: float) -> Document:
    """The node with one P2P pair's figure multiplied by ``factor`` (0.9 = 10 % slower bandwidth)."""
    changed = copy.deepcopy(document)
    hits = [m for m in changed["node"]["measurements"]["p2p"] if (m["src"], m["dst"], m["kind"]) == (src, dst, kind)]
    assert hits, f"no {kind} measurement for GPU {src} -> GPU {dst}"
    for measurement in hits:
        measurement["value"] = round(measurement["value"] * factor, 3)
    return changed


def scaled(document: Document, kind: str, factor: float) -> Document:
    """The node with every P2P figure of ``kind`` multiplied by ``factor``."""
    changed = copy.deepcopy(document)
    for measurement in changed["node"]["measurements"]["p2p"]:
        if measurement["kind"] == kind and measurement["value"] is not None:
            measurement["value"] = round(measurement["value"] * factor, 3)
    return changed


def failing(document: Document, check: str, message: str) -> Document:
    """The node with the first item of ``check`` failed with ``message``."""
    changed = copy.deepcopy(document)
    item = next(i for i in changed["items"] if i["check"] == check)
    item.update(outcome="fail", pytest_outcome="failed", message=message)
    item["properties"].update(measured="1", expected=">= 2", unit="GB/s")
    changed["verdict"] = "FAIL"
    counts = changed["counts"]
    counts["passed"] -= 1
    counts["failed"] = counts.get("failed", 0) + 1
    return changed


def errored(document: Document, check: str, message: str) -> Document:
    """The node with the first item of ``check`` ended in a setup error (no verdict on facts)."""
    changed = copy.deepcopy(document)
    item = next(i for i in changed["items"] if i["check"] == check)
    item.update(outcome="no_evidence", pytest_outcome="error", message=message)
    changed["verdict"] = "INCOMPLETE"
    counts = changed["counts"]
    counts["passed"] -= 1
    counts["error"] = counts.get("error", 0) + 1
    return changed


def fleet_of(
    count: int,
    base: Document | None = None,
    prefix: str = "gpu",
    change: Callable[[str, Document], Document] | None = None,
) -> dict[str, Document]:
    """``count`` nodes gpu001.. as copies of ``base``; ``change(host, document)`` alters any of them."""
    base = base if base is not None else real_results()
    nodes: dict[str, Document] = {}
    for number in range(1, count + 1):
        host = f"{prefix}{number:03d}"
        document = with_host(base, host)
        nodes[host] = change(host, document) if change is not None else document
    return nodes


def write_fleet(folder: Path, nodes: dict[str, Document] | Iterable[tuple[str, Document]]) -> Path:
    """One ``<host>.json`` per node under ``folder``; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = nodes.items() if isinstance(nodes, dict) else nodes
    for host, document in pairs:
        (folder / f"{host}.json").write_text(json.dumps(document), encoding="utf-8")
    return folder
