"""Topology verdicts: the path class of every GPU pair and the P2P status of every ordered pair."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from itertools import chain, repeat
from typing import cast

from pytest_nvlink.config.suites import path_matches
from pytest_nvlink.judges.context import Context, pair_properties
from pytest_nvlink.judges.mig import mig_cause, mig_note, with_mig_cause
from pytest_nvlink.model import Node, is_known_path_class, nvlink_count_of_path
from pytest_nvlink.verdict import (
    PassedLater,
    Verdict,
    failed,
    measured_properties,
    passed,
    suite_key_properties,
    unknown,
)


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
            f"the path between GPU {a} and GPU {b}",
            ctx.node.unknown_reason(f"pair{a}-{b}.path", ctx.node.unknown_reason("paths", "topology not reported")),
            _path_props(ctx, (a, b), actual, expected),
        )
    if path_matches(expected, actual):
        return PassedLater(functools.partial(_path_passed, ctx, (a, b), actual, expected))
    return failed(_path_message(ctx, (a, b), actual, expected, key), _path_props(ctx, (a, b), actual, expected))


def passing_paths(ctx: Context, pairs: Sequence[tuple[int, int]]) -> list[float | None] | None:
    """One None (no figure to rank by) per pair when every pair surely passes :func:`pair_path`, else None."""
    ready, suite = ctx.ready_gpus(), ctx.suite
    if not all(map(ready.get, chain.from_iterable(pairs), repeat(False))):
        return None  # first_unusable names a GPU
    if suite.gpus_per_host is not None and any(map(suite.crosses_hosts, map(_FIRST, pairs), map(_SECOND, pairs))):
        return None
    ordered = all(map(operator.lt, map(_FIRST, pairs), map(_SECOND, pairs)))  # a group's (a, b) have a < b
    found = list(map(ctx.path_classes().get, pairs if ordered else [(min(p), max(p)) for p in pairs]))
    if not all(found):  # one not reported (an empty class matches no expectation either)
        return None
    actual = cast("list[str]", found)
    if not all(map(path_matches, map(suite.expected_path, map(_FIRST, pairs), map(_SECOND, pairs)), actual)):
        return None
    return [None] * len(pairs)


_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)


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
        fallback = (
            f"silent PCIe fallback — {vm}traffic between these GPUs crosses PCIe/host memory instead "
            "of NVLink; check that NVLink/NVSwitch are passed through (host `nvidia-smi topo -m` must show "
            "NV#), that Fabric Manager runs, and for A100 vGPU that UVM is disabled"
        )
        mig = mig_cause(ctx.node, pair)
        return f"{head}: {fallback}" if mig is None else f"{head}: likely cause: {mig}; otherwise {fallback}"
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
            f"the P2P status GPU {src} -> GPU {dst}",
            ctx.node.unknown_reason(f"p2p{src}-{dst}", ctx.node.unknown_reason("p2p", "P2P status not reported"))
            + mig_note(ctx.node, (src, dst)),
            props,
        )
    if not bad:
        return passed(f"GPU {src} -> GPU {dst}: P2P {'/'.join(shown)} ok", props)
    detail = ", ".join(f"{cap} {value}" for cap, value in bad.items())
    return failed(
        f"GPU {src} -> GPU {dst}: P2P not usable ({detail}) although the suite expects "
        f"{ctx.suite.expected_path(src, dst)} ({ctx.suite_where(ctx.path_key(src, dst))}); likely cause: "
        f"{with_mig_cause(ctx.node, (src, dst), _p2p_cause(ctx.node, bad))}",
        props,
    )


def passing_statuses(ctx: Context, pairs: Sequence[tuple[int, int]]) -> list[float | None] | None:
    """One None per pair when every pair surely passes :func:`p2p_status` (read, write and nvlink ok), else None."""
    if not ctx.all_usable(pairs):
        return None
    statuses = list(map(ctx.p2p_statuses().get, pairs))
    # all(): a record is true, None false; "None in" would call each record's dataclass __eq__.
    if not all(statuses) or {*map(_CAPS_ON_NVLINK_OF, statuses)} - {_ALL_OK_CAPS}:
        return None
    return [None] * len(pairs)


_CAPS_ON_NVLINK_OF = operator.attrgetter(*_P2P_CAPS_ON_NVLINK)
_ALL_OK_CAPS = ("ok",) * len(_P2P_CAPS_ON_NVLINK)


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
