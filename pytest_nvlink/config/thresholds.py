"""Threshold files (TOML): the key schema, resolving a set through its ``extends`` chain, a site file
laid over it, and waivers.

Errors are :class:`~pytest_nvlink.config.values.ConfigError` carrying ``file:key`` so that the plugin can
turn them into one ``pytest.UsageError`` line a person can fix. Nothing here imports pytest.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_nvlink.config.shipped import COLLECTIVE_OPS, data_dir, read_toml, shipped_names
from pytest_nvlink.config.values import Check, ConfigError
from pytest_nvlink.config.values import boolean as _boolean
from pytest_nvlink.config.values import int_range as _int_range
from pytest_nvlink.config.values import number as _number
from pytest_nvlink.config.values import text as _text
from pytest_nvlink.model import ALL_ERROR_COUNTER_NAMES, ERROR_COUNTER_NAMES, NVLINK5_ERROR_COUNTER_NAMES

_COUNT = _int_range(0, 1 << 62)
# Upper bounds are generous sanity limits (NVLink5 moves 900 GB/s per direction; DCGM's pcie plugin
# defaults max_latency to 100000 us): a figure beyond them is a typo or an attempt to switch a check off.
_GBPS = _number(0, 10_000)
_LINK_GBPS = _number(0, 1_000)
_LATENCY_US = _number(0, 100_000)
_FRACTION = _number(0, 1)
_RATE_PER_S = _number(0, 1e9, low_allowed=True)

# The increase of each NVLink error counter during a run is limited either as a count per run or,
# where the vendor states a rate (CRC, DCGM health watch), per second of the measurement window.
RUN_LIMIT_KIND: dict[str, str] = {
    "replay": "run_max",
    "recovery": "run_max",
    "crc_flit": "per_s_max",
    "crc_data": "per_s_max",
    "ecc_data": "run_max",
    # NVLink 5: DCGM's health watch fails on any increase of each (test_health.py, nvlink5 error counters).
    **dict.fromkeys(NVLINK5_ERROR_COUNTER_NAMES, "run_max"),
}


def error_total_key(counter: str) -> str:
    """Limit on the lifetime total (since the driver loaded) of one NVLink error counter, summed over links."""
    return f"nvlink_errors.{counter}_total_max"


def error_run_key(counter: str) -> str:
    """Limit on the increase of one NVLink error counter during this run's measurement campaign."""
    return f"nvlink_errors.{counter}_{RUN_LIMIT_KIND[counter]}"


def _xid_list(value: Any) -> str | None:
    """``xid.fail``: the Xid numbers that fail a GPU, each listed once."""
    if not isinstance(value, list):
        return f"expected a list of Xid numbers, got {type(value).__name__}"
    if not value:
        return 'an empty list fails no Xid; waive the key with a reason instead ([waive] "xid.fail" = "why")'
    for item in value:
        problem = _XID(item)
        if problem:
            return f"{item!r}: {problem}"
    repeated = sorted({item for item in value if value.count(item) > 1})
    return f"Xid {repeated[0]} is listed twice" if repeated else None


def _mig_required(value: Any) -> str | None:
    """``inventory.mig``: "off" (no GPU in MIG mode, which has no P2P) or "on" (a node kept partitioned)."""
    return None if value in ("off", "on") else f'expected "off" or "on", got {value!r}'


_XID = _int_range(1, 65_535)  # NVIDIA's Xid catalogue numbers them from 1 (173 in R580); the room is generous


