"""Python's cyclic garbage collector around work that builds large trees of objects.

A parsed snapshot or results document is a tree: it has no reference cycles, so reference counting
frees it and the cyclic collector's passes over its hundreds of thousands of containers find nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection while the block builds its tree; the collector's previous state afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def keep_out_of_collections() -> Callable[[], None]:
    """Move every object alive now out of the collector's reach; the returned call puts them back.

    A run holds its node (a 72-GPU snapshot is ~400,000 objects) for the whole session, and every full
    collection would walk all of it again; frozen, they are left alone until the run ends. Called again,
    it adds what is alive then; any one returned call puts everything back.
    """
    gc.freeze()
    _at_exit_leave_alone()
    return gc.unfreeze


_exit_hook: list[bool] = []


def _at_exit_leave_alone() -> None:
    """At the interpreter's exit, freeze what is still alive, once per process.

    A process that goes on after the run gets its objects back from the cleanup; one that ends with
    it (the ``pytest`` command) would otherwise walk the whole session graph once more in the exit's
    last collection and free it object by object, 0.3 s after a 72-GPU replay, for memory the
    operating system takes back anyway. Reference counting still frees what it can at exit; objects
    left in reference cycles are not finalized, which Python never promises at exit either.
    """
    if not _exit_hook:
        _exit_hook.append(True)
        atexit.register(gc.freeze)
