"""The one way an output reaches its file: whole or not at all, and never over something that is not a file.

Every output of a run (snapshot, results JSON, HTML report, fleet outputs, a launched rank's files)
goes through :func:`write_text_atomically`:

- A regular file, or a name that does not exist yet: the text goes to a temporary file beside it,
  is flushed to disk, and is renamed over the target, so a reader (or a run killed mid-write) sees
  the old file or the whole new one. The new file gets the old file's mode, else what a plain
  ``open(path, "w")`` would give (0666 less the umask; ``mkstemp`` alone would leave 0600 and hide a
  report from whoever attaches it).
- A symbolic link: the file it points to is written that way, and the link stays a link.
- A character device or a FIFO (``/dev/stdout``, a pipe): opened and written in place. Renaming a
  file over it would replace the node, as root even ``/dev/null``.
- Anything else (a folder, a socket, a block device): refused with one sentence.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class UnwritableTarget(OSError):
    """The target is not something an output can be written to; the message says what it is."""


def write_text_atomically(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` as the module docstring says; ``mode`` forces the file's mode."""
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    kind = _kind_of(target)
    if kind in ("character device", "FIFO"):
        with open(target, "w", encoding="utf-8") as stream:
            stream.write(text)
        return
    if kind not in ("regular file", None):
        raise UnwritableTarget(f"{path} is a {kind}, not a file: nothing was written there")
    _replace(target, text, mode)


def target_problem(path: Path) -> str | None:
    """Why ``path`` cannot take an output (a folder, a socket, a block device), before anything runs; else None."""
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    kind = _kind_of(target)
    if kind in ("regular file", "character device", "FIFO", None):
        return None
    return f"{path} is a {kind}, not a file"


def unwritable_problem(path: Path) -> str | None:
    """Why an output cannot be written to ``path`` at all, found before a run rather than after it; else None.

    A folder, socket or block device (:func:`target_problem`); a device or FIFO that this user may not
    write; a regular file or a new name in a folder where no file can be made (``/proc``, a read-only
    mount, a path under a file). The test makes a real file beside the target: permission bits say
    nothing to root, and ``/proc`` refuses only an actual write.
    """
    problem = target_problem(path)
    if problem is not None:
        return problem
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    if _kind_of(target) in ("character device", "FIFO"):
        return None if os.access(target, os.W_OK) else f"cannot write {path}: permission denied"
    return folder_problem(target.parent, path)


def folder_problem(folder: Path, shown: Path | None = None) -> str | None:
    """Why no file can be made in ``folder`` (created as needed, as the writers do); None when one can."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot create {shown or folder}: {existing} is not a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".pytest-nvlink.", suffix=".probe"):
            pass
    except OSError as exc:
        return f"cannot write {shown or folder}: {exc.strerror or exc} in {existing}"
    return None


def same_target(outputs: list[tuple[str, Path]]) -> str | None:
    """ "--nvlink-json and --junitxml both name r.xml" when two outputs resolve to one file; else None.

    Paths are compared resolved (relative, ``..``, symbolic links), so the later writer cannot silently
    replace the earlier one's file."""
    seen: dict[str, str] = {}
    for label, path in outputs:
        key = os.path.realpath(path)
        if key in seen:
            return f"{seen[key]} and {label} both name {path}: give each output its own file"
        seen[key] = label
    return None


def _kind_of(path: Path) -> str | None:
    try:
        found = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # "file/out.json": nothing there yet, nor can there be
        return None
    for test, name in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISDIR, "folder"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(found):
            return name
    return "special file"


def _replace(path: Path, text: str, mode: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    final_mode = mode if mode is not None else _plain_mode(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, final_mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _plain_mode(path: Path) -> int:
    """The mode a plain write would give: the old file's, else 0666 less the umask."""
    if path.is_file():
        return path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
