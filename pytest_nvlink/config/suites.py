"""Suite files (TOML): the node a suite expects (GPU count, models, NVSwitch, paths), how a live run
measures it, and which shipped suite fits a probed node.

Errors are :class:`~pytest_nvlink.config.values.ConfigError` carrying ``file:key``. Nothing here imports pytest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_nvlink.config.shipped import COLLECTIVE_OPS, data_dir, read_toml, shipped_names
from pytest_nvlink.config.values import Check, ConfigError, divides
from pytest_nvlink.config.values import boolean as _boolean
from pytest_nvlink.config.values import int_range as _int_range
from pytest_nvlink.config.values import text as _text
from pytest_nvlink.model import PCIE_PATH_CLASSES, nvlink_count_of_path


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
    # One P2P pair's deadline starts here and grows with its planned bytes; a hung pair fails alone.
    p2p_pair_floor_s: int = 60
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
    "p2p_pair_floor_s": _int_range(1, 86_400),
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
