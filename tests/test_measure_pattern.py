"""The data check's fill and expected values: exact, and built a span at a time (bounded extra memory)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from pytest_nvlink.config.shipped import COLLECTIVE_OPS
from pytest_nvlink.measure import pattern
from pytest_nvlink.measure.busbw import buffers_for

torch = pytest.importorskip("torch")

N = 3


def _simulated(op: str, buffers: Any, sends: list[Any], rank: int) -> Any:
    """What ``op`` leaves on ``rank`` given every rank's send buffer, computed the plain way."""
    chunk = buffers.chunk_numel
    if op == "all_reduce":
        return sum(sends)
    if op == "all_gather":
        return torch.cat(sends)
    if op == "reduce_scatter":
        return sum(sends)[rank * chunk : (rank + 1) * chunk]
    if op == "broadcast":
        return sends[pattern.ROOT].clone()
    if op == "all_to_all":
        return torch.cat([send[rank * chunk : (rank + 1) * chunk] for send in sends])
    if op == "sendrecv":
        return sends[(rank - 1) % N].clone()
    raise AssertionError(op)


def _received(op: str, numel_bytes: int, rank: int) -> tuple[pattern.PatternData, Any, Any]:
    buffers = buffers_for(op, numel_bytes, N)
    sends = []
    for r in range(N):
        send = torch.empty(buffers.send_numel, dtype=torch.float32)
        pattern.PatternData(torch, torch.device("cpu"), r, N).fill(op, buffers, send)
        sends.append(send)
    return pattern.PatternData(torch, torch.device("cpu"), rank, N), buffers, _simulated(op, buffers, sends, rank)


@pytest.fixture
def small_span(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pattern, "SPAN", 7)  # many spans, and chunks that straddle them


@pytest.mark.parametrize("op", COLLECTIVE_OPS)
@pytest.mark.parametrize("rank", [0, 2])
def test_what_the_op_leaves_is_what_the_check_expects(op: str, rank: int, small_span: None) -> None:
    data, buffers, recv = _received(op, 4 * N * 20, rank)
    assert data.matches(op, buffers, recv)


@pytest.mark.parametrize("op", COLLECTIVE_OPS)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_one_wrong_element_anywhere_fails_the_check(op: str, where: str, small_span: None) -> None:
    data, buffers, recv = _received(op, 4 * N * 20, 1)
    position = {"first": 0, "middle": recv.numel() // 2, "last": recv.numel() - 1}[where]
    recv[position] += 1
    assert not data.matches(op, buffers, recv)


def test_a_buffer_of_the_wrong_length_fails_the_check() -> None:
    data, buffers, recv = _received("all_gather", 4 * N * 20, 0)
    assert not data.matches("all_gather", buffers, recv[:-1])


def test_the_send_recv_payload_is_checked_everywhere(small_span: None) -> None:
    data = pattern.PatternData(torch, torch.device("cpu"), 0, 2)
    payload = torch.empty(50, dtype=torch.float32)
    data.fill_cyclic(payload, 2)
    assert payload[:14].tolist() == [float(i % 13 + 2) for i in range(14)]
    assert data.is_cyclic(payload, 2)
    for position in (0, 25, 49):
        broken = payload.clone()
        broken[position] = -1.0
        assert not data.is_cyclic(broken, 2)


# Runs in a fresh interpreter. Resident memory is sampled by a thread while the fill and the check run
# (torch releases the GIL in its kernels): the process's lifetime peak (ru_maxrss) also holds what importing
# torch touched and freed, which on a clean machine can exceed the buffer and hide the temporaries.
PEAK_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys, threading
    import torch
    from pytest_nvlink.measure.busbw import buffers_for
    from pytest_nvlink.measure.pattern import PatternData

    torch.set_num_threads(1)
    op, size = sys.argv[1], int(sys.argv[2])
    def resident():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    def sampled(work):
        top, stop = [resident()], threading.Event()
        def watch():
            while not stop.wait(0.0002):
                top[0] = max(top[0], resident())
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            work()
        finally:
            stop.set()
            watcher.join(10)
        return max(top[0], resident())
    small = buffers_for(op, 1 << 16, 2)
    warm = PatternData(torch, torch.device("cpu"), 1, 2)
    warm.fill(op, small, torch.empty(small.send_numel))
    warm.matches(op, small, torch.empty(small.recv_numel))
    buffers = buffers_for(op, size, 2)
    send = torch.ones(buffers.send_numel)
    recv = torch.ones(buffers.recv_numel)
    data = PatternData(torch, torch.device("cpu"), 1, 2)
    before = resident()
    fill = sampled(lambda: data.fill(op, buffers, send))
    check = sampled(lambda: data.matches(op, buffers, recv))
    print(json.dumps({"before": before, "fill": fill, "check": check}))
    """
)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "all_to_all"])
def test_fill_and_check_need_far_less_than_the_buffer_again(op: str) -> None:
    size = 256 << 20
    done = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, op, str(size)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout)
    extra = max(measured["fill"], measured["check"]) - measured["before"]
    # one span's temporaries (~20 MiB) plus allocator slack; the whole-buffer version needed ~8x the buffer
    assert extra < size // 4, f"{extra / (1 << 20):.0f} MiB extra for a {size >> 20} MiB buffer"
