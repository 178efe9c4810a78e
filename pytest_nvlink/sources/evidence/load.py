"""Judge a server from files: parse tool outputs (detected by content) and merge them into one Node.

Every fact remembers the file it came from, so that two files that disagree (8 GPUs here, 7 there;
NV18 here, SYS there) raise :class:`EvidenceConflict` naming both, instead of one silently winning.
A file that cannot be read, or whose kind cannot be told, is an :class:`EvidenceError`: a file the
user handed in and we ignored would make a verdict look better covered than it is.

This module only decides between one server and a rack (several hosts' files) and hands the files to
the matching loader; both build on the same lower steps (:mod:`.read`, :mod:`.hosts`, :mod:`.parts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_nvlink.core.values import evidence_value_error
from pytest_nvlink.model import Node
from pytest_nvlink.sources.evidence.families import FAMILIES
from pytest_nvlink.sources.evidence.hosts import host_sections, is_rack_evidence
from pytest_nvlink.sources.evidence.merge import EvidenceConflict, EvidenceError, Merger
from pytest_nvlink.sources.evidence.parts import absorb, detect_all, merge_later
from pytest_nvlink.sources.evidence.rack import load_rack
from pytest_nvlink.sources.evidence.read import Loaded, Pending, read_files

__all__ = ["FAMILIES", "EvidenceConflict", "EvidenceError", "load_evidence"]


def load_evidence(paths: list[Path], exclude: Sequence[str] = (), *, trays: bool = False) -> Node:
    """Parse every file (directories recursively) into one evidence Node.

    ``trays`` (the suite is a rack's): the files are a rack's even when none names several hosts, as a
    folder of per-tray outputs each named after its tray's host does not.

    A file in a folder that cannot be used (binary, undecodable, of no known kind) stops the run
    with every such file listed, unless ``exclude`` (globs on the name or the path under the folder)
    leaves it out; excluded files are listed as notes, so the summary still shows them.
    """
    pending = Pending()
    files = read_files(paths, exclude, pending)
    if not files:
        raise EvidenceError(f"no evidence files found in {', '.join(str(p) for p in paths) or 'an empty list'}")
    if trays or is_rack_evidence([loaded.text for loaded in files]):
        # Cut at the "host: NAME" lines before any output is told apart: each part then belongs to a tray.
        return load_rack([piece for loaded in files for piece in host_sections(loaded)], pending)
    return _load_node(files, pending)


def _load_node(files: list[Loaded], pending: Pending) -> Node:
    merger = Merger()
    for kind, loaded in detect_all(files):
        absorb(kind, loaded, merger, pending)
    merge_later(merger, pending)
    node = merger.build()
    impossible = evidence_value_error(node, node.provenance, {loaded.name: loaded.text for loaded in files})
    if impossible:
        raise EvidenceError(impossible)
    node.evidence_notes = {file: list(notes) for file, notes in pending.notes.items()}
    return node
