"""nccl-tests output parsing: the A100 sample and other binaries' and versions' shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers import nccl_tests
from pytest_nvlink.sources.evidence.parsers.common import ParseError

SAMPLE = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"


def test_a100_all_reduce_sample() -> None:
    result = nccl_tests.parse(sample(SAMPLE))
    assert result.op == "all_reduce"  # from sum/-1 and busbw = 1.75 x algbw at 8 ranks
    assert result.nranks == 8
    assert (result.nthreads, result.ngpus) == (1, 8)
    assert {d.name for d in result.devices} == {"NVIDIA A100-SXM4-40GB"}
    assert result.hosts == ("inst-ks8ls-comp",)
    assert [d.bus for d in result.devices][:2] == ["0x0f", "0x15"]
    assert len(result.rows) == 28
    assert result.rows[0].size_bytes == 64
    last = result.rows[-1]
    assert last.size_bytes == 8589934592
    assert last.out_of_place.busbw_gbps == 235.14
    assert last.out_of_place.time_us == 63929.0
    assert last.in_place.busbw_gbps == 235.21
    assert (last.redop, last.root, last.dtype) == ("sum", -1, "float")
    assert result.wrong_total == 0
    assert result.out_of_bounds == 0
    assert result.avg_busbw_gbps == 81.112
    assert result.warnings == ()


NEW_ALL_GATHER = """# nccl-tests version 2.17.6 nccl-headers=22501 nccl-library=22501
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 1 iters: 20 validation: 0 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1946 on node-a device  0 [0000:0f:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1947 on node-a device  1 [0000:15:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           128     float    none      -1    10.00    0.10    0.05    N/A    10.00    0.10    0.05    N/A
node-a:1946:1990 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
node-a:1946:1990 [0] misc/socket.cc:50 NCCL WARN something odd
        2048           256     float    none      -1    10.00    0.20    0.10    N/A    10.00    0.20    0.10    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.075
"""


def test_new_format_all_gather_with_na_wrong_and_interleaved_log_lines() -> None:
    result = nccl_tests.parse(NEW_ALL_GATHER)
    assert result.op == "all_gather"
    assert result.binary == "all_gather_perf"
    assert result.version == "2.17.6"
    assert result.nranks == 2
    assert [d.bus for d in result.devices] == ["0000:0f:00", "0000:15:00"]
    assert len(result.rows) == 2
    assert result.rows[0].out_of_place.wrong is None
    assert result.wrong_total is None
    assert result.warnings == ("node-a:1946:1990 [0] misc/socket.cc:50 NCCL WARN something odd",)


def test_rows_without_redop_and_root_columns() -> None:
    text = (
        "#       size         count      type     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "        1024           128     float    10.00    0.10    0.05      0    10.00    0.10    0.05      0\n"
    )
    row = nccl_tests.parse(text, op="alltoall_perf").rows[0]
    assert (row.redop, row.root) == (None, None)
    assert nccl_tests.parse(text, op="alltoall_perf").op == "all_to_all"


def test_broadcast_detected_from_root_column() -> None:
    text = "  1048576  262144  float  none  0  50.0  20.97  20.97  0  50.0  20.97  20.97  0\n"
    assert nccl_tests.parse(text).op == "broadcast"


def test_reduce_scatter_detected_from_bus_factor() -> None:
    devices = "".join(f"#  Rank {r} Group 0 Pid 1 on h device {r} [0x{r:02x}] GPU\n" for r in range(8))
    text = devices + " 1048576  32768  float  sum  -1  50.0  20.00  17.50  0  50.0  20.00  17.50  0\n"
    assert nccl_tests.parse(text).op == "reduce_scatter"


def test_op_undeterminable_is_none() -> None:
    devices = "".join(f"#  Rank {r} Group 0 Pid 1 on h device {r} [0x{r:02x}] GPU\n" for r in range(8))
    text = devices + " 1048576  32768  float  none  -1  50.0  20.00  17.50  0  50.0  20.00  17.50  0\n"
    assert nccl_tests.parse(text).op is None  # all_gather and alltoall share busbw factor and columns
    assert nccl_tests.parse(text, op="all_gather").op == "all_gather"


def test_command_line_names_the_binary() -> None:
    text = "$ ./build/sendrecv_perf -b 8 -e 128M\n   8   2  float  sum  -1  10.0  0.00  0.00  0  10.0  0.00  0.00  0\n"
    assert nccl_tests.parse(text).op == "sendrecv"


def test_old_error_column() -> None:
    text = (
        "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "        1024           256     float     sum    10.00    0.10    0.18  0e+00    10.00    0.10    0.18  0e+00\n"
    )
    row = nccl_tests.parse(text).rows[0]
    assert row.out_of_place.wrong is None
    assert row.out_of_place.error == 0.0


def test_crlf_and_indentation() -> None:
    text = "\r\n".join("   " + line for line in sample(SAMPLE).split("\n"))
    result = nccl_tests.parse(text)
    assert len(result.rows) == 28 and result.avg_busbw_gbps == 81.112


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        ("    1024    256    float    sum    -1    32.03    0.03\n", "fields"),
        (
            "    1024    256    float    sum    -1    32.03    0.03    0.06    x    32.17    0.03    0.06    0\n",
            "#wrong",
        ),
        (
            "    1024    256    float    sum    -1    fast    0.03    0.06    0    32.17    0.03    0.06    0\n",
            "numbers",
        ),
    ],
)
def test_damaged_row_names_the_line(damage: str, fragment: str) -> None:
    lines = sample(SAMPLE).split("\n")
    lines.insert(20, damage.rstrip("\n"))
    with pytest.raises(ParseError, match=fragment) as info:
        nccl_tests.parse("\n".join(lines))
    assert info.value.line_no == 21


def test_second_run_in_one_file_is_refused() -> None:
    text = sample(SAMPLE)
    with pytest.raises(ParseError, match="second run"):
        nccl_tests.parse(text + "\n" + text)


def test_no_rows_is_an_error() -> None:
    with pytest.raises(ParseError, match="no"):
        nccl_tests.parse("# nThread 1 nGpus 8 minBytes 8\n# Out of bounds values : 0 OK\n")


def test_a_footer_counting_wrong_values_the_rows_do_not_show_is_noted(tmp_path: Path) -> None:
    # Issue 28: the footer was read and dropped, so "7 FAILED" under rows that all say 0 passed without a word.
    text = sample("nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt")
    path = tmp_path / "ar.txt"
    path.write_text(
        text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 7 FAILED"), encoding="utf-8"
    )
    notes = load_evidence([path]).evidence_notes[str(path)]
    assert any("footer counts 7 out-of-bounds value(s) but no row shown" in note for note in notes), notes


def test_a_footer_of_zero_wrong_values_adds_no_note(tmp_path: Path) -> None:
    path = tmp_path / "ar.txt"
    path.write_text(sample("nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"), encoding="utf-8")
    assert not any("footer" in note for note in load_evidence([path]).evidence_notes.get(str(path), []))
