"""busbw.py against real nccl-tests output and against nccl-tests' own formulas."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_nvlink.measure import busbw

DATA = Path(__file__).parent / "data" / "measure"
SAMPLE = DATA / "a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"


def _rows() -> list[list[str]]:
    rows = []
    for line in SAMPLE.read_text().splitlines():
        fields = line.split()
        if len(fields) == 13 and not line.lstrip().startswith("#"):
            rows.append(fields)
    return rows


def _half_ulp(printed: str) -> float:
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return 0.5 * 10.0**-decimals


def test_sample_has_the_full_table() -> None:
    rows = _rows()
    assert len(rows) == 28
    assert rows[0][0] == "64" and rows[-1][0] == "8589934592"


@pytest.mark.parametrize("column", [5, 9], ids=["out-of-place", "in-place"])
def test_allreduce_rows_recomputed_from_size_and_time(column: int) -> None:
    for fields in _rows():
        size, time_text = int(fields[0]), fields[column]
        seconds = float(time_text) * 1e-6
        algbw = busbw.algbw_gbps(size, seconds)
        bus = busbw.busbw_gbps("all_reduce", size, 8, seconds)
        # printed time is rounded: allow its half-ulp, plus the half-ulp of the printed bandwidths
        rel = _half_ulp(time_text) / float(time_text)
        assert abs(algbw - float(fields[column + 1])) <= 0.005 + algbw * rel + 1e-9, fields
        assert abs(bus - float(fields[column + 2])) <= 0.005 + bus * rel + 1e-9, fields


def test_allreduce_buffers_match_the_sample_count_column() -> None:
    for fields in _rows():
        buffers = busbw.buffers_for("all_reduce", int(fields[0]), 8, elem_size=4)
        assert buffers.size_bytes == int(fields[0])
        assert buffers.send_numel == int(fields[1])


# --- nccl-tests' formulas, transcribed from src/{all_gather,reduce_scatter,alltoall}.cu -------------


def _nccl_tests(op: str, requested_bytes: int, typesize: int, nranks: int, sec: float) -> tuple[int, float, float]:
    """(size column, algbw, busbw) as nccl-tests computes them for one row."""
    count = requested_bytes // typesize
    if op == "all_gather":
        send, recv, param = count // nranks, (count // nranks) * nranks, count // nranks
        base = param * typesize * nranks / 1.0e9 / sec
        factor = (nranks - 1) / nranks
    elif op == "reduce_scatter":
        send, recv, param = (count // nranks) * nranks, count // nranks, count // nranks
        base = param * typesize * nranks / 1.0e9 / sec
        factor = (nranks - 1) / nranks
    elif op == "all_to_all":
        send = recv = (count // nranks) * nranks
        param = count // nranks
        base = param * nranks * typesize / 1.0e9 / sec
        factor = (nranks - 1) / nranks
    else:
        raise AssertionError(op)
    size_column = max(send, recv) * typesize
    return size_column, base, base * factor


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("nranks", [2, 3, 4, 7, 8])
@pytest.mark.parametrize("requested", [1 << 20, 64 << 20, 1_000_000, 8589934592])
def test_chunked_ops_follow_nccl_tests(op: str, nranks: int, requested: int) -> None:
    sec = 1234.5e-6
    size_column, algbw, bus = _nccl_tests(op, requested, 4, nranks, sec)
    buffers = busbw.buffers_for(op, requested, nranks, elem_size=4)
    assert buffers.size_bytes == size_column
    got_alg, got_bus = busbw.bandwidth(buffers, sec)
    assert got_alg == pytest.approx(algbw, rel=1e-12)
    assert got_bus == pytest.approx(bus, rel=1e-12)


def test_all_gather_size_is_the_gathered_total() -> None:
    buffers = busbw.buffers_for("all_gather", 64 << 20, 8)
    assert buffers.send_bytes == 8 << 20
    assert buffers.recv_bytes == 64 << 20
    assert buffers.size_bytes == 64 << 20
    assert buffers.chunk_numel == buffers.send_numel


def test_reduce_scatter_size_is_the_input_total() -> None:
    buffers = busbw.buffers_for("reduce_scatter", 64 << 20, 8)
    assert (buffers.send_bytes, buffers.recv_bytes) == (64 << 20, 8 << 20)
    assert buffers.chunk_numel == buffers.recv_numel


def test_all_to_all_size_is_the_whole_send_buffer() -> None:
    buffers = busbw.buffers_for("all_to_all", 64 << 20, 8)
    assert buffers.send_bytes == buffers.recv_bytes == 64 << 20
    assert buffers.chunk_numel * 8 == buffers.send_numel


def test_crafted_all_gather_row() -> None:
    # 8 ranks, S = 1 GiB gathered, 5000 us per op: algbw 214.75, busbw 187.90 (7/8)
    alg, bus = busbw.bandwidth(busbw.buffers_for("all_gather", 1 << 30, 8), 5000e-6)
    assert round(alg, 2) == 214.75
    assert round(bus, 2) == 187.90


def test_crafted_reduce_scatter_row_uneven_ranks() -> None:
    # 3 ranks: 1 MiB is not divisible into 3 float chunks; nccl-tests rounds down
    buffers = busbw.buffers_for("reduce_scatter", 1 << 20, 3)
    assert buffers.size_bytes == (262144 // 3) * 3 * 4 == 1048572


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 8, 1.75),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 1, 0.0),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("all_to_all", 8, 0.875),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 8, 1.0),
    ],
)
def test_bus_factor(op: str, n: int, factor: float) -> None:
    assert busbw.bus_factor(op, n) == pytest.approx(factor)


def test_unknown_op_and_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown collective"):
        busbw.bus_factor("gather", 2)
    with pytest.raises(ValueError, match="world size"):
        busbw.bus_factor("all_reduce", 0)
    with pytest.raises(ValueError, match="positive"):
        busbw.algbw_gbps(100, 0.0)
    with pytest.raises(ValueError, match="too small"):
        busbw.buffers_for("all_gather", 4, 8)
    with pytest.raises(ValueError, match="smaller than one element"):
        busbw.buffers_for("broadcast", 2, 8)


@pytest.mark.parametrize(
    ("size", "text"),
    [(64 << 20, "64 MiB"), (64 << 10, "64 KiB"), (3 << 30, "3 GiB"), (100, "100 B"), (1536, "1.5 KiB")],
)
def test_format_size(size: int, text: str) -> None:
    assert busbw.format_size(size) == text
