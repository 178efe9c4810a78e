"""Files that are not what they claim: wrong encoding, binary, huge integers, deep nesting, duplicates.

Each must stop the run with one usage-error line naming the file (and line where known), never an
INTERNALERROR traceback, and a snapshot listing one GPU, link or pair twice must not be read.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import SNAPSHOTS, snapshot_with_lists

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.model import Node
from pytest_nvlink.model.document import SnapshotError
from pytest_nvlink.sources.snapshot.file import load_snapshot

SITE_TEXT = "# our handover contract — agreed 2026-11\n[p2p]\nunidirectional_min_gbps = 360.0\n"
HUGE_INT = "1" * 5000
DEEP = "[" * 5000 + "]" * 5000

# (file bytes, what the one line must say)
BAD_TEXT: dict[str, tuple[bytes, str]] = {
    "cp1252": (SITE_TEXT.encode("cp1252"), "line 1, column 25: byte 0x97 is not UTF-8 (saved as Windows-1252"),
    "utf16": (SITE_TEXT.encode("utf-16"), "is UTF-16 text (byte-order mark at the start); save it as UTF-8"),
    "utf16-no-bom": (SITE_TEXT.encode("utf-16-le"), "line 1: NUL byte: binary or UTF-16 content"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "line 3: NUL byte: binary or UTF-16 content"),
}


@pytest.mark.parametrize("kind", sorted(BAD_TEXT))
def test_site_threshold_file_not_utf8(tmp_path: Path, kind: str) -> None:
    data, expected = BAD_TEXT[kind]
    site = tmp_path / "site.toml"
    site.write_bytes(data)
    with pytest.raises(ConfigError) as raised:
        load_thresholds("h100-sxm", site)
    assert str(raised.value).startswith(f"{site}: {expected}")


def test_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_bytes(b"\xef\xbb\xbf" + SITE_TEXT.encode())
    assert load_thresholds("h100-sxm", site).value("p2p.unidirectional_min_gbps") == 360.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"[p2p]\n\nunidirectional_min_gbps = {HUGE_INT}\n", ": not valid TOML (line 3: an integer with 5000 digits"),
        (f"[p2p]\nunidirectional_min_gbps = {DEEP}\n", ": not valid TOML (nested too deeply to read"),
        ("[" + ".".join(["p2p"] * 3000) + "]\nx = 1\n", ":p2p.p2p.p2p.p2p...: tables nested deeper than 8 levels"),
    ],
)
def test_toml_that_python_cannot_parse(tmp_path: Path, text: str, expected: str) -> None:
    site = tmp_path / "site.toml"
    site.write_text(text)
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{site}{expected}')}"):
        load_thresholds("h100-sxm", site)


def test_suite_file_not_utf8(tmp_path: Path) -> None:
    suite = tmp_path / "mine.toml"
    suite.write_bytes("# 8 \u00d7 H100 \u2014 rack 4\n[suite]\n".encode("cp1252"))
    with pytest.raises(ConfigError, match=rf"^{suite}: line 1, column 5: byte 0xd7 is not UTF-8"):
        load_suite(str(suite))


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda text: text.encode("utf-16"), "is UTF-16 text"),
        (lambda text: text.replace('"host"', f'"n": {HUGE_INT}, "host"', 1).encode(), "line 8: an integer with 5000"),
        (lambda text: text.replace('"host"', f'"n": {DEEP}, "host"', 1).encode(), "nested too deeply to read"),
        (lambda text: text.replace('"host"', '"hôst"', 1).encode("latin-1"), "line 8, column 5: byte 0xf4 is not"),
        (lambda text: text.replace('"host"', '"h\x00ost"', 1).encode(), "line 8: NUL byte"),
    ],
    ids=["utf16", "huge-integer", "deep-nesting", "latin1", "nul"],
)
def test_snapshot_that_cannot_be_read(tmp_path: Path, make: Any, expected: str) -> None:
    path = tmp_path / "node.json"
    path.write_bytes(make((SNAPSHOTS / "h100-8gpu-healthy.json").read_text()))
    with pytest.raises(SnapshotError) as raised:
        load_snapshot(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert expected in str(raised.value)


def test_snapshot_with_a_utf8_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    """orjson reads the bytes and refuses the mark; the text decoding drops it, as for every text file."""
    path = tmp_path / "node.json"
    path.write_bytes(b"\xef\xbb\xbf" + (SNAPSHOTS / "h100-8gpu-healthy.json").read_bytes())
    assert load_snapshot(path) == load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")


def test_snapshot_that_is_a_device_or_folder(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="is a folder, not a file"):
        load_snapshot(tmp_path)
    with pytest.raises(SnapshotError, match=r"/dev/zero: is not a regular file"):
        load_snapshot(Path("/dev/zero"))


def test_evidence_snapshot_with_a_5000_digit_integer(tmp_path: Path) -> None:
    from pytest_nvlink.sources.evidence.load import EvidenceError, load_evidence

    path = tmp_path / "node.json"
    path.write_text((SNAPSHOTS / "h100-8gpu-healthy.json").read_text().replace('"host"', f'"n": {HUGE_INT}, "host"'))
    with pytest.raises(EvidenceError, match=r"invalid JSON: line 8: an integer with 5000 digits"):
        load_evidence([path])


# --- duplicate entries ----------------------------------------------------------------------------


def _document() -> dict[str, Any]:
    document = snapshot_with_lists(SNAPSHOTS / "h100-8gpu-healthy.json")
    return document


def _load(tmp_path: Path, document: dict[str, Any]) -> Node:
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(document))
    return load_snapshot(path)


def _error(tmp_path: Path, document: dict[str, Any]) -> str:
    with pytest.raises(SnapshotError) as raised:
        _load(tmp_path, document)
    return str(raised.value)


def test_duplicate_gpu_index_is_an_error_naming_both_entries(tmp_path: Path) -> None:
    document = _document()
    document["node"]["gpus"][7]["index"] = 6
    message = _error(tmp_path, document)
    assert message == (
        f"{tmp_path / 'edited.json'}:node.gpus[7]: GPU index 6 is listed twice, also at gpus[6]; "
        "a snapshot lists each once — the file was edited or merged by hand"
    )


def test_duplicate_link_of_one_gpu(tmp_path: Path) -> None:
    document = _document()
    document["node"]["gpus"][2]["nvlinks"][5]["link"] = 4
    assert "node.gpus[2].nvlinks[5]: link 4 is listed twice, also at nvlinks[4]" in _error(tmp_path, document)


def test_conflicting_duplicate_path_is_an_error(tmp_path: Path) -> None:
    document = _document()
    paths = document["node"]["paths"]
    paths.append({"a": 3, "b": 0, "path": "SYS"})  # the same pair, written the other way round
    message = _error(tmp_path, document)
    assert f"node.paths[{len(paths) - 1}]: pair 0, 3 is listed twice, also at paths[2] (NV18 vs SYS)" in message


def test_identical_duplicate_path_is_tolerated(tmp_path: Path) -> None:
    document = _document()
    document["node"]["paths"].append(copy.deepcopy(document["node"]["paths"][0]))
    assert _load(tmp_path, document).path(0, 1) == "NV18"


def test_conflicting_duplicate_p2p_status_is_an_error(tmp_path: Path) -> None:
    document = _document()
    entries = document["node"]["p2p"]
    entries.append({**entries[0], "read": "disabled_by_regkey"})
    message = _error(tmp_path, document)
    assert (
        f"node.p2p[{len(entries) - 1}]: ordered pair 0, 1 is listed twice, also at p2p[0] (read=ok, write=ok, "
        "nvlink=ok, atomics=ok vs read=disabled_by_regkey, write=ok, nvlink=ok, atomics=ok)"
    ) in message
