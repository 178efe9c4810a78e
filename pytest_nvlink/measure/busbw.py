"""Collective bandwidth with nccl-tests' definitions (``doc/PERFORMANCE.md``, ``src/*.cu *GetBw``).

**What "size" means in this suite.** ``collectives.<op>.size_mib`` and
``CollectiveMeasurement.size_bytes`` are *S*, the number nccl-tests prints in its ``size`` column:
the larger of one rank's send and receive buffers. Per op, with ``n`` ranks:

==============  ====================  =====================  ===============
op              per-rank send buffer  per-rank recv buffer   S
==============  ====================  =====================  ===============
all_reduce      S                     S (in place)           the buffer
all_gather      S / n                 S                      gathered total
reduce_scatter  S                     S / n                  input total
all_to_all      S (n chunks of S/n)   S                      whole send buf
broadcast       S                     S (in place)           the buffer
sendrecv        S                     S                      the buffer
==============  ====================  =====================  ===============

``algbw = S / t`` and ``busbw = algbw * factor(op, n)``, GB = 1e9 bytes, ``t`` in seconds per op.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
MIB = 1 << 20

# ops whose per-rank buffer is split into n equal chunks
_CHUNKED_OPS = frozenset({"all_gather", "reduce_scatter", "all_to_all"})


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw/algbw factor for ``op`` on ``world_size`` ranks."""
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in _CHUNKED_OPS:
        return (n - 1) / n
    if op in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


@dataclass(frozen=True)
class Buffers:
    """The per-rank buffers a harness allocates for one op, in elements of ``elem_size`` bytes."""

    op: str
    world_size: int
    elem_size: int
    send_numel: int
    recv_numel: int

    @property
    def send_bytes(self) -> int:
        return self.send_numel * self.elem_size

    @property
    def recv_bytes(self) -> int:
        return self.recv_numel * self.elem_size

    @property
    def size_bytes(self) -> int:
        """S as nccl-tests prints it: max(send, recv) of one rank (``common.cu`` print line)."""
        return max(self.send_bytes, self.recv_bytes)

    @property
    def chunk_numel(self) -> int:
        """Elements per peer chunk for chunked ops; the whole buffer otherwise."""
        if self.op in _CHUNKED_OPS:
            return max(self.send_numel, self.recv_numel) // self.world_size
        return self.send_numel


def buffers_for(op: str, size_bytes: int, world_size: int, elem_size: int = 4) -> Buffers:
    """Buffers for a requested S, rounded down (as nccl-tests does) to a multiple of n elements.

    The returned ``size_bytes`` may be slightly below the request when S is not divisible by
    ``n * elem_size``; report that value, not the request.
    """
    bus_factor(op, world_size)  # validates op and world size
    total = size_bytes // elem_size
    if op in _CHUNKED_OPS:
        chunk = total // world_size
        if chunk < 1:
            raise ValueError(f"{op}: {size_bytes} B is too small for {world_size} ranks")
        total = chunk * world_size
        send = chunk if op == "all_gather" else total
        recv = chunk if op == "reduce_scatter" else total
        return Buffers(op, world_size, elem_size, send, recv)
    if total < 1:
        raise ValueError(f"{op}: {size_bytes} B is smaller than one element")
    return Buffers(op, world_size, elem_size, total, total)


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """S / t in GB/s (1e9)."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return size_bytes / seconds / GB


def busbw_gbps(op: str, size_bytes: int, world_size: int, seconds: float) -> float:
    """algbw times the op's bus factor, in GB/s."""
    return algbw_gbps(size_bytes, seconds) * bus_factor(op, world_size)


def bandwidth(buffers: Buffers, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one op timed at ``seconds`` per op on ``buffers``."""
    algbw = algbw_gbps(buffers.size_bytes, seconds)
    return algbw, algbw * bus_factor(buffers.op, buffers.world_size)


def format_size(size_bytes: int) -> str:
    """``64 MiB``, ``64 KiB`` or ``100 B``: the size as a person reads it in an error message."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g} {unit}"
    return f"{size_bytes} B"
