"""Find and read the per-node ``--nvlink-json`` files of a fleet, refusing anything that is not one.

Every file is validated against ``report/results.schema.json`` with one compiled validator, and
the figures the merge reads (P2P values, collective bus bandwidths) must be finite and not
negative. A file that fails any of this is an input error naming the file and key: the merge
stops (exit 2) rather than guess which node the file belonged to or count a node on garbage.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pytest_nvlink.core.gc_pause import collector_paused
from pytest_nvlink.core.textfile import UnreadableText, parse_problem, read_text_file
from pytest_nvlink.report.json_results import RESULTS_KIND, load_schema

# A results file of an 8-GPU node is ~0.3 MiB; a 72-GPU one stays well below this.
RESULTS_MAX_BYTES = 64 * 1024 * 1024
# Top-level field naming the node; older files have only node.host.
HOST_KEY = "host"
T = TypeVar("T")


class FleetInputError(Exception):
    """An input that cannot be merged; the message is one sentence naming the file and key."""


@dataclass(frozen=True)
class NodeFile:
    """One node's results document, as read."""

    host: str
    path: Path
    document: dict[str, Any]


def find_result_files(paths: Iterable[Path]) -> list[Path]:
    """The given files, and every ``*.json`` under the given folders (recursively), sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(_json_files_under(path))
        elif path.is_file():
            found.append(path)
        elif path.exists():
            raise FleetInputError(f"{path}: not a regular file or folder")
        else:
            raise FleetInputError(f"{path}: no such file or folder")
    return sorted(dict.fromkeys(found))


def _json_files_under(folder: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            # Dot files are the atomic writer's temporaries (.name.json.XXXX.tmp) and editors' backups.
            if name.endswith(".json") and not name.startswith("."):
                yield Path(root) / name


def _compiled_validator(schema: dict[str, Any]) -> Callable[[Any], bool] | None:
    """jsonschema-rs's ``is_valid`` when installed (the ``fleet`` extra); None otherwise."""
    try:
        import jsonschema_rs
    except ImportError:
        return None
    validator = jsonschema_rs.validator_for(schema)
    is_valid: Callable[[Any], bool] = validator.is_valid
    return is_valid


def _json_loader() -> Callable[[str], Any]:
    """orjson when installed (the ``fleet`` extra) reads ~5x faster; the standard library otherwise."""
    try:
        import orjson  # noqa: F401
    except ImportError:
        return _stdlib_loads
    return _orjson_loads


def _orjson_loads(data: str) -> Any:
    import orjson

    return orjson.loads(data)


