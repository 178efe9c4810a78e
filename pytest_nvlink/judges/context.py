"""What every judge reads: the node, the suite and the thresholds (:class:`Context`), and the helpers
all areas share: GPU and pair identity properties, resolving a GPU index, a missing GPU or threshold key.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pytest_nvlink.config.suites import Suite
from pytest_nvlink.config.thresholds import Thresholds
from pytest_nvlink.model import Gpu, Node, P2PStatus
from pytest_nvlink.model.identity import DuplicateIdentity, duplicate_identities, gpu_problems
from pytest_nvlink.verdict import Verdict, failed, measured_properties, not_applicable, unknown, waived

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Context:
    """What every judge reads: the node, the suite and the thresholds, with answers worked out once."""

    node: Node
    suite: Suite
    thresholds: Thresholds
    # Why --nvlink-suite=auto found no suite for this node; the inventory gate fails with it.
    auto_mismatch: str | None = None
    # Whether this run measures the node itself (a live run): a figure or increase it lacks was not measured
    # here, where a replayed or evidence node's figures are all that its files hold.
    measures_node: bool = False
    # Answers about one GPU or pair that every pair check asks again (a 72-GPU domain has 5,112 ordered
    # pairs and six pair checks). The node's facts are final once its source is read; only measurements,
    # which these answers do not read, are added later.
    _memo: dict[tuple[str, int, int], object] = field(default_factory=dict, init=False, repr=False, compare=False)
    # The question every pair check of every pair asks first, kept apart: no key tuple or closure per ask.
    _usable: dict[tuple[int, int], bool] = field(default_factory=dict, init=False, repr=False, compare=False)

    def suite_where(self, key: str) -> str:
        return f"{self.suite.file.name}:{key}"

    def suite_at(self, key: str) -> tuple[Path, str]:
        """Where in the suite file an expectation comes from, for the JUnit ``suite_key``/``suite_file``."""
        return self.suite.file, key

    def path_key(self, a: int, b: int) -> str:
        return "topology.pairs" if (min(a, b), max(a, b)) in self.suite.pairs else "topology.default"

    def first_unusable(self, *indices: int) -> int | None:
        ready = self.ready_gpus()
        return next((index for index in indices if not ready.get(index, False)), None)

    def remembered(self, key: tuple[str, int, int], work_out: Callable[..., T], *args: object) -> T:
        """``work_out(*args)`` the first time ``key`` is asked for, the same answer after that."""
        try:
            return self._memo[key]  # type: ignore[return-value]  # stored by this method for this key
        except KeyError:
            answer = self._memo[key] = work_out(*args)
            return answer

    def nvlink_pair_usable(self, src: int, dst: int) -> bool:
        """Both GPUs usable, on one host, and the suite expects NVLink between them: a pair check can run."""
        usable = self._usable.get((src, dst))
        if usable is None:  # not a KeyError: raising one costs more than the answer, for each of 5,112 pairs
            ready = self.ready_gpus()
            usable = self._usable[src, dst] = (
                ready.get(src, False)
                and ready.get(dst, False)
                and not self.suite.crosses_hosts(src, dst)
                and self.suite.pair_expects_nvlink(src, dst)
            )
        return usable

    def ready_gpus(self) -> dict[int, bool]:
        """Per GPU index, whether it can be judged: listed (as Node.gpu finds it) and without a problem."""
        return self.remembered(("ready_gpus", 0, 0), _ready_gpus, self.node, self.gpu_problems())

    def gpu_problems(self) -> dict[int, str]:
        """Per GPU index, why it cannot be judged on its own facts (lost, named by a probe error, or listed
        twice: model/identity.py); the one answer every judge reads."""
        return self.remembered(("gpu_problems", 0, 0), gpu_problems, self.node)

    def problem_of(self, gpu: Gpu) -> str | None:
        return self.gpu_problems().get(gpu.index)

    def duplicates(self) -> list[DuplicateIdentity]:
        return self.remembered(("duplicates", 0, 0), duplicate_identities, self.node.gpus)

    def p2p_statuses(self) -> dict[tuple[int, int], P2PStatus]:
        """Every ordered pair's P2P status as Node.p2p_status finds it (a pair's first entry), worked out once."""
        return self.remembered(("p2p_statuses", 0, 0), _first_of_each, self.node.p2p or [], _SRC_DST)

    def path_classes(self) -> dict[tuple[int, int], str]:
        """Every pair's path class by (lower, higher) index, as Node.path finds it, worked out once."""
        return self.remembered(("path_classes", 0, 0), _path_classes, self.node)

    def all_usable(self, pairs: Sequence[tuple[int, int]]) -> bool:
        """Whether :meth:`nvlink_pair_usable` holds for every pair; answers already worked out are read in one call."""
        known = list(map(self._usable.get, pairs))
        if None in known:
            known = [self.nvlink_pair_usable(src, dst) for src, dst in pairs]
        return all(known)

    def nvlink_pair_guard(self, src: int, dst: int, what: str) -> Verdict | None:
        """The verdict for a pair check that cannot or need not run: across hosts, a GPU missing, or a PCIe pair."""
        if self.nvlink_pair_usable(src, dst):
            return None
        if self.suite.crosses_hosts(src, dst):
            return self.cross_host_pair(src, dst)
        missing = self.first_unusable(src, dst)
        if missing is not None:
            return self.missing_gpu(missing)
        if not self.suite.pair_expects_nvlink(src, dst):
            return not_applicable(
                f"suite {self.suite.name} expects a PCIe path between GPU {src} and GPU {dst}; {what}"
            )
        return None

    def cross_host_pair(self, a: int, b: int) -> Verdict:
        """Copy engines, NVML path classes and P2P status describe one host; across a rack's trays send/recv judges."""
        return not_applicable(
            f"GPU {a} and GPU {b} sit on different hosts ({self.suite_where('suite.gpus_per_host')} = "
            f"{self.suite.gpus_per_host}), which no copy engine or NVML pair query spans; see test_rack_sendrecv"
        )

    def empty_trays(self) -> list[int]:
        """Tray slots of a rack suite of which no GPU was found: a whole host is missing, not single GPUs."""
        per_host = self.suite.gpus_per_host
        if per_host is None:
            return []
        found = {gpu.index // per_host for gpu in self.node.gpus}
        return [tray for tray in range(self.suite.gpu_count // per_host) if tray not in found]

    def empty_trays_text(self) -> str:
        shown = ", ".join(f"tray {t}" for t in self.empty_trays())
        return f"{shown} missing (no GPU of it found, {self.suite_where('suite.gpus_per_host')}; see test_rack_trays)"

    def missing_threshold(self, *keys: str) -> Verdict:
        """A key the check needs is absent: a waiver makes the check not apply, anything else fails it.

        Loading the suite already refuses missing required keys; this guards custom contexts.
        """
        waivers = [self.thresholds.waiver(key) for key in keys]
        if all(waivers):
            first = waivers[0]
            assert first is not None
            return waived(first)
        key = keys[waivers.index(None)]
        return failed(
            f"threshold set {self.thresholds.describe()} neither sets nor waives {key}, so this check cannot be "
            f'judged; set it with a `# Source:` comment, or waive it with a reason: [waive] "{key}" = "why"',
            [("threshold_key", key)],
        )

    def usable_gpus(self) -> int:
        problems = self.gpu_problems()
        return sum(1 for gpu in self.node.gpus if gpu.index not in problems)

    def no_inventory(self) -> bool:
        """Files that name no GPUs at all (an NCCL log alone) cannot say a GPU is missing.

        Read from files: facts with a provenance (a probe's node has none), none of them an inventory.
        """
        provenance = self.node.provenance
        return bool(provenance) and not self.node.gpus and "inventory" not in provenance

    def partial_gpu_list(self) -> str | None:
        """Why the GPU list is only a lower bound, when no source lists every GPU; None when it is complete."""
        listed = self.node.gpu_list
        if listed is None or listed.complete:
            return None
        return (
            f"{listed.source} name(s) GPUs up to GPU {len(self.node.gpus) - 1} but no file lists every GPU "
            f"(a tool run on some GPUs only), so {len(self.node.gpus)} is only a lower bound for the count"
        )

    def missing_gpu(self, index: int) -> Verdict:
        if self.no_inventory():
            props = measured_properties(None, f"GPU {index} present", "GPUs", suite=self.suite_at("suite.gpu_count"))
            return unknown(f"GPU {index}", "the evidence files list no GPUs", props)
        found = self.usable_gpus()
        gpu = self.node.gpu(index)
        partial = self.partial_gpu_list()
        if gpu is None and partial:
            return unknown(f"GPU {index}", partial, [])
        if gpu is None and self.suite.host_slot(index) in self.empty_trays():
            return failed(
                f"GPU {index} is expected by suite {self.suite.name} but {self.empty_trays_text()}",
                measured_properties(found, str(self.suite.gpu_count), "GPUs", suite=self.suite_at("suite.gpu_count")),
            )
        duplicate = next((d for d in self.duplicates() if d.gpu == index), None)
        problem = None if gpu is None else self.problem_of(gpu)
        if duplicate is not None and problem == duplicate.text():
            return failed(
                f"GPU {index} is not judged on another GPU's facts: {problem}; see test_gpu_count",
                measured_properties(
                    "duplicate", "a GPU of its own", "GPU identity", suite=self.suite_at("suite.gpu_count")
                ),
            )
        if gpu is not None and problem:
            return failed(
                f"GPU {index} (bus {gpu.pci_bus_id or 'unknown'}) is unusable: {problem}; likely cause: the GPU "
                "fell off the bus (dmesg Xid 79) or a driver fault — reset it or reboot, then check cooling/power",
                measured_properties("lost", "usable", "GPU state", suite=self.suite_at("suite.gpu_count")),
            )
        return failed(
            f"GPU {index} is expected by suite {self.suite.name} ({self.suite_where('suite.gpu_count')} = "
            f"{self.suite.gpu_count}) but only {found} GPU(s) were found; likely cause: a GPU fell off the bus "
            "(check dmesg for Xid 79), is hidden by CUDA_VISIBLE_DEVICES/the container runtime, or was not "
            "passed through to this VM",
            measured_properties(found, str(self.suite.gpu_count), "GPUs", suite=self.suite_at("suite.gpu_count")),
        )


def pair_properties(ctx: Context, src: int, dst: int) -> list[tuple[str, str]]:
    """Both ends of a pair by index and, where known, UUID and serial (stable across reboots)."""
    return list(ctx.remembered(("pair_properties", src, dst), _pair_properties, ctx, src, dst))


def _pair_properties(ctx: Context, src: int, dst: int) -> list[tuple[str, str]]:
    props = [("gpu_src", str(src)), ("gpu_dst", str(dst))]
    for role, index in (("src", src), ("dst", dst)):
        gpu = ctx.node.gpu(index)
        if gpu is None:
            continue
        if gpu.uuid:
            props.append((f"gpu_{role}_uuid", gpu.uuid))
        if gpu.serial:
            props.append((f"gpu_{role}_serial", gpu.serial))
    return props


def gpu_properties(gpu: Gpu) -> list[tuple[str, str]]:
    props = [("gpu_index", str(gpu.index))]
    props += [(key, value) for key, value in (("gpu_uuid", gpu.uuid), ("gpu_serial", gpu.serial)) if value]
    return props


def per_gpu(judge: Callable[[Context, Gpu], Verdict]) -> Callable[[Context, int], Verdict]:
    """Resolve a GPU index; a GPU the suite expects but the node lacks (or lost) fails in one place."""

    @functools.wraps(judge)
    def by_index(ctx: Context, index: int) -> Verdict:
        gpu = ctx.node.gpu(index)
        if gpu is None or ctx.problem_of(gpu):
            return ctx.missing_gpu(index)
        return judge(ctx, gpu)

    return by_index


def _ready_gpus(node: Node, problems: dict[int, str]) -> dict[int, bool]:
    ready: dict[int, bool] = {}
    for index in {gpu.index for gpu in node.gpus}:
        gpu = node.gpu(index)  # the entry first_unusable reads, were an index listed twice
        ready[index] = gpu is not None and index not in problems
    return ready


def _first_of_each(records: list[R], key_of: Callable[[R], tuple[int, int]]) -> dict[tuple[int, int], R]:
    """Each key's first record, as Node's lookups take the first of a key listed twice."""
    return dict(zip(reversed(list(map(key_of, records))), reversed(records), strict=True))


def _path_classes(node: Node) -> dict[tuple[int, int], str]:
    return {pair: path.path for pair, path in _first_of_each(node.paths or [], _A_B).items()}


_SRC_DST = operator.attrgetter("src", "dst")
_A_B = operator.attrgetter("a", "b")