THRESHOLD_SCHEMA: dict[str, Check] = {
    "sku.name": _text,
    "nvlink.version": _int_range(1, 7),
    "nvlink.active_links": _int_range(0, 36),
    "nvlink.link_speed_min_gbps": _LINK_GBPS,
    "pcie.generation_min": _int_range(1, 6),
    "pcie.width_min": _int_range(1, 16),
    "fabric.required": _boolean,
    "fabric.clique_required": _boolean,  # the GPUs share one multi-node NVLink clique (NVL72 racks)
    "p2p.unidirectional_min_gbps": _GBPS,
    "p2p.bidirectional_min_gbps": _GBPS,
    "p2p.latency_max_us": _LATENCY_US,
    "p2p.sendrecv_min_gbps": _GBPS,  # per direction, NCCL send/recv between two ranks (across hosts of a rack)
    "p2p.nvlink_counter_fraction_min": _FRACTION,
    # At least 1: a copy moves at least its own bytes over the link it used.
    "p2p.nvlink_counter_fraction_max": _number(1.0, 100.0, low_allowed=True),
    # Which Xid numbers, seen during the run (NVML events, a kernel log), fail the GPU they name.
    "xid.fail": _xid_list,
    # Optional: the MIG mode every GPU must have, now and after its next reset (judges/mig.py); absent, none is.
    "inventory.mig": _mig_required,
    # Each GPU's host link, pinned host memory <-> GPU memory on the copy engine (GB/s, 1e9 bytes/s).
    "host_link.h2d_min_gbps": _GBPS,
    "host_link.d2h_min_gbps": _GBPS,
    # Each direction's share while both directions run at once (nvbandwidth's *_bidirectional_memcpy_ce).
    "host_link.bidir_min_gbps": _GBPS,
    # A GPU this fraction or more below the node's median of the same direction fails even above the floor.
    "host_link.below_median_max_fraction": _number(0, 1),
    # NVLink-C2C to a Grace CPU: whether the GPU must report it with every link active, and each link's floor.
    "c2c.required": _boolean,
    "c2c.link_max_bw_min_gbps": _LINK_GBPS,
}
for _counter in ALL_ERROR_COUNTER_NAMES:
    THRESHOLD_SCHEMA[error_total_key(_counter)] = _COUNT
    THRESHOLD_SCHEMA[error_run_key(_counter)] = _RATE_PER_S if RUN_LIMIT_KIND[_counter] == "per_s_max" else _COUNT
for _op in COLLECTIVE_OPS:
    THRESHOLD_SCHEMA[f"collectives.{_op}.size_mib"] = _int_range(1, 1 << 20)
    THRESHOLD_SCHEMA[f"collectives.{_op}.busbw_min_gbps"] = _GBPS
    THRESHOLD_SCHEMA[f"collectives.{_op}.assumes_nvls"] = _boolean
# How much worse than the node's own last known good run (--nvlink-baseline) a figure may get, in %.
BASELINE_TOLERANCE_KEYS: tuple[str, ...] = (
    "baseline.p2p_drop_max_pct",
    "baseline.latency_rise_max_pct",
    "baseline.collective_drop_max_pct",
)
THRESHOLD_SCHEMA["baseline.p2p_drop_max_pct"] = _number(0, 100, low_allowed=True)
THRESHOLD_SCHEMA["baseline.latency_rise_max_pct"] = _number(0, 1_000, low_allowed=True)
THRESHOLD_SCHEMA["baseline.collective_drop_max_pct"] = _number(0, 100, low_allowed=True)

# Keys of earlier versions: a site file still using one stops the run and says what replaced it.
RENAMED_KEYS: dict[str, str] = {
    **{
        f"nvlink_errors.{c}_max": (
            f"renamed: lifetime totals and the increase during a run are judged separately; use "
            f"{error_total_key(c)} (total since the driver loaded) and {error_run_key(c)} (increase during "
            "the run)"
        )
        for c in ERROR_COUNTER_NAMES
    },
    "p2p.counters_waived": (
        'replaced by a waiver with a reason: [waive] "p2p.nvlink_counter_fraction_min" = "why the traffic '
        'counters cannot prove the path here"'
    ),
}


# Source: NCCL src/graph/xml.cc fixes a GPU's NVLink maximum by generation (SM version):
# `(sm<60)?0:(sm<70)?4:(sm<80)?6:(sm<90)?12:18` — P100 4, V100 6, A100 12, H100 and Blackwell 18
# (NVIDIA NVLink page: "up to 18 NVLink ... connections" on Blackwell). A link id at or above it is impossible.
LINKS_PER_GENERATION: dict[int, int] = {1: 4, 2: 6, 3: 12, 4: 18, 5: 18}


@dataclass(frozen=True)
class Threshold:
    """One resolved threshold value and the file that set it."""

    key: str
    value: Any
    file: Path

    def where(self) -> str:
        return f"{self.file.name}:{self.key}"


@dataclass(frozen=True)
class Waiver:
    """A threshold key declared not to apply, with the reason and the file that says so."""

    key: str
    reason: str
    file: Path

    def where(self) -> str:
        return f"{self.file.name}:waive.{self.key}"


