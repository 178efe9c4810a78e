"""The data check's inputs and expected outputs (like nccl-tests' ``-c``): integer-valued float32, exact."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pytest_nvlink.measure.busbw import Buffers

ROOT = 0  # the broadcast root
_PERIOD = 13  # fill pattern period; keeps every value a small integer, so float32 sums are exact
_ALLTOALL_STRIDE = 16

# Elements the fill and the check compute at once. Their temporaries (an int64 index, an int64 peer
# number and the float32 values of one span: 20 bytes an element) stay ~20 MiB whatever the buffer;
# building the whole expected buffer at once took several times its size (a 4 GiB all_reduce ~30 GiB).
SPAN = 1 << 20


class PatternData:
    """Deterministic per-rank inputs and exact expected outputs (like nccl-tests' -c check).

    Element ``i`` of a rank's send buffer is ``i % 13 + rank + 1`` (chunked ops: the position in its
    peer's chunk, plus the pair's number for all_to_all); the expected output follows from the op.
    Both are computed a span at a time, in place, so the extra memory is bounded by :data:`SPAN`.
    """

    def __init__(self, torch: Any, device: Any, rank: int, n: int) -> None:
        self.torch, self.device, self.rank, self.n = torch, device, rank, n

    def _index(self, lo: int, hi: int) -> Any:
        return self.torch.arange(lo, hi, device=self.device, dtype=self.torch.int64)

    def _spans(self, numel: int) -> Iterator[tuple[int, int]]:
        for lo in range(0, numel, SPAN):
            yield lo, min(numel, lo + SPAN)

    def _cyclic(self, lo: int, hi: int, salt: int, scale: int = 1) -> Any:
        """``(i % 13) * scale + salt`` for i in [lo, hi), as float32."""
        return self._index(lo, hi).remainder_(_PERIOD).mul_(scale).add_(salt).to(self.torch.float32)

    def _chunked(self, lo: int, hi: int, chunk: int, peer_term: Callable[[Any], Any]) -> Any:
        """``(i % chunk) % 13 + peer_term(i // chunk)`` for i in [lo, hi), as float32."""
        index = self._index(lo, hi)
        peer = peer_term(self.torch.div(index, chunk, rounding_mode="floor"))
        return index.remainder_(chunk).remainder_(_PERIOD).add_(peer).to(self.torch.float32)

    def _pair_term(self, src_is_peer: bool) -> Callable[[Any], Any]:
        """all_to_all: the number of the (sender, receiver) pair, ``16 * (src * n + dst + 1)``."""
        n, rank = self.n, self.rank
        if src_is_peer:
            return lambda peer: peer.mul_(n).add_(rank + 1).mul_(_ALLTOALL_STRIDE)
        return lambda peer: peer.add_(rank * n + 1).mul_(_ALLTOALL_STRIDE)

    def _sent(self, op: str, buffers: Buffers, lo: int, hi: int) -> Any:
        if op == "broadcast":
            return self._cyclic(lo, hi, ROOT + 1)
        if op == "all_to_all":
            return self._chunked(lo, hi, buffers.chunk_numel, self._pair_term(src_is_peer=False))
        return self._cyclic(lo, hi, self.rank + 1)

    def _expected(self, op: str, buffers: Buffers, lo: int, hi: int) -> Any:
        n, rank, chunk = self.n, self.rank, buffers.chunk_numel
        total = n * (n + 1) // 2
        if op == "all_reduce":
            return self._cyclic(lo, hi, total, scale=n)
        if op == "all_gather":
            return self._chunked(lo, hi, chunk, lambda peer: peer.add_(1))
        if op == "reduce_scatter":  # this rank's chunk of the summed input
            return self._cyclic(rank * chunk + lo, rank * chunk + hi, total, scale=n)
        if op == "broadcast":
            return self._cyclic(lo, hi, ROOT + 1)
        if op == "all_to_all":
            return self._chunked(lo, hi, chunk, self._pair_term(src_is_peer=True))
        if op == "sendrecv":
            return self._cyclic(lo, hi, (rank - 1) % n + 1)
        raise ValueError(f"unknown collective {op!r}")

    def fill(self, op: str, buffers: Buffers, send: Any) -> None:
        if op == "broadcast" and self.rank != ROOT:
            send.fill_(-1.0)
            return
        for lo, hi in self._spans(buffers.send_numel):
            send[lo:hi].copy_(self._sent(op, buffers, lo, hi))

    def matches(self, op: str, buffers: Buffers, recv: Any) -> bool:
        """Whether ``recv`` holds exactly what ``op`` must leave on this rank."""
        flat = recv.view(-1)
        if flat.numel() != buffers.recv_numel:
            return False
        return all(
            self.torch.equal(flat[lo:hi], self._expected(op, buffers, lo, hi))
            for lo, hi in self._spans(buffers.recv_numel)
        )

    def fill_cyclic(self, tensor: Any, salt: int) -> None:
        """``tensor[i] = i % 13 + salt`` (the send/recv pairs' payload)."""
        for lo, hi in self._spans(tensor.numel()):
            tensor[lo:hi].copy_(self._cyclic(lo, hi, salt))

    def is_cyclic(self, tensor: Any, salt: int) -> bool:
        return all(
            self.torch.equal(tensor[lo:hi], self._cyclic(lo, hi, salt)) for lo, hi in self._spans(tensor.numel())
        )
