"""Where the shipped suites and threshold sets live, how any suite or threshold TOML is read, and the
collective names both kinds of file use.

Errors are :class:`~pytest_nvlink.config.values.ConfigError` carrying ``file:key``. Nothing here imports pytest.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pytest_nvlink.config.values import ConfigError, check_nesting
from pytest_nvlink.core.textfile import MIB, UnreadableText, parse_problem, read_text_file

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
