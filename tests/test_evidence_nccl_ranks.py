"""nccl-tests rank counts: elided device lists, multi-node runs, single-rank tables and size-0 rows (issue 26)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers import ParseError, nccl_tests

TWO_NODES = "nccl-tests/constructed-h100-2node-16rank-allreduce-elided.txt"
TWO_NODES_LOG = "nccl-tests/constructed-h100-2node-4rank-allreduce-nccl-debug.txt"
SINGLE_RANK = "nccl-tests/constructed-h100-16x-single-rank-no-mpi-allreduce.txt"
ONE_NODE = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def one_host(text: str) -> str:
    """The two-node run as if both hosts were one name and no srun -N: only the ranks are elided."""
    return text.replace("gpu-node-018", "gpu-node-017").replace("srun -N 2 --ntasks-per-node=8 ", "mpirun -np 16 ")


# --- parser -------------------------------------------------------------------------------------


def test_elided_device_list_counts_to_the_highest_rank() -> None:
    result = nccl_tests.parse(one_host(sample(TWO_NODES)))
    assert [d.rank for d in result.devices] == [0, 7, 8, 15]
    assert result.nranks == 16 and result.ranks_elided and result.rank_conflict is None
    assert result.inferred == "16 ranks from the highest rank listed (15); the device list is elided"
    assert not result.multi_node


def test_elision_marker_after_the_first_ranks_leaves_the_count_to_other_sources() -> None:
    text = (
        one_host(sample(TWO_NODES)).replace("#  Rank  7", "#  ...\n#  Rank  1 X").replace("#  Rank  1 X", "#  Rank  1")
    )
    cut = "\n".join(line for line in text.split("\n") if "Rank  8 " not in line and "Rank 15 " not in line)
    result = nccl_tests.parse(cut)
    # Ranks 0 and 1 and a "..." line: 2 is only a floor, and the rows' busbw/algbw factor is that of 16 ranks.
    assert result.nranks is None and result.ranks_elided
    assert (
        result.rank_conflict
        == "2 ranks read from the text, but the busbw/algbw ratio 1.875 of all_reduce fits 16 ranks"
    )
    stated = nccl_tests.parse(cut.replace("#  ...", "#  ...\nSLURM_NTASKS=16"))
    assert stated.nranks == 16 and stated.rank_conflict is None
    assert stated.inferred == "16 ranks from SLURM_NTASKS=16 x 1 (the device list is elided)"


@pytest.mark.parametrize(
    ("extra", "conflict"),
    [
        ("node-a:1:2 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 12 cudaDev 0 - Init COMPLETE", "rank 15"),
        ("SLURM_NTASKS=8", "rank 15"),
    ],
    ids=["nccl-nranks-below-the-listed-rank", "slurm-ntasks-below-the-listed-rank"],
)
def test_a_stated_count_below_a_listed_rank_leaves_the_count_unknown(extra: str, conflict: str) -> None:
    result = nccl_tests.parse(one_host(sample(TWO_NODES)) + "\n" + extra + "\n")
    assert result.nranks is None and result.rank_conflict is not None and conflict in result.rank_conflict


def test_stated_counts_that_disagree_leave_the_count_unknown() -> None:
    text = (
        one_host(sample(TWO_NODES))
        + "\nSLURM_NTASKS=16\nnode-a:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 32 cudaDev 0\n"
    )
    result = nccl_tests.parse(text)
    assert result.nranks is None
    assert result.rank_conflict == "32 ranks from NCCL's 'nranks 32' lines but 16 ranks from SLURM_NTASKS=16 x 1"


def test_hosts_of_the_device_list_and_srun_nodes_make_a_multi_node_run() -> None:
    result = nccl_tests.parse(sample(TWO_NODES))
    assert result.multi_node and result.nodes == 2 and result.hosts == ("gpu-node-017", "gpu-node-018")
    unnamed = nccl_tests.parse(one_host(sample(TWO_NODES)).replace("mpirun -np 16 ", "srun --nodes=2 "))
    assert unnamed.multi_node and unnamed.nodes == 2 and unnamed.hosts == ("gpu-node-017",)


def test_nccl_nnodes_1_wins_over_pod_host_names() -> None:
    text = sample(TWO_NODES).replace("srun -N 2 --ntasks-per-node=8 ", "") + (
        "\ngpu-node-017:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 1 localRanks 16 localRank 0 MNNVL 0\n"
    )
    result = nccl_tests.parse(text)
    assert result.nodes == 1 and not result.multi_node and result.nranks == 16


def test_single_rank_tables_of_a_build_without_mpi_are_one_output() -> None:
    result = nccl_tests.parse(sample(SINGLE_RANK))
    assert result.tables == 16 and result.nranks == 1 and result.op == "all_reduce"
    assert result.empty_rows == 16 and len(result.rows) == 48
    assert all(row.size_bytes > 0 and row.out_of_place.busbw_gbps == 0.0 for row in result.rows)


def test_a_second_run_after_a_multi_rank_table_is_still_refused() -> None:
    text = sample(ONE_NODE)
    with pytest.raises(ParseError, match="one nccl-tests run per file"):
        nccl_tests.parse(text + text)


def test_size_0_rows_are_normal_output(tmp_path: Path) -> None:
    text = sample(ONE_NODE)
    first = next(line for line in text.split("\n") if line.strip().startswith("64 "))
    zero = "  0  0  float  sum  -1  0.12  0.00  0.00  0  0.11  0.00  0.00  0"
    result = nccl_tests.parse(text.replace(first, zero + "\n" + first))
    assert result.empty_rows == 1 and result.nranks == 8 and result.rows[0].size_bytes == 64
    node = load_evidence([write(tmp_path, "ar.txt", text.replace(first, zero + "\n" + first))])
    assert {m.size_bytes for m in node.measurements.collectives} == {r.size_bytes for r in result.rows}


def test_multi_node_figures_carry_their_hosts(tmp_path: Path) -> None:
    node = load_evidence([write(tmp_path, "ar.txt", sample(TWO_NODES))])
    figures = node.measurements.collectives
    assert figures and all(m.world_size == 16 and m.rank_gpus is None for m in figures)
    assert figures[0].conditions == {"nodes": "2", "hosts": "gpu-node-017, gpu-node-018"}
    assert node.host is None and not node.gpus  # device lines of two servers name no GPU of this one
    notes = node.evidence_notes[str(tmp_path / "ar.txt")]
    assert "nccl-tests multi-node run: 16 ranks on 2 hosts (gpu-node-017, gpu-node-018)" in notes


# --- whole plugin -------------------------------------------------------------------------------


def test_multi_node_run_is_not_judged_against_a_single_node_suite(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "ar.txt", sample(TWO_NODES))
    run = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-evidence={path}",
        "--nvlink-evidence-missing=skip",
        "-rs",
        "-k",
        "all_reduce",
    )
    run.assert_outcomes(skipped=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(
        [
            "*no evidence for all_reduce bus bandwidth: all_reduce: multi-node result: busbw 449.6 GB/s over 16 ranks "
            "on 2 hosts (gpu-node-017, gpu-node-018); *not judged against the single-node suite h100-8gpu*"
        ]
    )


def test_multi_node_run_fails_closed_without_the_skip_option(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "ar.txt", sample(TWO_NODES))
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "all_reduce")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(["*multi-node result*16 ranks on 2 hosts*"])


def test_elided_one_host_run_of_16_ranks_is_judged_as_16_ranks(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "ar.txt", one_host(sample(TWO_NODES)))
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "all_reduce")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    # Read as 4 ranks before; 16 ranks on an 8-GPU server is still not the suite's ring, but the count is right.
    run.stdout.fnmatch_lines(["*busbw 449.6 GB/s was measured over 16 rank(s), but the suite expects all 8 GPUs*"])


def test_cross_host_net_channels_of_a_multi_node_run_are_no_fallback(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "ar.txt", sample(TWO_NODES_LOG))
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "nccl_transport")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(
        ["*NCCL transport audit incomplete: the log covers 4 rank(s) (0, 1, 2, 3) on GPU(s) 0, 1,*"]
    )
    assert "instead of NVLink P2P" not in run.stdout.str()


def test_a_log_alone_that_says_nnodes_2_expects_net_between_its_hosts(pytester: pytest.Pytester) -> None:
    """The NCCL log of a two-node run, given without its nccl-tests table: NCCL's nNodes says it spans hosts."""
    log = "\n".join(line for line in sample(TWO_NODES_LOG).split("\n") if " NCCL " in line)
    path = write(pytester.path, "nccl.log", log)
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "nccl_transport")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(["*NCCL transport audit incomplete: the log covers 4 rank(s)*"])
    assert "instead of NVLink P2P" not in run.stdout.str()
    one_node = log.replace("nNodes 2", "nNodes 1")  # pods of one server: NET between them is the fault
    path = write(pytester.path, "nccl-one-node.log", one_node)
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "nccl_transport")
    run.stdout.fnmatch_lines(["*NCCL used NET instead of NVLink P2P*"])


