"""Which threshold keys a suite's shape requires, checked before anything is judged.

A key the suite needs but the threshold set neither sets nor waives would otherwise turn its
checks into "does not apply" and hide a broken node. The table is data: when a check gains a
key, add it here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_nvlink.config.suites import Suite
from pytest_nvlink.config.thresholds import Thresholds, error_run_key, error_total_key
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.model import ERROR_COUNTER_NAMES, NVLINK5_ERROR_COUNTER_NAMES


@dataclass(frozen=True)
class Requirement:
    """Threshold keys a suite of some shape needs, and why (a usage error names the reason)."""

    because: str  # why the suite needs the keys, as the error message says it
    applies: Callable[[Suite], bool]
    keys: tuple[str, ...]  # "{op}" expands to each collective in the suite's measure.collectives


NVLINK_KEYS: tuple[str, ...] = (
    "nvlink.version",
    "nvlink.link_speed_min_gbps",
    *(error_total_key(c) for c in ERROR_COUNTER_NAMES),
    *(error_run_key(c) for c in ERROR_COUNTER_NAMES),
)
# A set for NVLink 5 (nvlink.version >= 5) judges the NVLink 5 counters instead of the DL ones, which
# nvml.h marks unsupported on Blackwell and later.
NVLINK5_ERROR_KEYS: tuple[str, ...] = (
    *(error_total_key(c) for c in NVLINK5_ERROR_COUNTER_NAMES),
    *(error_run_key(c) for c in NVLINK5_ERROR_COUNTER_NAMES),
)
DL_ERROR_KEYS: tuple[str, ...] = NVLINK_KEYS[2:]
P2P_KEYS: tuple[str, ...] = (
    "p2p.unidirectional_min_gbps",
    "p2p.bidirectional_min_gbps",
    "p2p.latency_max_us",
    "p2p.nvlink_counter_fraction_min",
    "p2p.nvlink_counter_fraction_max",
)
# Every GPU has a host link (PCIe, or NVLink-C2C on Grace): its figures and whether C2C is expected.
HOST_LINK_KEYS: tuple[str, ...] = (
    "host_link.h2d_min_gbps",
    "host_link.d2h_min_gbps",
    "host_link.bidir_min_gbps",
    "host_link.below_median_max_fraction",
    "c2c.required",
)

REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement(
        "every GPU's NVLink count and PCIe link are judged",
        lambda suite: True,
        ("nvlink.active_links", "pcie.generation_min", "pcie.width_min"),
    ),
    Requirement("every GPU's Xid events during the run are judged", lambda suite: True, ("xid.fail",)),
    Requirement("every GPU's host link is judged", lambda suite: True, HOST_LINK_KEYS),
    Requirement("its topology expects NV# pairs", Suite.expects_any_nvlink, NVLINK_KEYS + P2P_KEYS),
    Requirement("suite.nvswitch = true", lambda suite: suite.nvswitch, ("fabric.required",)),
    Requirement(
        "suite.gpus_per_host makes it a rack of several hosts in one NVLink domain",
        lambda suite: suite.gpus_per_host is not None,
        ("fabric.clique_required", "p2p.sendrecv_min_gbps"),
    ),
    Requirement(
        "measure.collectives lists {op}",
        lambda suite: True,
        ("collectives.{op}.busbw_min_gbps", "collectives.{op}.size_mib"),
    ),
)


def required_keys(suite: Suite, nvlink_version: int | None = None) -> dict[str, str]:
    """Every key the suite's shape requires, with the reason, in table order.

    ``nvlink_version`` (the set's ``nvlink.version``) picks the NVLink error counters: 5 and later
    have the NVLink 5 counters, earlier generations (and a set that does not say) the DL counters.
    """
    needed: dict[str, str] = {}
    for requirement in REQUIREMENTS:
        if not requirement.applies(suite):
            continue
        for key in _keys_for_generation(requirement.keys, nvlink_version):
            ops = suite.measure.collectives if "{op}" in key else ("",)
            for op in ops:
                needed.setdefault(key.format(op=op), requirement.because.format(op=op))
    return needed


def _keys_for_generation(keys: tuple[str, ...], nvlink_version: int | None) -> tuple[str, ...]:
    if nvlink_version is None or nvlink_version < 5 or not set(DL_ERROR_KEYS) <= set(keys):
        return keys
    return tuple(key for key in keys if key not in DL_ERROR_KEYS) + NVLINK5_ERROR_KEYS


def check_nvlink_expected(suite: Suite, thresholds: Thresholds) -> None:
    """A set that says the SKU has no NVLink cannot judge a suite that expects NV# pairs.

    With ``nvlink.active_links = 0`` every per-link check reads "does not apply" and a GPU with no
    active link passes its count, so the NVLink the suite expects would go unjudged without a reason.
    """
    links = thresholds.get("nvlink.active_links")
    if links is None or links.value != 0 or not suite.expects_any_nvlink():
        return
    raise ConfigError(
        f"{links.file}:{links.key}: 0 says the SKU has no NVLink, but suite {suite.file} expects NV# pairs "
        f"(topology), so threshold set {thresholds.describe()} cannot judge it; set the SKU's per-GPU NVLink "
        "count, or use a suite whose topology expects no NVLink"
    )


def check_required_keys(suite: Suite, thresholds: Thresholds) -> None:
    """Stop the run when a required key is neither set nor waived, naming suite, set and keys."""
    check_nvlink_expected(suite, thresholds)
    missing = {
        key: because
        for key, because in required_keys(suite, _nvlink_version(thresholds)).items()
        if thresholds.get(key) is None and thresholds.waiver(key) is None
    }
    if not missing:
        return
    first, because = next(iter(missing.items()))
    others = [key for key in missing if key != first]
    more = f" (also missing: {', '.join(others)})" if others else ""
    raise ConfigError(
        f"{thresholds.files[-1]}:{first}: required key missing{more}; suite {suite.file} needs it because "
        f"{because}, and threshold set {thresholds.describe()} neither sets nor waives it. Set it with a "
        f'`# Source:` comment, or waive it with a reason: [waive] "{first}" = "why it does not apply here"'
    )


def _nvlink_version(thresholds: Thresholds) -> int | None:
    version = thresholds.value("nvlink.version")
    return version if isinstance(version, int) else None
