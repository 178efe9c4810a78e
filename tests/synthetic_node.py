"""Synthetic N-GPU nodes, suites and threshold files for scale tests and benchmarks/scale.py.

A node is the shipped healthy HGX H100 snapshot stretched to N GPUs: every GPU is a copy of GPU 0
(18 NVLinks to NVSwitches, fabric completed), every pair NV18 with P2P ok, every ordered pair
measured at the snapshot's figures, collectives over N ranks. An all-to-all NVSwitch domain of N
GPUs is what an NVL72 rack looks like to the checks; nothing here claims real figures for it.

    python tests/synthetic_node.py 72 OUT_DIR   # writes OUT_DIR/node-72gpu.json, suite, thresholds
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from benchmarks/ or the command line
    sys.path.insert(0, str(REPO))

from pytest_nvlink.model import (  # noqa: E402
    CollectiveMeasurement,
    Gpu,
    Node,
    P2PMeasurement,
    P2PStatus,
    PairPath,
    TransportChannel,
)
from pytest_nvlink.model.document import save_snapshot  # noqa: E402
from pytest_nvlink.sources.snapshot.file import load_snapshot  # noqa: E402

TEMPLATE = REPO / "snapshots" / "h100-8gpu-healthy.json"
SUITE_TEMPLATE = REPO / "suites" / "h100-8gpu.toml"


def _gpu(template: Gpu, host: str, index: int) -> Gpu:
    gpu = copy.deepcopy(template)
    gpu.index = index
    gpu.uuid = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}.gpu{index}"))
    gpu.pci_bus_id = f"{index // 256:04x}:{index % 256:02x}:00.0"
    gpu.serial = f"99{index:011d}"
    gpu.numa_node = 0 if index < 4 else 1
    return gpu


def _figures(template: Node) -> dict[str, P2PMeasurement]:
    """The template's GPU0 -> GPU1 figure of each kind, copied onto every ordered pair."""
    return {m.kind: m for m in template.measurements.p2p if (m.src, m.dst) == (0, 1)}


def _collective(template: CollectiveMeasurement, count: int) -> CollectiveMeasurement:
    m = copy.deepcopy(template)
    m.world_size = count
    m.rank_gpus = list(range(count))
    return m


def synthetic_node(count: int, host: str | None = None) -> Node:
    """A healthy all-to-all NVSwitch node of ``count`` GPUs shaped like the shipped H100 snapshot."""
    template = load_snapshot(TEMPLATE)
    node = copy.deepcopy(template)
    node.host = host or f"synthetic-{count}gpu"
    node.gpus = [_gpu(template.gpus[0], node.host, i) for i in range(count)]
    node.unknown_reasons = {
        key: value for key, value in template.unknown_reasons.items() if not key.startswith("gpu")
    } | {f"gpu{i}.gpu_memory_numa_node": "NVML: Not Supported" for i in range(count)}
    node.paths = [PairPath(a, b, "NV18") for a, b in itertools.combinations(range(count), 2)]
    node.p2p = [P2PStatus(s, d, "ok", "ok", "ok", "ok") for s, d in itertools.permutations(range(count), 2)]
    figures = _figures(template)
    node.measurements.p2p = [
        _pair_figure(m, src, dst) for src, dst in itertools.permutations(range(count), 2) for m in figures.values()
    ]
    node.measurements.collectives = [_collective(m, count) for m in template.measurements.collectives]
    # GPU 0's host-link figure of each direction, on every GPU (its buffer on the GPU's own NUMA node).
    host_links = [m for m in template.measurements.host_link if m.gpu == 0]
    node.measurements.host_link = [
        dataclasses.replace(m, gpu=gpu.index, host_numa_node=gpu.numa_node) for gpu in node.gpus for m in host_links
    ]
    if node.event_window is not None:  # the run listened for Xid events on every GPU, and heard none
        node.event_window.gpus = list(range(count))
    audit = node.measurements.nccl
    if audit is not None:
        rings = sorted({c.channel for c in audit.channels})
        audit.channels = [
            TransportChannel(c, r, r, (r + 1) % count, (r + 1) % count, "P2P", "P2P/CUMEM")
            for c in rings
            for r in range(count)
        ]
    return node


def _pair_figure(template: P2PMeasurement, src: int, dst: int) -> P2PMeasurement:
    m = copy.copy(template)
    m.src, m.dst = src, dst
    m.conditions = dict(template.conditions) if template.conditions is not None else None
    return m


def degrade_pair(node: Node, src: int, dst: int, uni_gbps: float = 37.2) -> None:
    """One ordered pair copies through host memory: unidirectional bandwidth far below the floor."""
    for m in node.measurements.p2p:
        if (m.src, m.dst) == (src, dst) and m.kind == "unidirectional":
            m.value = uni_gbps


@dataclass(frozen=True)
class SyntheticFiles:
    snapshot: Path
    suite: Path
    thresholds: Path


def suite_text(count: int, thresholds: Path, pair_items: str | None = None) -> str:
    """The shipped H100 suite with ``count`` GPUs and the given threshold file."""
    replaced = {
        "gpu_count": f"gpu_count = {count}",
        "thresholds": f'thresholds = "{thresholds}"',
        "description": f'description = "synthetic {count}-GPU all-to-all NVSwitch domain (H100 figures)"',
    }
    lines = []
    for original in SUITE_TEMPLATE.read_text(encoding="utf-8").splitlines():
        line = replaced.get(original.split(" ", 1)[0], original)
        lines.append(line)
        if line == "[suite]" and pair_items is not None:
            lines.append(f'pair_items = "{pair_items}"')
    return "\n".join(lines) + "\n"


def write_synthetic(
    folder: Path, count: int, *, pair_items: str | None = None, node: Node | None = None
) -> SyntheticFiles:
    """Snapshot, suite and threshold file of a synthetic ``count``-GPU node under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    thresholds = folder / f"synthetic-{count}gpu-thresholds.toml"
    thresholds.write_text('extends = "h100-sxm"\nschema = 1\n', encoding="utf-8")
    suite = folder / f"synthetic-{count}gpu.toml"
    suite.write_text(suite_text(count, thresholds, pair_items), encoding="utf-8")
    snapshot = folder / f"node-{count}gpu.json"
    save_snapshot(node if node is not None else synthetic_node(count), snapshot)
    return SyntheticFiles(snapshot, suite, thresholds)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__)
        return 2
    files = write_synthetic(Path(argv[2]), int(argv[1]))
    print(f"--nvlink-suite={files.suite} --nvlink-replay={files.snapshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
