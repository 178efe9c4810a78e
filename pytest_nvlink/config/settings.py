"""Suites and threshold files (TOML): locating, inheriting, validating.

Errors are :class:`ConfigError` carrying ``file:key`` so that the plugin can turn them into one
``pytest.UsageError`` line a person can fix. Nothing here imports pytest.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Re-exported (PEP 484 `as` form): every reader of suites and thresholds imports them from here.
from pytest_nvlink.config.values import Check as Check  # noqa: PLC0414
from pytest_nvlink.config.values import ConfigError as ConfigError  # noqa: PLC0414
from pytest_nvlink.config.values import boolean as _boolean
from pytest_nvlink.config.values import check_nesting, divides
from pytest_nvlink.config.values import int_range as _int_range
from pytest_nvlink.config.values import number as _number
from pytest_nvlink.config.values import text as _text
from pytest_nvlink.core.textfile import MIB, UnreadableText, parse_problem, read_text_file
from pytest_nvlink.model import ERROR_COUNTER_NAMES, PCIE_PATH_CLASSES, nvlink_count_of_path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

PACKAGE_DIR = Path(__file__).resolve().parents[1]
COLLECTIVE_OPS: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "all_to_all",
    "sendrecv",
)


def data_dir(kind: str) -> Path:
    """Where the shipped ``suites`` or ``thresholds`` live: inside the wheel, else the source tree."""
    for candidate in (PACKAGE_DIR / "_data" / kind, PACKAGE_DIR.parent / kind):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"{PACKAGE_DIR}: shipped {kind}/ folder not found; the installation is incomplete")


def shipped_names(kind: str, pattern: str = "*.toml") -> list[str]:
    return sorted(p.stem for p in data_dir(kind).glob(pattern))


# --- threshold schema -------------------------------------------------------------------------

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
}


def error_total_key(counter: str) -> str:
    """Limit on the lifetime total (since the driver loaded) of one NVLink error counter, summed over links."""
    return f"nvlink_errors.{counter}_total_max"


def error_run_key(counter: str) -> str:
    """Limit on the increase of one NVLink error counter during this run's measurement campaign."""
    return f"nvlink_errors.{counter}_{RUN_LIMIT_KIND[counter]}"


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
}
for _counter in ERROR_COUNTER_NAMES:
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


def _flatten(table: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, dotted + ".")
        else:
            yield dotted, value


TOML_MAX_BYTES = 4 * MIB