def _stdlib_loads(data: str) -> Any:
    # NaN and Infinity are not JSON; the standard parser would accept them silently.
    return json.loads(data, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class ResultsReader:
    """Reads results files with one JSON parser and one schema validator, both built once.

    With the ``fleet`` extra, orjson parses and jsonschema-rs (compiled, ~0.3 ms a file against
    ~70 ms) validates; the jsonschema package then only words the error of a file that failed.
    """

    def __init__(self) -> None:
        from jsonschema import Draft202012Validator

        schema = load_schema()
        # The top-level host is checked here, so that files with and without it validate alike.
        schema["properties"].pop(HOST_KEY, None)
        schema["required"] = [key for key in schema.get("required", []) if key != HOST_KEY]
        self._validator = Draft202012Validator(schema)
        self._is_valid = _compiled_validator(schema)
        self._loads = _json_loader()

    @property
    def fast(self) -> bool:
        """Whether the ``fleet`` extra's parser and validator are in use."""
        return self._is_valid is not None and self._loads is _orjson_loads

    def read(self, path: Path) -> NodeFile:
        document = self._parse(path)
        host = _host_of(document, path)
        body = {key: value for key, value in document.items() if key != HOST_KEY}
        if self._is_valid is None or not self._is_valid(body):
            self._refuse_invalid(body, path)
        check_figures(document, path)
        return NodeFile(host, path, document)

    def _refuse_invalid(self, body: dict[str, Any], path: Path) -> None:
        from jsonschema.exceptions import best_match

        error = best_match(self._validator.iter_errors(body))
        if error is not None:
            key = _key_path(error.absolute_path) or "(top level)"
            raise FleetInputError(f"{path}: {key}: {_short(error.message)} (not a valid pytest-nvlink results file)")
        if self._is_valid is not None:  # the two validators disagree: fail closed
            raise FleetInputError(f"{path}: (top level): not a valid pytest-nvlink results file (jsonschema-rs)")

    def _parse(self, path: Path) -> dict[str, Any]:
        try:
            text = read_text_file(path, RESULTS_MAX_BYTES)
        except OSError as exc:
            raise FleetInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
        except UnreadableText as exc:
            raise FleetInputError(f"{path}: {exc}") from None
        try:
            document = self._loads(text)
        except (ValueError, RecursionError) as exc:
            raise FleetInputError(f"{path}: {_unreadable_json(text, exc)}") from None
        if not isinstance(document, dict):
            raise FleetInputError(f"{path}: (top level): a JSON object is expected, not {type(document).__name__}")
        if document.get("kind") != RESULTS_KIND:
            raise FleetInputError(
                f"{path}: kind: {document.get('kind')!r} is not {RESULTS_KIND!r} (write it with --nvlink-json)"
            )
        return document


def _unreadable_json(text: str, error: ValueError | RecursionError) -> str:
    """Why ``text`` is not JSON, naming the key when the cause is NaN or Infinity (which JSON lacks)."""
    try:
        lenient = json.loads(text)  # the standard parser reads NaN/Infinity as floats
    except (ValueError, RecursionError) as exc:
        return f"not readable JSON ({_short(parse_problem(exc, text))})"
    key = _non_finite_key(lenient, "")
    if key is None:
        return f"not readable JSON ({_short(str(error))})"
    return f"{key or '(top level)'}: NaN or Infinity is not a JSON number, nor a possible figure"


def _non_finite_key(value: Any, key: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return key
    if isinstance(value, dict):
        children: Iterable[tuple[str, Any]] = ((f"{key}.{k}" if key else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        children = ((f"{key}[{index}]", v) for index, v in enumerate(value))
    else:
        return None
    for child_key, child in children:
        found = _non_finite_key(child, child_key)
        if found is not None:
            return found
    return None


def _host_of(document: dict[str, Any], path: Path) -> str:
    """The top-level host, else the probed node's host, else the file name without .json."""
    if HOST_KEY in document:
        host = document[HOST_KEY]
        if not isinstance(host, str) or not host.strip():
            raise FleetInputError(f"{path}: host: {host!r} is not a host name")
        return host.strip()
    node = document.get("node")
    probed = node.get("host") if isinstance(node, dict) else None
    if isinstance(probed, str) and probed.strip():
        return probed.strip()
    return path.stem


# What the merge reads of each measurement: the figure and the fields that say where it was taken.
FIGURE_FIELDS = {
    "p2p": ("value", {"kind": str, "src": int, "dst": int}),
    "collectives": ("busbw_gbps", {"op": str, "size_bytes": int}),
}


def check_figures(document: dict[str, Any], path: Path) -> None:
    """NaN, infinite or negative figures, or figures without their pair or size, are input errors."""
    measurements = document["node"]["measurements"]
    for name, (figure, fields) in FIGURE_FIELDS.items():
        entries = measurements.get(name, [])
        if not isinstance(entries, list):
            raise FleetInputError(f"{path}: node.measurements.{name}: a list is expected")
        for index, entry in enumerate(entries):
            key = f"node.measurements.{name}[{index}]"
            if not isinstance(entry, dict):
                raise FleetInputError(f"{path}: {key}: an object is expected")
            value = entry.get(figure)
            if value is None:
                continue  # not measured: the node's checks say why
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise FleetInputError(f"{path}: {key}.{figure}: {value!r} is not a finite, non-negative figure")
            for field, kind in fields.items():
                if not isinstance(entry.get(field), kind) or isinstance(entry.get(field), bool):
                    what = "whole number" if kind is int else "string"
                    raise FleetInputError(f"{path}: {key}.{field}: {entry.get(field)!r} is not a {what}")


def _key_path(parts: Iterable[object]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"


def read_fleet(
    paths: Iterable[Path],
    keep: Callable[[NodeFile], T],
    reader: ResultsReader | None = None,
    jobs: int = 1,
) -> list[T]:
    """``keep(node)`` of one file per host; the same host twice with different results is an input error.

    Only what ``keep`` returns stays in memory: a thousand parsed documents would hold ~14 million
    objects, and the garbage collector's passes over them would dominate the merge. With ``jobs``
    above 1 and many files, worker processes read them (``keep`` must then be a module-level function).
    """
    files = find_result_files(paths)
    if jobs > 1 and len(files) >= PARALLEL_MIN_FILES:
        read = _read_in_workers(files, keep, jobs)
    else:
        reader = reader or ResultsReader()
        with collector_paused():
            read = [_read_one(reader, path, keep) for path in files]
    kept: list[T] = []
    first_file: dict[str, Path] = {}
    for host, path, value in read:
        earlier = first_file.get(host.lower())  # GPU001 and gpu001 are one host, as DNS has it
        if earlier is None:
            first_file[host.lower()] = path
            kept.append(value)
        else:
            _refuse_conflict(reader or ResultsReader(), host, earlier, path)
    return kept


def _read_one(reader: ResultsReader, path: Path, keep: Callable[[NodeFile], T]) -> tuple[str, Path, T]:
    node = reader.read(path)
    return node.host, path, keep(node)


def _refuse_conflict(reader: ResultsReader, host: str, earlier: Path, path: Path) -> None:
    """A copy of the same run counts once; a rerun with other results leaves the node undecided."""
    if not _same_results(reader.read(earlier).document, reader.read(path).document):
        raise FleetInputError(f"{path}: host: {host!r} also has {earlier} with different results; keep one of them")


# Below this many files the workers' start costs more than they save.
PARALLEL_MIN_FILES = 64
_WORKER_READER: list[ResultsReader] = []  # one reader (compiled validator) per worker process


def _read_chunk(paths: list[Path], keep: Callable[[NodeFile], T]) -> list[tuple[str, Path, T]]:
    if not _WORKER_READER:
        _WORKER_READER.append(ResultsReader())
    with collector_paused():
        return [_read_one(_WORKER_READER[0], path, keep) for path in paths]


def _read_in_workers(files: list[Path], keep: Callable[[NodeFile], T], jobs: int) -> list[tuple[str, Path, T]]:
    from concurrent.futures import ProcessPoolExecutor

    chunk = max(1, len(files) // (jobs * 4))
    chunks = [files[start : start + chunk] for start in range(0, len(files), chunk)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return [entry for part in pool.map(_read_chunk, chunks, [keep] * len(chunks)) for entry in part]


def _same_results(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """A file copied twice (same run) is one node; a rerun with other results is a conflict."""
    return {k: v for k, v in first.items() if k != "created_utc"} == {
        k: v for k, v in second.items() if k != "created_utc"
    }
