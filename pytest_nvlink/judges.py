"""Topology and health verdicts: node facts against the suite and the SKU's thresholds.

Each function judges one GPU or one pair and returns a :class:`Verdict` whose message is one
sentence: what was seen, what was expected and from which file and key, and the likely cause.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pytest_nvlink.config import Suite, Threshold, Thresholds, path_matches
from pytest_nvlink.judges_errors import judge_error_counters
from pytest_nvlink.model import Gpu, Node, NvLinkInfo, is_known_path_class, nvlink_count_of_path
from pytest_nvlink.verdict import (
    PassedLater,
    Verdict,
    failed,
    measured_properties,
    not_applicable,
    passed,
    suite_key_properties,
    unknown,
    waived,
)

T = TypeVar("T")


@dataclass
class Context:
    node: Node
    suite: Suite
    thresholds: Thresholds
    # Why --nvlink-suite=auto found no suite for this node; the inventory gate fails with it.
    auto_mismatch: str | None = None
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
        for index in indices:
            gpu = self.node.gpu(index)
            if gpu is None or gpu.problem:
                return index
        return None

    def remembered(self, key: tuple[str, int, int], work_out: Callable[[], T]) -> T:
        """``work_out()`` the first time ``key`` is asked for, the same answer after that."""
        try:
            return self._memo[key]  # type: ignore[return-value]  # stored by this method for this key
        except KeyError:
            answer = self._memo[key] = work_out()
            return answer

    def nvlink_pair_usable(self, src: int, dst: int) -> bool:
        """Both GPUs usable, on one host, and the suite expects NVLink between them: a pair check can run."""
        try:
            return self._usable[src, dst]
        except KeyError:
            usable = self._usable[src, dst] = (
                not self.suite.crosses_hosts(src, dst)
                and self.first_unusable(src, dst) is None
                and self.suite.pair_expects_nvlink(src, dst)
            )
            return usable

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
        return sum(1 for gpu in self.node.gpus if gpu.problem is None)

    def no_inventory(self) -> bool:
        """Evidence files that name no GPUs at all (an NCCL log alone) cannot say a GPU is missing."""
        return self.node.source == "evidence" and not self.node.gpus and "inventory" not in self.node.provenance

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
            return unknown("evidence", f"GPU {index}", "the evidence files list no GPUs", props)
        found = self.usable_gpus()
        gpu = self.node.gpu(index)
        partial = self.partial_gpu_list()
        if gpu is None and partial:
            return unknown(self.node.source, f"GPU {index}", partial, [])
        if gpu is None and self.suite.host_slot(index) in self.empty_trays():
            return failed(
                f"GPU {index} is expected by suite {self.suite.name} but {self.empty_trays_text()}",
                measured_properties(found, str(self.suite.gpu_count), "GPUs", suite=self.suite_at("suite.gpu_count")),
            )
        if gpu is not None and gpu.problem:
            return failed(
                f"GPU {index} (bus {gpu.pci_bus_id or 'unknown'}) is unusable: {gpu.problem}; likely cause: the GPU "
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
    return list(ctx.remembered(("pair_properties", src, dst), lambda: tuple(_pair_properties(ctx, src, dst))))


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
        if gpu is None or gpu.problem:
            return ctx.missing_gpu(index)
        return judge(ctx, gpu)

    return by_index


# --- inventory --------------------------------------------------------------------------------


def gpu_count(ctx: Context) -> Verdict:
    expected, found = ctx.suite.gpu_count, ctx.usable_gpus()
    props = measured_properties(found, str(expected), "GPUs", suite=ctx.suite_at("suite.gpu_count"))
    if ctx.auto_mismatch is not None:
        return failed(ctx.auto_mismatch, props)
    if ctx.no_inventory():
        return unknown("evidence", "the GPU inventory", "the evidence files list no GPUs", props)
    if ctx.node.probe_errors and found == 0:
        reason = "; ".join(ctx.node.probe_errors)
        return failed(f"expected {expected} GPUs, found 0: {reason}", props)
    lost = [f"GPU {g.index}: {g.problem}" for g in ctx.node.gpus if g.problem]
    if lost:
        return failed(
            f"expected {expected} usable GPUs ({ctx.suite_where('suite.gpu_count')}), found {found}: "
            f"{'; '.join(lost)}; likely cause: a GPU fell off the bus (dmesg Xid 79) — reset or reboot, then check it",
            props,
        )
    partial = ctx.partial_gpu_list()
    if partial and len(ctx.node.gpus) <= expected:
        # A lower bound above the suite's count still proves too many GPUs (judged below).
        listed = ctx.node.gpu_list
        source = listed.source if listed else "unknown"
        return unknown(
            ctx.node.source,
            "the GPU count",
            partial,
            [*props, ("gpu_list", "lower bound"), ("gpu_list_source", source)],
        )
    if found < expected and ctx.empty_trays():
        return failed(
            f"expected {expected} GPUs ({ctx.suite_where('suite.gpu_count')}), found {found}: "
            f"{ctx.empty_trays_text()}; likely cause: the host is down, drained or not in the job's allocation",
            props,
        )
    if found < expected:
        return failed(
            f"expected {expected} GPUs ({ctx.suite_where('suite.gpu_count')}), found {found}; likely cause: a GPU "
            "fell off the bus (dmesg Xid 79), is hidden by CUDA_VISIBLE_DEVICES or the container runtime, or was "
            "not passed through to this VM",
            props,
        )
    if found > expected:
        return failed(
            f"expected {expected} GPUs ({ctx.suite_where('suite.gpu_count')}), found {found}: this node is not the "
            f"shape suite {ctx.suite.name} describes; pick the matching suite (--nvlink-suite=auto)",
            props,
        )
    return passed(f"{found} GPUs found as expected", props)


@per_gpu
def gpu_model(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    accepted = " | ".join(ctx.suite.gpu_models)
    props = measured_properties(gpu.name, accepted, "model", suite=ctx.suite_at("suite.gpu_models"))
    props += gpu_properties(gpu)
    if gpu.name is None:
        return unknown(
            ctx.node.source,
            f"the model of GPU {index}",
            ctx.node.unknown_reason(f"gpu{index}.name", "the source does not name it"),
            props,
        )
    if not ctx.suite.model_matches(gpu.name):
        return failed(
            f"GPU {index} is a {gpu.name!r}, not one of the models suite {ctx.suite.name} accepts ({accepted}, "
            f"{ctx.suite_where('suite.gpu_models')}); pick the matching suite or --nvlink-suite=auto",
            props,
        )
    return passed(f"GPU {index} is a {gpu.name}", props)


def driver(ctx: Context) -> Verdict:
    # Every suite needs the NVIDIA driver; no key sets a version, so the [suite] table is the expectation.
    props = measured_properties(
        ctx.node.driver_version, "a loaded NVIDIA driver", "version", suite=ctx.suite_at("suite")
    )
    if ctx.node.driver_version is None:
        return unknown(
            ctx.node.source,
            "the NVIDIA driver version",
            ctx.node.unknown_reason("driver_version", "the source does not report it"),
            props,
        )
    return passed(f"driver {ctx.node.driver_version}", props)


# --- NVLink per GPU ---------------------------------------------------------------------------


def _nvlink_threshold(ctx: Context, key: str) -> Threshold | None:
    return ctx.thresholds.get(f"nvlink.{key}")


@per_gpu
def nvlink_active_links(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    threshold = _nvlink_threshold(ctx, "active_links")
    if threshold is None:
        return ctx.missing_threshold("nvlink.active_links")
    expected = int(threshold.value)
    active = gpu.active_link_count()
    props = measured_properties(active, str(expected), "links", threshold) + gpu_properties(gpu)
    if active is None:
        return unknown(
            ctx.node.source,
            f"the NVLink state of GPU {index}",
            ctx.node.unknown_reason(f"gpu{index}.nvlink", "NVLink state not reported"),
            props,
        )
    if active == expected:
        return passed(f"GPU {index}: {active} NVLinks active", props)
    return failed(_links_message(ctx, gpu, active, expected, threshold), props)


def _links_message(ctx: Context, gpu: Gpu, active: int, expected: int, threshold: Threshold) -> str:
    head = f"GPU {gpu.index}: {active} of {expected} NVLinks active ({threshold.where()})"
    if expected == 0:
        return f"{head}; this SKU has no NVLink, so the GPU is not the model the suite describes"
    if active > expected:
        return (
            f"GPU {gpu.index}: {active} NVLinks active, more than the {expected} this SKU has "
            f"({threshold.where()}); a link cannot appear, so the suite or threshold set does not describe this "
            f"{gpu.name or 'GPU'}: pick the matching suite (--nvlink-suite=auto) or correct the site file"
        )
    inactive = [link.link for link in gpu.nvlinks or [] if link.active is False]
    if active == 0 and ctx.node.virtualization() in ("passthrough", "vgpu"):
        return (
            f"{head}; this is a {ctx.node.virtualization()} VM guest that hides NVLink, so GPU traffic falls "
            "back silently to PCIe: ask the provider for NVLink/NVSwitch passthrough (Fabric Manager "
            "full-passthrough or shared-NVSwitch partition)"
        )
    if active == 0:
        return (
            f"{head}; likely cause: NVLink is not trained (Fabric Manager not running on an NVSwitch "
            "system, or a driver/firmware mismatch): check `systemctl status nvidia-fabricmanager` and "
            "`nvidia-smi nvlink -s`"
        )
    listed = ", ".join(str(n) for n in inactive) if inactive else "unknown"
    return (
        f"{head}, inactive link(s): {listed}; likely cause: a link down (bad cable/board connector or "
        "NVSwitch port): check `nvidia-smi nvlink -s -i "
        f"{gpu.index}` and dmesg for Xid 74, then reseat or RMA"
    )


@per_gpu
def nvlink_version(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    ready = _active_links(ctx, gpu, "version", "NVLink version")
    if isinstance(ready, Verdict):
        return ready
    threshold, active = ready
    versions = sorted({link.version for link in active if link.version is not None})
    props = measured_properties(
        ",".join(map(str, versions)) or None, str(threshold.value), "NVLink generation", threshold
    ) + gpu_properties(gpu)
    if not active or len(versions) == 0 or any(link.version is None for link in active):
        return unknown(
            ctx.node.source,
            f"the NVLink version of GPU {index}",
            ctx.node.unknown_reason(f"gpu{index}.nvlink", "no active link reports a version"),
            props,
        )
    if versions != [threshold.value]:
        return failed(
            f"GPU {index}: NVLink generation {versions} on active links, expected {threshold.value} "
            f"({threshold.where()}); likely cause: a different SKU than the suite describes, or links trained "
            "at a fallback version",
            props,
        )
    return passed(f"GPU {index}: NVLink {threshold.value}", props)


def _no_active_links(ctx: Context, gpu: Gpu, what: str) -> Verdict | None:
    """A GPU with no active NVLink cannot show a version or speed: say so plainly instead of 'unknown'."""
    active = gpu.active_link_count()
    if active != 0:
        return None
    threshold = ctx.thresholds.get("nvlink.active_links")
    expected = threshold.value if threshold else 0
    return failed(
        f"GPU {gpu.index}: no active NVLink (0 of {expected}), so its {what} cannot be judged; "
        f"see test_nvlink_active_links[gpu{gpu.index}] for the cause",
        measured_properties(0, str(expected), "active links", threshold) + gpu_properties(gpu),
    )


def _active_links(ctx: Context, gpu: Gpu, key: str, what: str) -> tuple[Threshold, list[NvLinkInfo]] | Verdict:
    """The threshold and active links a per-link check needs, or the verdict that ends it early."""
    threshold = _nvlink_threshold(ctx, key)
    no_nvlink = _no_nvlink_expected(ctx)
    if no_nvlink is not None:
        return no_nvlink
    if threshold is None:
        return ctx.missing_threshold(f"nvlink.{key}")
    dead = _no_active_links(ctx, gpu, what)
    if dead:
        return dead
    return threshold, [link for link in gpu.nvlinks or [] if link.active]


def _no_nvlink_expected(ctx: Context) -> Verdict | None:
    """Per-link checks do not apply only where the threshold file states the SKU has no NVLink."""
    links = ctx.thresholds.get("nvlink.active_links")
    if links is not None and links.value == 0:
        return not_applicable(f"the SKU has no NVLink ({links.where()} = 0)")
    return None


@per_gpu
def nvlink_speed(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    ready = _active_links(ctx, gpu, "link_speed_min_gbps", "NVLink speed")
    if isinstance(ready, Verdict):
        return ready
    threshold, active = ready
    speeds = [link.speed_gbps for link in active]
    known = [s for s in speeds if s is not None]
    slowest = min(known) if known else None
    props = measured_properties(slowest, f">= {threshold.value}", "GB/s", threshold) + gpu_properties(gpu)
    if not active or len(known) != len(speeds):
        return unknown(
            ctx.node.source,
            f"the NVLink speed of GPU {index}",
            ctx.node.unknown_reason(f"gpu{index}.nvlink", "no per-link speed reported"),
            props,
        )
    slow = [link.link for link in active if link.speed_gbps is not None and link.speed_gbps < threshold.value]
    if slow:
        return failed(
            f"GPU {index}: link(s) {', '.join(map(str, slow))} run at {slowest:.3f} GB/s, below "
            f"{threshold.value} GB/s ({threshold.where()}); likely cause: links trained at reduced speed or a "
            "reduced NVLink bandwidth mode (nvidia-smi nvlink -gbm) — check cabling and nvlink -s",
            props,
        )
    mode = ctx.node.nvlink_bw_mode
    if mode not in (None, "full"):
        # Links can report full line rate while the system caps NVLink bandwidth (nvmlSystemGetNvlinkBwMode).
        return failed(
            f"GPU {index}: links run at {slowest:.3f} GB/s but the system NVLink bandwidth mode is {mode!r}, not "
            f"'full'; likely cause: a power/thermal policy or admin setting — check `nvidia-smi nvlink -gbm`",
            [*props, ("nvlink_bw_mode", mode)],
        )
    if mode is None:
        # Older drivers lack nvmlSystemGetNvlinkBwMode: the speeds pass, but the mode stays an open question.
        reason = ctx.node.unknown_reason("nvlink_bw_mode", "the source does not report it")
        return passed(
            f"GPU {index}: slowest active link {slowest:.3f} GB/s; NVLink bandwidth mode unknown ({reason})",
            [*props, ("nvlink_bw_mode", "unknown"), ("nvlink_bw_mode_reason", reason)],
        )
    return passed(f"GPU {index}: slowest active link {slowest:.3f} GB/s", [*props, ("nvlink_bw_mode", mode)])


@per_gpu
def nvlink_errors(ctx: Context, gpu: Gpu) -> Verdict:
    no_nvlink = _no_nvlink_expected(ctx)
    if no_nvlink is not None:
        return no_nvlink
    dead = _no_active_links(ctx, gpu, "NVLink error counters")
    if dead:
        return dead
    return judge_error_counters(ctx.thresholds, ctx.node, gpu, gpu_properties(gpu))


# --- pairs ------------------------------------------------------------------------------------


def pair_path(ctx: Context, a: int, b: int) -> Verdict:
    if ctx.suite.crosses_hosts(a, b):
        return ctx.cross_host_pair(a, b)
    missing = ctx.first_unusable(a, b)
    if missing is not None:
        return ctx.missing_gpu(missing)
    expected = ctx.suite.expected_path(a, b)
    key = ctx.path_key(a, b)
    actual = ctx.node.path(a, b)
    if actual is None:
        return unknown(
            ctx.node.source,
            f"the path between GPU {a} and GPU {b}",
            ctx.node.unknown_reason(f"pair{a}-{b}.path", ctx.node.unknown_reason("paths", "topology not reported")),
            _path_props(ctx, (a, b), actual, expected),
        )
    if path_matches(expected, actual):
        return PassedLater(functools.partial(_path_passed, ctx, (a, b), actual, expected))
    return failed(_path_message(ctx, (a, b), actual, expected, key), _path_props(ctx, (a, b), actual, expected))


def _path_props(ctx: Context, pair: tuple[int, int], actual: str | None, expected: str) -> list[tuple[str, str]]:
    suite = ctx.suite_at(ctx.path_key(*pair))
    return measured_properties(actual, expected, "path class", suite=suite) + pair_properties(ctx, *pair)


def _path_passed(ctx: Context, pair: tuple[int, int], actual: str, expected: str) -> tuple[str, list[tuple[str, str]]]:
    return f"GPU {pair[0]} <-> GPU {pair[1]}: {actual}", _path_props(ctx, pair, actual, expected)


def _path_message(ctx: Context, pair: tuple[int, int], actual: str, expected: str, key: str) -> str:
    a, b = pair
    head = f"GPU {a} <-> GPU {b}: path is {actual}, expected {expected} ({ctx.suite_where(key)})"
    got_links, want_links = nvlink_count_of_path(actual), nvlink_count_of_path(expected)
    if not is_known_path_class(actual):
        return f"{head}: {actual!r} is not a path class nvidia-smi prints, so the source is damaged or mis-parsed"
    if expected.startswith("NV") and got_links is None:
        mode = ctx.node.virtualization()
        vm = f"this node is a {mode} VM guest, " if mode in ("passthrough", "vgpu") or ctx.node.hypervisor else ""
        return (
            f"{head}: silent PCIe fallback — {vm}traffic between these GPUs crosses PCIe/host memory instead "
            "of NVLink; check that NVLink/NVSwitch are passed through (host `nvidia-smi topo -m` must show "
            "NV#), that Fabric Manager runs, and for A100 vGPU that UVM is disabled"
        )
    if want_links is not None and got_links is not None and got_links < want_links:
        return f"{head}: {want_links - got_links} NVLink(s) missing between them; likely cause: {_short_gpu(ctx, a, b)}"
    if want_links is not None and got_links is not None:
        return _more_links_message(ctx, head, got_links, want_links)
    if got_links is not None and not expected.startswith("NV"):
        return f"{head}: NVLink found where the suite expects PCIe, so the node is not the shape the suite describes"
    return f"{head}: the PCIe placement differs from the suite (different slots or a different board)"


def _more_links_message(ctx: Context, head: str, got_links: int, want_links: int) -> str:
    per_gpu = ctx.thresholds.get("nvlink.active_links")
    if per_gpu is not None and got_links > int(per_gpu.value):
        return (
            f"{head}: more NVLinks than this SKU has per GPU ({per_gpu.where()} = {per_gpu.value}), so the suite "
            "or threshold set does not describe this node, or the source is damaged; pick the matching suite "
            "(--nvlink-suite=auto)"
        )
    return (
        f"{head}: {got_links - want_links} NVLink(s) more than the suite expects between them, so the suite "
        "does not describe this node (a different SKU or board); pick the matching suite (--nvlink-suite=auto)"
    )


def _short_gpu(ctx: Context, a: int, b: int) -> str:
    expected = int(ctx.thresholds.value("nvlink.active_links", 0))
    for index in (a, b):
        gpu = ctx.node.gpu(index)
        active = gpu.active_link_count() if gpu else None
        if active is not None and active < expected:
            return (
                f"GPU {index} has only {active} of {expected} NVLinks active (see test_nvlink_active_links[gpu{index}])"
            )
    return "a link down on one of the two GPUs or its NVSwitch port (check `nvidia-smi nvlink -s`)"


_P2P_CAPS_ON_NVLINK: tuple[str, ...] = ("read", "write", "nvlink")
_ALL_OK = ",".join(f"{cap}=ok" for cap in _P2P_CAPS_ON_NVLINK)
_CAPS_SHOWN = "/".join(_P2P_CAPS_ON_NVLINK)


def p2p_status(ctx: Context, src: int, dst: int) -> Verdict:
    guard = ctx.nvlink_pair_guard(src, dst, "P2P over PCIe is not required")
    if guard:
        return guard
    status = ctx.node.p2p_status(src, dst)
    # Read/write access alone holds for P2P over PCIe too: an NVLink pair needs the NVLink capability stated.
    if status is not None and status.read == status.write == status.nvlink == "ok":  # most pairs of a healthy domain
        return PassedLater(functools.partial(_p2p_all_ok, ctx, src, dst))
    shown = {cap: (status.get(cap) if status else None) for cap in _P2P_CAPS_ON_NVLINK}
    props = _p2p_props(ctx, src, dst, ",".join(f"{k}={v}" for k, v in shown.items()))
    # A capability stated unusable fails the pair even when another one was not stated.
    bad = {cap: str(value) for cap, value in shown.items() if value not in (None, "ok")}
    if not bad and any(v is None for v in shown.values()):
        return unknown(
            ctx.node.source,
            f"the P2P status GPU {src} -> GPU {dst}",
            ctx.node.unknown_reason(f"p2p{src}-{dst}", ctx.node.unknown_reason("p2p", "P2P status not reported")),
            props,
        )
    if not bad:
        return passed(f"GPU {src} -> GPU {dst}: P2P {'/'.join(shown)} ok", props)
    detail = ", ".join(f"{cap} {value}" for cap, value in bad.items())
    return failed(
        f"GPU {src} -> GPU {dst}: P2P not usable ({detail}) although the suite expects "
        f"{ctx.suite.expected_path(src, dst)} ({ctx.suite_where(ctx.path_key(src, dst))}); likely cause: "
        f"{_p2p_cause(ctx.node, bad)}",
        props,
    )


def _p2p_all_ok(ctx: Context, src: int, dst: int) -> tuple[str, list[tuple[str, str]]]:
    return f"GPU {src} -> GPU {dst}: P2P {_CAPS_SHOWN} ok", _p2p_props(ctx, src, dst, _ALL_OK)


def _p2p_props(ctx: Context, src: int, dst: int, measured: str) -> list[tuple[str, str]]:
    return [
        ("measured", measured),
        ("expected", "read,write,nvlink=ok"),
        ("unit", "P2P status"),
        # P2P is required because the suite expects NVLink between these GPUs.
        *suite_key_properties(*ctx.suite_at(ctx.path_key(src, dst))),
        *pair_properties(ctx, src, dst),
    ]


def _p2p_cause(node: Node, bad: dict[str, str]) -> str:
    values = set(bad.values())
    mode = node.virtualization()
    if mode in ("passthrough", "vgpu") or node.hypervisor:
        return (
            f"this {mode or 'VM'} guest does not expose NVLink P2P, so copies fall back silently to PCIe or "
            "host memory — ask the provider for NVLink/NVSwitch passthrough"
        )
    if "disabled_by_regkey" in values:
        return (
            "P2P disabled by a driver registry key (RMForceP2PType / NVreg options in /etc/modprobe.d) — "
            "remove it and reload the driver"
        )
    if values & {"chipset_not_supported", "ioh_topology_not_supported"}:
        return "the platform (chipset/IOMMU/ACS or a VM) blocks P2P — check ACS and IOMMU settings"
    return "P2P is not enabled between these GPUs — check Fabric Manager and `nvidia-smi topo -p2p rw`"