def read_toml(path: Path) -> dict[str, Any]:
    try:
        text = read_text_file(path, TOML_MAX_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnreadableText as exc:
        raise ConfigError(f"{path}: {exc}") from None
    try:
        document: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({parse_problem(exc, text)})") from None
    check_nesting(path, document)
    return document


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


# --- suites -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairExpectation:
    """The path class a suite expects between GPUs ``a`` and ``b`` ([topology] pairs)."""

    a: int
    b: int
    path: str  # "NV12", "NV" (any NVLink), "PCIE" (any PCIe class) or one PCIe class


@dataclass
class Measure:
    """How a live run measures: copy sizes, iterations, warm-ups, timeout and pair mode ([measure])."""

    p2p_size_mib: int = 256
    p2p_iterations: int = 20
    p2p_warmup: int = 3
    latency_iterations: int = 200
    collective_iterations: int = 20
    collective_warmup: int = 5
    timeout_s: int = 600
    pair_mode: str = "serial"  # "serial" | "concurrent"
    collectives: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


@dataclass
class Suite:
    """A suite file: the node it expects (GPU count, models, NVSwitch, paths) and its threshold set."""

    name: str
    file: Path
    description: str
    thresholds_ref: str
    gpu_count: int
    gpu_models: tuple[str, ...]
    nvswitch: bool
    default_path: str
    pairs: dict[tuple[int, int], PairExpectation]
    measure: Measure
    pair_items: str = "auto"  # PAIR_ITEMS
    # A node spanning several hosts (an NVL72 rack: 18 trays x 4): GPU i sits on host slot i // gpus_per_host.
    gpus_per_host: int | None = None

    def host_slot(self, index: int) -> int | None:
        return None if self.gpus_per_host is None else index // self.gpus_per_host

    def crosses_hosts(self, a: int, b: int) -> bool:
        """The suite places the two GPUs on different hosts: copy engines and NVML pair facts cannot span them."""
        return self.host_slot(a) != self.host_slot(b)

    def expected_path(self, a: int, b: int) -> str:
        low, high = min(a, b), max(a, b)
        found = self.pairs.get((low, high))
        return found.path if found else self.default_path

    def pair_expects_nvlink(self, a: int, b: int) -> bool:
        return self.expected_path(a, b).startswith("NV")

    def expects_any_nvlink(self) -> bool:
        every = [(a, b) for a in range(self.gpu_count) for b in range(a + 1, self.gpu_count)]
        return any(self.pair_expects_nvlink(a, b) for a, b in every)

    def model_matches(self, name: str | None) -> bool:
        """Exact match on the normalized name: a substring test would take a GB200 for a B200."""
        return name is not None and normalize_model_name(name) in {normalize_model_name(m) for m in self.gpu_models}


def normalize_model_name(name: str) -> str:
    """The comparable form of a model name: ``NVIDIA H100 80GB HBM3`` -> ``h100 80gb hbm3``.

    NVML and nvidia-smi print ``NVIDIA <model>`` (older drivers print the bare model), so a suite lists
    the model as NVML names it and both spellings match; nothing else is loosened.
    """
    words = name.split()
    if words and words[0].casefold() == "nvidia":
        words = words[1:]
    return " ".join(words).casefold()


def path_matches(expected: str, actual: str) -> bool:
    if expected == "PCIE":
        return actual in PCIE_PATH_CLASSES
    if expected == "NV":
        return nvlink_count_of_path(actual) is not None
    return actual == expected


def _valid_expected_path(value: Any) -> bool:
    return isinstance(value, str) and (
        value in ("PCIE", "NV", *PCIE_PATH_CLASSES) or nvlink_count_of_path(value) is not None
    )


_SUITE_KEYS = {"suite", "topology", "measure"}
_SUITE_FIELDS = {"description", "thresholds", "gpu_count", "gpu_models", "nvswitch", "gpus_per_host", "pair_items"}
PAIR_ITEMS = ("auto", "pair", "source")  # one test item per GPU pair, or per source GPU; auto: by GPU count


def resolve_suite_path(ref: str) -> Path:
    """A shipped suite name, or a path to a suite file."""
    if ref.endswith(".toml") or "/" in ref:
        return Path(ref).expanduser()
    path = data_dir("suites") / f"{ref}.toml"
    if not path.is_file():
        raise ConfigError(f"{ref}: unknown suite; shipped suites: {', '.join(shipped_names('suites'))}")
    return path


def load_suite(ref: str) -> Suite:
    path = resolve_suite_path(ref)
    raw = read_toml(path)
    for key in raw:
        if key not in _SUITE_KEYS:
            raise ConfigError(f"{path}:{key}: unknown table (expected suite, topology, measure)")
    head = _table(path, raw, "suite")
    for key in head:
        if key not in _SUITE_FIELDS:
            raise ConfigError(f"{path}:suite.{key}: unknown key")
    count = _require(path, head, "suite.gpu_count", _int_range(1, 1024))
    models = head.get("gpu_models")
    if not isinstance(models, list) or not models or not all(isinstance(m, str) and m for m in models):
        raise ConfigError(f"{path}:suite.gpu_models: expected a non-empty list of model names")
    return Suite(
        name=path.stem,
        file=path,
        description=_require(path, head, "suite.description", _text),
        thresholds_ref=_require(path, head, "suite.thresholds", _text),
        gpu_count=count,
        gpu_models=tuple(models),
        nvswitch=bool(_require(path, head, "suite.nvswitch", _boolean)),
        default_path=_default_path(path, raw),
        pairs=_pair_expectations(path, raw, count),
        measure=_measure(path, raw),
        pair_items=_pair_items(path, head),
        gpus_per_host=_require(path, head, "suite.gpus_per_host", divides(count)) if "gpus_per_host" in head else None,
    )


def _pair_items(path: Path, head: dict[str, Any]) -> str:
    value = head.get("pair_items", "auto")
    if value not in PAIR_ITEMS:
        raise ConfigError(f"{path}:suite.pair_items: expected {', '.join(map(repr, PAIR_ITEMS))}, got {value!r}")
    return str(value)


def _table(path: Path, raw: dict[str, Any], name: str) -> dict[str, Any]:
    table = raw.get(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}:{name}: expected a table")
    return table


def _require(path: Path, table: dict[str, Any], dotted: str, check: Check) -> Any:
    key = dotted.rsplit(".", 1)[-1]
    if key not in table:
        raise ConfigError(f"{path}:{dotted}: required key missing")
    problem = check(table[key])
    if problem:
        raise ConfigError(f"{path}:{dotted}: {problem}")
    return table[key]


def _default_path(path: Path, raw: dict[str, Any]) -> str:
    topology = _table(path, raw, "topology")
    unknown = set(topology) - {"default", "pairs"}
    if unknown:
        raise ConfigError(f"{path}:topology.{sorted(unknown)[0]}: unknown key")
    value = topology.get("default")
    if not _valid_expected_path(value):
        raise ConfigError(f"{path}:topology.default: expected NV<n>, NV, PCIE or a PCIe class, got {value!r}")
    return str(value)


def _pair_expectations(path: Path, raw: dict[str, Any], count: int) -> dict[tuple[int, int], PairExpectation]:
    entries = _table(path, raw, "topology").get("pairs", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{path}:topology.pairs: expected an array of tables")
    result: dict[tuple[int, int], PairExpectation] = {}
    for i, entry in enumerate(entries):
        where = f"{path}:topology.pairs[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"gpus", "path"}:
            raise ConfigError(f'{where}: expected {{ gpus = [a, b], path = "NV12" }}')
        gpus = entry["gpus"]
        valid_gpus = isinstance(gpus, list) and len(gpus) == 2 and all(isinstance(g, int) for g in gpus)
        if not valid_gpus or gpus[0] == gpus[1] or not all(0 <= g < count for g in gpus):
            raise ConfigError(f"{where}.gpus: expected two different GPU indices below {count}, got {gpus!r}")
        if not _valid_expected_path(entry["path"]):
            raise ConfigError(f"{where}.path: expected NV<n>, NV, PCIE or a PCIe class, got {entry['path']!r}")
        low, high = sorted(gpus)
        if (low, high) in result:
            raise ConfigError(f"{where}.gpus: pair ({low}, {high}) is listed twice")
        result[(low, high)] = PairExpectation(low, high, entry["path"])
    return result


_MEASURE_CHECKS: dict[str, Check] = {
    "p2p_size_mib": _int_range(1, 1 << 16),
    "p2p_iterations": _int_range(1, 10_000),
    "p2p_warmup": _int_range(0, 10_000),
    "latency_iterations": _int_range(1, 1_000_000),
    "collective_iterations": _int_range(1, 10_000),
    "collective_warmup": _int_range(0, 10_000),
    "timeout_s": _int_range(1, 86_400),
}


def _measure(path: Path, raw: dict[str, Any]) -> Measure:
    table = _table(path, raw, "measure")
    measure = Measure()
    for key, value in table.items():
        where = f"{path}:measure.{key}"
        if key in _MEASURE_CHECKS:
            problem = _MEASURE_CHECKS[key](value)
            if problem:
                raise ConfigError(f"{where}: {problem}")
            setattr(measure, key, value)
        elif key == "pair_mode":
            if value not in ("serial", "concurrent"):
                raise ConfigError(f'{where}: expected "serial" or "concurrent", got {value!r}')
            measure.pair_mode = value
        elif key == "collectives":
            if not isinstance(value, list) or any(op not in COLLECTIVE_OPS for op in value):
                raise ConfigError(f"{where}: expected a list drawn from {', '.join(COLLECTIVE_OPS)}")
            measure.collectives = tuple(value)
        else:
            raise ConfigError(f"{where}: unknown key")
    return measure


def suite_summaries() -> list[tuple[str, str]]:
    """(name, one-line description) for every shipped suite; broken files say so instead."""
    rows = []
    for name in shipped_names("suites"):
        try:
            rows.append((name, load_suite(name).description))
        except ConfigError as exc:
            rows.append((name, f"unreadable: {exc}"))
    return rows


def pick_suite_for(model: str | None, count: int) -> str | None:
    """The shipped suite whose accepted models and GPU count fit a probed node."""
    for name in shipped_names("suites"):
        suite = load_suite(name)
        if suite.gpu_count == count and suite.model_matches(model):
            return name
    return None
