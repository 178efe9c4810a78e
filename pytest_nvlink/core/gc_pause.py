"""Python's cyclic garbage collector around work that builds large trees of objects.

A parsed snapshot or results document is a tree: it has no reference cycles, so reference counting
frees it and the cyclic collector's passes over its hundreds of thousands of containers find nothing.
"""

from __future__ import annotations

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
    return gc.unfreeze