@dataclass
class Thresholds:
    """A resolved threshold set: every key's value and source file, and the keys waived with a reason."""

    name: str
    files: list[Path]
    values: dict[str, Threshold] = field(default_factory=dict)
    waivers: dict[str, Waiver] = field(default_factory=dict)

    def get(self, key: str) -> Threshold | None:
        return self.values.get(key)

    def value(self, key: str, default: Any = None) -> Any:
        found = self.values.get(key)
        return default if found is None else found.value

    def waiver(self, key: str) -> Waiver | None:
        """The waiver that makes ``key`` not apply, if the resolved files declare one."""
        return self.waivers.get(key)

    def describe(self) -> str:
        """The set's name and its files, root first, as error messages name them."""
        return f"{self.name} ({' -> '.join(p.name for p in self.files)})"

    def collectives(self) -> list[str]:
        return [op for op in COLLECTIVE_OPS if f"collectives.{op}.busbw_min_gbps" in self.values]

    def link_ids(self) -> tuple[int, Threshold] | None:
        """How many NVLink ids a GPU of this SKU has (numbered from 0), from its NVLink generation, with the
        threshold that says which generation; None when the set names none."""
        version = self.get("nvlink.version")
        if version is None or isinstance(version.value, bool) or version.value not in LINKS_PER_GENERATION:
            return None
        return LINKS_PER_GENERATION[version.value], version


def _flatten(table: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, dotted + ".")
        else:
            yield dotted, value


def _threshold_path(ref: str, relative_to: Path | None) -> Path:
    if ref.endswith(".toml") or "/" in ref:
        path = Path(ref).expanduser()
        return path if path.is_absolute() or relative_to is None else relative_to.parent / path
    path = data_dir("thresholds") / f"{ref}.toml"
    if not path.is_file():
        known = ", ".join(shipped_names("thresholds"))
        where = f"{relative_to}:extends" if relative_to else ref
        raise ConfigError(f"{where}: unknown threshold set {ref!r}; shipped sets: {known}")
    return path


WAIVE_TABLE = "waive"


def _validate_threshold_file(path: Path, raw: dict[str, Any]) -> tuple[dict[str, Threshold], dict[str, Waiver]]:
    values: dict[str, Threshold] = {}
    for key, value in _flatten({k: v for k, v in raw.items() if k != WAIVE_TABLE}):
        if key in ("schema", "extends"):
            continue
        values[key] = Threshold(key, _checked_value(path, key, value), path)
    waivers = _waivers(path, raw.get(WAIVE_TABLE, {}))
    both = sorted(set(values) & set(waivers))
    if both:
        raise ConfigError(f"{path}:waive.{both[0]}: the same file both sets and waives this key; keep one")
    if raw.get("schema", 1) != 1:
        raise ConfigError(f"{path}:schema: version {raw.get('schema')!r} is not supported (expected 1)")
    return values, waivers


def _checked_value(path: Path, key: str, value: Any) -> Any:
    if key in RENAMED_KEYS:
        raise ConfigError(f"{path}:{key}: {RENAMED_KEYS[key]}")
    check = THRESHOLD_SCHEMA.get(key)
    if check is None:
        raise ConfigError(f"{path}:{key}: unknown key")
    problem = check(value)
    if problem:
        raise ConfigError(f"{path}:{key}: {problem}")
    return value


def _waivers(path: Path, table: Any) -> dict[str, Waiver]:
    """``[waive]`` entries: ``"dotted.key" = "reason"``; the reason is what the skip message shows."""
    if not isinstance(table, dict):
        raise ConfigError(f'{path}:{WAIVE_TABLE}: expected a table of "dotted.key" = "reason"')
    waivers: dict[str, Waiver] = {}
    for key, reason in _flatten(table):
        where = f"{path}:{WAIVE_TABLE}.{key}"
        if key not in THRESHOLD_SCHEMA:
            hint = RENAMED_KEYS.get(key, "unknown key")
            raise ConfigError(f"{where}: {hint}")
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(f"{where}: a waiver needs a non-empty reason string (why the check does not apply)")
        waivers[key] = Waiver(key, reason.strip(), path)
    return waivers


