"""The one writer every output goes through: whole or nothing, and never over a device, pipe or link.

Device nodes, FIFOs and links are made privately in a temporary folder; no real /dev entry is touched.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
from pathlib import Path

import pytest
from fleet_data import fleet_of, write_fleet
from test_fleet_cli import run as run_console

from pytest_nvlink.core.atomic import UnwritableTarget, target_problem, write_text_atomically


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_new_file_gets_what_a_plain_write_gives(tmp_path: Path) -> None:
    path = tmp_path / "deeper" / "out.json"
    write_text_atomically(path, "new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()
    assert [p.name for p in path.parent.iterdir()] == ["out.json"]  # no temporary file left


def test_an_existing_file_keeps_its_mode_and_a_forced_mode_wins(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old")
    path.chmod(0o640)
    write_text_atomically(path, "new")
    assert (path.read_text(), stat.S_IMODE(path.stat().st_mode)) == ("new", 0o640)
    write_text_atomically(path, "script", mode=0o755)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.json"
    path.write_text("yesterday's PASS")

    def broken_replace(src: object, dst: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C between the write and the rename

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomically(path, "today's FAIL")
    assert path.read_text() == "yesterday's PASS"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_symlink_stays_a_link_and_its_target_is_written(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    write_text_atomically(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "latest.json"
    link.symlink_to(tmp_path / "runs" / "today.json")
    write_text_atomically(link, "new")
    assert link.is_symlink() and (tmp_path / "runs" / "today.json").read_text() == "new"


def test_a_fifo_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    write_text_atomically(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert received == ["through the pipe\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def _private_null(tmp_path: Path) -> Path:
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers, in a private folder
    except PermissionError:
        pytest.skip("mknod needs root (CI runs as root)")
    return node


def test_a_character_device_is_opened_never_replaced(tmp_path: Path) -> None:
    node = _private_null(tmp_path)
    # A folder on a nodev mount refuses to open devices: refused is fine too, replaced is not.
    with contextlib.suppress(PermissionError):
        write_text_atomically(node, "discarded\n")
    assert stat.S_ISCHR(node.stat().st_mode), "the device node was replaced by a regular file"
    link = tmp_path / "stdout-link"
    link.symlink_to(node)
    with contextlib.suppress(PermissionError):
        write_text_atomically(link, "discarded\n")
    assert link.is_symlink() and stat.S_ISCHR(node.stat().st_mode)


def test_a_folder_or_socket_is_refused_with_one_sentence(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(UnwritableTarget, match=r"out is a folder, not a file: nothing was written there"):
        write_text_atomically(folder, "x")
    assert target_problem(folder) == f"{folder} is a folder, not a file"
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        assert target_problem(path) == f"{path} is a socket, not a file"
        with pytest.raises(UnwritableTarget):
            write_text_atomically(path, "x")
    assert target_problem(tmp_path / "new.json") is None


def test_the_fleet_never_replaces_a_device_it_is_asked_to_write(tmp_path: Path) -> None:
    """``pytest-nvlink fleet --json /dev/stdout`` run as root replaced the device node with a file."""
    node = _private_null(tmp_path)
    (tmp_path / "second").mkdir()
    other = _private_null(tmp_path / "second")  # one path, one output: a second device for the drain script
    folder = write_fleet(tmp_path / "runs", fleet_of(2))
    done = run_console("fleet", str(folder), "--json", str(node), "--drain-script", str(other))
    assert "error" not in done.stderr, done.stderr
    assert stat.S_ISCHR(node.stat().st_mode) and stat.S_ISCHR(other.stat().st_mode), done.stdout + done.stderr