def test_net_inside_one_host_of_a_multi_node_run_is_still_reported(pytester: pytest.Pytester) -> None:
    text = sample(TWO_NODES_LOG).replace("0[0] -> 1[1] via P2P/CUMEM/read", "0[0] -> 1[1] via SHM/direct/direct")
    path = write(pytester.path, "ar.txt", text)
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "nccl_transport")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    message = next(line for line in run.stdout.lines if line.startswith("NCCL used SHM"))
    assert message.startswith(
        "NCCL used SHM instead of NVLink P2P on 2 channel(s): rank 0[GPU 0] -> rank 1[GPU 1] via SHM/direct/direct;"
    )
    assert "NET/IB" not in message


def test_single_rank_tables_say_single_rank(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "ar.txt", sample(SINGLE_RANK))
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "all_reduce")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(
        [
            "*no evidence for all_reduce bus bandwidth: all_reduce: single rank: the figure at 4096 MiB comes from a "
            "run of 1 rank*",
            "*note: nccl-tests 16 single-rank tables (nccl-tests without MPI started 16 times)*",
        ]
    )


def test_nranks_1_in_the_nccl_log_says_single_rank(pytester: pytest.Pytester) -> None:
    table = sample(SINGLE_RANK).split("# nThread")[1]
    body = "\n".join(line for line in ("# nThread" + table).split("\n") if "Rank  0 Group" not in line)
    log = "node-a:1:2 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 1 cudaDev 0 nvmlDev 0 - Init COMPLETE\n"
    path = write(pytester.path, "ar.txt", "$ ./build/all_reduce_perf -b 0 -e 4G\n" + log + body)
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "all_reduce")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(["*all_reduce: single rank:*", "*note: nccl-tests single-rank run (nranks 1)*"])