def load_thresholds(ref: str, site_file: Path | None = None) -> Thresholds:
    """Resolve a threshold set through its ``extends`` chain, then lay a site file over it.

    A later file overrides an earlier one key by key: a value replaces an inherited waiver and a
    waiver unsets an inherited value.
    """
    chain = _extends_chain(_threshold_path(ref, None))
    if site_file is not None:
        chain += _site_chain(site_file, chain)
    result = Thresholds(name=ref, files=chain)
    for path in chain:
        values, waivers = _validate_threshold_file(path, read_toml(path))
        for key in values:
            result.waivers.pop(key, None)
        for key in waivers:
            result.values.pop(key, None)
        result.values.update(values)
        result.waivers.update(waivers)
    _check_consistency(result)
    return result


def _site_chain(site_file: Path, suite_chain: list[Path]) -> list[Path]:
    """The site file and its own ancestors, laid over the suite's set.

    A site file adjusts the suite's set; it cannot swap in another SKU's set. An ``extends`` that
    reaches a shipped set outside the suite's chain would silently mix two SKUs' figures, so it is
    refused: pick the suite of that SKU (or a suite file naming that set) instead.
    """
    site_raw = read_toml(site_file)
    site_chain = _extends_chain(site_file, first_raw=site_raw) if "extends" in site_raw else [site_file]
    shipped = data_dir("thresholds").resolve()
    for path in site_chain:
        if path not in suite_chain and path.resolve().parent == shipped:
            base = " -> ".join(p.name for p in suite_chain)
            raise ConfigError(
                f"{site_file}:extends: reaches the shipped set {path.stem!r}, which is not part of the suite's "
                f"threshold set ({base}); a site file is laid over the suite's set, so drop `extends` (or extend "
                "a set in that chain), or choose the suite for the other SKU"
            )
    return [p for p in site_chain if p not in suite_chain]


def _extends_chain(path: Path, first_raw: dict[str, Any] | None = None) -> list[Path]:
    """Files from the root ancestor down to ``path``."""
    chain: list[Path] = []
    raw = first_raw if first_raw is not None else read_toml(path)
    while True:
        resolved = path.resolve()
        if resolved in chain:
            cycle = " -> ".join(p.name for p in [*chain, resolved])
            raise ConfigError(f"{path}:extends: inheritance cycle ({cycle})")
        chain.append(resolved)
        parent = raw.get("extends")
        if parent is None:
            return list(reversed(chain))
        if not isinstance(parent, str):
            raise ConfigError(f"{path}:extends: expected the name of a threshold set")
        referencing, path = path, _threshold_path(parent, path)
        if not path.is_file():
            raise ConfigError(f"{referencing}:extends: {parent!r} resolves to {path}, which is not a file")
        raw = read_toml(path)


def _check_consistency(thresholds: Thresholds) -> None:
    _check_host_link(thresholds)
    uni = thresholds.get("p2p.unidirectional_min_gbps")
    bidi = thresholds.get("p2p.bidirectional_min_gbps")
    if uni and bidi and bidi.value < uni.value:
        raise ConfigError(
            f"{bidi.file}:{bidi.key}: {bidi.value} GB/s is below the unidirectional minimum "
            f"{uni.value} GB/s ({uni.where()}); a bidirectional figure counts both directions"
        )
    links = thresholds.get("nvlink.active_links")
    speed = thresholds.get("nvlink.link_speed_min_gbps")
    if links and links.value == 0 and speed is not None:
        # Name both files: the one that set 0 is usually the one to correct, not the shipped speed.
        raise ConfigError(
            f"{speed.file}:{speed.key}: set for a SKU that expects no NVLink ({links.file}:{links.key} = 0); "
            "correct nvlink.active_links, or use a suite whose SKU has no NVLink"
        )


def _check_host_link(thresholds: Thresholds) -> None:
    """A set that requires NVLink-C2C must say how fast each link is (or waive it with a reason)."""
    required = thresholds.get("c2c.required")
    key = "c2c.link_max_bw_min_gbps"
    if required is None or required.value is not True:
        return
    if thresholds.get(key) is None and thresholds.waiver(key) is None:
        raise ConfigError(
            f"{required.file}:{key}: required key missing; {required.where()} = true judges every NVLink-C2C link, "
            f'so set the floor of each link with a `# Source:` comment, or waive it: [waive] "{key}" = "why"'
        )
