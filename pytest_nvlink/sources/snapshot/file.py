"""Reading a snapshot file: a replayed node (``--nvlink-replay``, a baseline, a rack's tray).

The document's format (schema, tables, checks) is the model's (:mod:`pytest_nvlink.model.document`);
this module reads the file's bytes and decodes them, fast where it can and exactly where it must.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_nvlink.core.gc_pause import collector_paused
from pytest_nvlink.core.textfile import MIB, UnreadableText, decode_utf8, parse_problem, read_file_bytes
from pytest_nvlink.model import Node
from pytest_nvlink.model.document import SnapshotError, node_from_document

# An 8-GPU snapshot with every measurement is ~200 KiB; a 72-GPU one stays well below this.
SNAPSHOT_MAX_BYTES = 64 * MIB


def load_snapshot(path: Path) -> Node:
    """Read a snapshot file; the node's ``source`` becomes ``"replay"``."""
    return load_snapshot_document(path)[0]


def load_snapshot_document(path: Path) -> tuple[Node, dict[str, Any]]:
    """The node (``source`` ``"replay"``) and the document's top-level fields (``created_utc``, ...)."""
    try:
        data = read_file_bytes(path, SNAPSHOT_MAX_BYTES)
    except FileNotFoundError:
        raise SnapshotError(f"{path}: snapshot file not found") from None
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnreadableText as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    with collector_paused():
        node, document = _read_document(data, str(path))
        top = {key: value for key, value in document.items() if key != "node"}
        # Freed while the collector rests: its next pass would otherwise walk the parsed tree's containers.
        del document
    node.source = "replay"
    return node, top


def _read_document(data: bytes, origin: str) -> tuple[Node, dict[str, Any]]:
    """The node and the document, read exactly as the standard library's decoder reads the UTF-8 text.

    orjson (the ``fleet`` extra) decodes a large snapshot ~2x faster, but refuses what the standard
    library takes (NaN, 1e400, lone surrogates) and turns integers beyond 64 bits into floats. So
    anything orjson refuses, any float outside the node and any snapshot error is decoded again by the
    standard library, whose reading (or message) stands; inside the node such a float could only sit
    in a float field, where it is the value float() of the integer gives. orjson reads the bytes as
    they are (it refuses a byte-order mark, bytes that are not UTF-8 and raw NUL bytes, which the text
    decoding then names), so the 8 MB of a 72-GPU snapshot are not copied into a str first.
    """
    fast = _fast_decoder()
    if fast is not None:
        try:
            document = fast(data)
        except ValueError:  # orjson.JSONDecodeError
            pass
        else:
            if isinstance(document, dict) and not any(
                _holds_float(value) for key, value in document.items() if key != "node"
            ):
                try:
                    return node_from_document(document, origin), document
                except SnapshotError:
                    pass
    try:
        text = decode_utf8(data)
    except UnreadableText as exc:
        raise SnapshotError(f"{origin}: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{origin}: line {exc.lineno}: not a readable JSON snapshot ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise SnapshotError(f"{origin}: not a readable JSON snapshot ({parse_problem(exc, text)})") from None
    return node_from_document(document, origin), document


@functools.cache
def _fast_decoder() -> Callable[[bytes], Any] | None:
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


def _holds_float(value: object) -> bool:
    if isinstance(value, dict):
        return any(_holds_float(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_float(item) for item in value)
    return isinstance(value, float)
