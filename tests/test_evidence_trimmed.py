"""Trimmed nccl-tests output and grepped NCCL logs, as variants of the shipped samples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers import detect, nccl_log, nccl_tests

NCCL_TESTS = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"
NCCL_LOG = "nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def table_only() -> str:
    """The all_reduce sample from its column header on: banner, rank lines and nThread line trimmed."""
    text = sample(NCCL_TESTS)
    return text[text.index("#                                                              out-of-place") :]


def as_other_collective(text: str, redop: str, root: str, factor: float) -> str:
    """The rows rewritten as another collective: redop/root columns and busbw = algbw x factor."""

    def row(match: re.Match[str]) -> str:
        tokens = match.group(0).split()
        tokens[3], tokens[4] = redop, root
        for algbw, busbw in ((6, 7), (10, 11)):
            tokens[busbw] = f"{float(tokens[algbw]) * factor:.2f}"
        return "  ".join(tokens)

    return re.sub(r"^\s*\d+\s+\d+\s+float\s+sum\s+-1\s.*$", row, text, flags=re.MULTILINE)


def outcomes(result: pytest.RunResult, check: str) -> list[str]:
    return [line.split()[0] for line in result.stdout.lines if f"::{check}[" in line and line.split()[0].isupper()]


# --- nccl-tests with the header trimmed ----------------------------------------------------


def test_trimmed_all_reduce_infers_op_and_ranks(pytester: pytest.Pytester) -> None:
    result = nccl_tests.parse(table_only())
    assert (result.op, result.nranks, result.devices) == ("all_reduce", 8, ())
    assert result.inferred is not None and "8 ranks from the busbw/algbw ratio 1.75" in result.inferred
    path = write(pytester.path, "table.txt", table_only())
    node = load_evidence([path])
    assert {(c.op, c.world_size) for c in node.measurements.collectives} == {("all_reduce", 8)}
    assert node.gpus == []  # the GPU model is no evidence: no line names it
    assert "nccl-tests header trimmed: all_reduce on 8 ranks" in node.evidence_notes[str(path)][0]
    run = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "busbw", "-rA")
    # The plateau of ~230 GB/s passes all_reduce as with the full sample; the other collectives are no evidence.
    assert outcomes(run, "test_collective_busbw").count("PASSED") == 1
    run.stdout.fnmatch_lines(
        ["*evidence files (what each contributed*", "*note: nccl-tests header trimmed: all_reduce on 8 ranks*"]
    )


def test_trimmed_all_gather_is_ambiguous_and_not_judged(tmp_path: Path) -> None:
    text = as_other_collective(table_only(), "none", "-1", 7 / 8)
    result = nccl_tests.parse(text)
    assert result.op is None and result.op_candidates == ("all_gather", "all_to_all")
    node = load_evidence([write(tmp_path, "ag.txt", text)])
    assert node.measurements.collectives == []
    assert "could be all_gather or all_to_all" in node.evidence_notes[str(tmp_path / "ag.txt")][0]


def test_trimmed_broadcast_takes_its_ranks_from_nccl_info_lines(tmp_path: Path) -> None:
    info = "".join(
        f"host:944:950 [{r}] NCCL INFO comm 0x5555 rank {r} nranks 8 cudaDev {r} busId {r}0000 - Init COMPLETE\n"
        for r in range(8)
    )
    text = as_other_collective(table_only(), "none", "0", 1.0)
    assert nccl_tests.parse(text).nranks is None
    result = nccl_tests.parse(info + text)
    assert (result.op, result.nranks, result.log_ranks) == ("broadcast", 8, tuple(range(8)))
    node = load_evidence([write(tmp_path, "bc.txt", info + text)])
    assert {(c.op, c.world_size) for c in node.measurements.collectives} == {("broadcast", 8)}


def test_tailed_log_with_destroy_lines_gives_the_rank_count() -> None:
    tail = "".join(
        f"host:944:944 [{r}] NCCL INFO comm 0x55 rank {r} nranks 8 cudaDev {r} busId 0 - Destroy COMPLETE\n"
        for r in range(8)
    )
    text = as_other_collective(table_only(), "sum", "-1", 4 / 8 * 2 * 7 / 8)  # a ratio that fits no op
    result = nccl_tests.parse(text + tail)
    assert result.nranks == 8


# --- NCCL logs that were grepped or stripped -------------------------------------------------


def stripped_log(transport: str = "P2P/CUMEM/read") -> str:
    """The H20 log's channel lines with the "host:pid:tid [dev]" prefix removed (grep -o 'NCCL INFO.*')."""
    lines = [line[line.index("NCCL INFO") :] for line in sample(NCCL_LOG).splitlines() if "NCCL INFO" in line]
    lines.insert(0, "NCCL INFO NCCL version 2.21.5+cuda12.4")  # the sample starts after NCCL's version line
    text = "\n".join(lines).replace("via P2P/CUMEM", f"via {transport}")
    return re.sub(r"Channel (\d+)/0 :", r"Channel \1 :", text)  # no /N after the channel number


def test_stripped_log_is_detected_and_audited(pytester: pytest.Pytester) -> None:
    text = stripped_log()
    assert detect.detect_kind(text) == nccl_log.KIND
    log = nccl_log.parse(text)
    assert log.channels and {c.transport for c in log.channels} == {"P2P"} and log.hosts == ()
    path = write(pytester.path, "grep.txt", text)
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "transport")
    # All P2P, but the grepped log is of 2 ranks: it is audited, and cannot speak for the other GPUs.
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(["NCCL transport audit incomplete: the log covers 2 rank(s)*"])


def test_stripped_log_with_shm_between_nvlink_gpus_fails(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "grep.txt", stripped_log("SHM/direct/direct"))
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "transport")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(
        ["*NCCL used SHM instead of NVLink P2P on 48 channel(s): rank 0[[]GPU 0] -> rank 1[[]GPU 2]*"]
    )


@pytest.mark.parametrize(
    "prefix",
    ["[2025-03-01 10:00:00] ", "[0] transport.cc:165 (ncclTransportP2pSetup) ", "[2025-03-01 10:00:00] [0] "],
    ids=["timestamp", "file-line-function", "timestamp-dev"],
)
def test_newer_prefixes_are_read(prefix: str) -> None:
    text = "\n".join(prefix + line for line in stripped_log().splitlines())
    assert detect.detect_kind(text) == nccl_log.KIND
    log = nccl_log.parse(text)
    assert log.channels and log.version is not None


def test_version_line_only_is_a_log_without_channels(tmp_path: Path) -> None:
    version = next(line for line in stripped_log().splitlines() if "NCCL version" in line)
    assert detect.detect_kind(version) == nccl_log.KIND
    node = load_evidence([write(tmp_path, "v.txt", version)])
    assert node.measurements.nccl is not None and node.measurements.nccl.channels == []


def test_mnnvl_transport_is_p2p() -> None:
    log = nccl_log.parse(stripped_log("P2P/MNNVL"))
    assert {c.transport for c in log.channels} == {"P2P"}


# --- elided rows, tailed logs, runs that printed no row ------------------------------------


def test_rows_elided_with_dots_keep_the_rest(tmp_path: Path) -> None:
    lines = sample(NCCL_TESTS).splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("64 "))
    elided = [*lines[: first + 2], "        ...", *lines[first + 10 :]]
    result = nccl_tests.parse("\n".join(elided))
    assert result.op == "all_reduce" and len(result.rows) == len(nccl_tests.parse(sample(NCCL_TESTS)).rows) - 8


def test_run_that_printed_no_row_fails_the_collective(pytester: pytest.Pytester) -> None:
    text = sample(NCCL_TESTS)
    header_end = text.index("(B)    (elements)")
    hung = "$ ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8\n" + text[: text.index("\n", header_end) + 1]
    path = write(pytester.path, "hung.txt", hung)
    node = load_evidence([path])
    (measurement,) = node.measurements.collectives
    assert (measurement.op, measurement.world_size, measurement.correct) == ("all_reduce", 8, False)
    run = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "all_reduce")
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(["*all_reduce: the nccl-tests run printed its header and no result row (it hung*"])


# --- newer formats ---------------------------------------------------------------------------


def nccl_tests_217() -> str:
    """The all_reduce sample as nccl-tests 2.17+ prints it: version banner, test start/concluded lines,
    a bare NCCL version line before the table and no '# Avg bus bandwidth' footer."""
    text = sample(NCCL_TESTS)
    text = text.replace(
        "#\n#                                                              out-of-place",
        "NCCL version 2.26.3+cuda12.8\n#\n#                                                              out-of-place",
        1,
    )
    text = text[: text.index("# Out of bounds")] if "# Out of bounds" in text else text
    banner = "# nccl-tests version 2.17.1 nccl-headers=22603 nccl-library=22603\n"
    return (
        banner
        + "# Collective test starting: all_reduce_perf\n"
        + text
        + "# Collective test concluded: all_reduce_perf\n"
    )


def test_nccl_tests_217_banner_is_read(pytester: pytest.Pytester) -> None:
    result = nccl_tests.parse(nccl_tests_217())
    assert (result.op, result.nranks, result.version, result.avg_busbw_gbps) == ("all_reduce", 8, "2.17.1", None)
    path = write(pytester.path, "ar.txt", nccl_tests_217())
    run = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "all_reduce")
    run.assert_outcomes(passed=1, deselected=run.parseoutcomes()["deselected"])


def test_mnnvl_fabric_lines_and_network_ib_are_no_fallback(pytester: pytest.Pytester) -> None:
    extra = (
        "[2025-03-01 10:00:00] NCCL INFO MNNVL busId 0x18000 fabric UUID 0.0 cliqueId 0x0 state 3 healthMask 0x0\n"
        "[2025-03-01 10:00:00] NCCL INFO Using network IB\n"
    )
    path = write(pytester.path, "log.txt", extra + stripped_log("P2P/MNNVL"))
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "transport")
    # The only failure is that a 2-rank log cannot speak for 8 GPUs: no transport fallback is reported.
    run.assert_outcomes(failed=1, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(["NCCL transport audit incomplete: the log covers 2 rank(s)*"])
    run.stdout.no_fnmatch_line("*instead of NVLink*")


def test_mnnvl_health_mask_is_two_bits_per_field() -> None:
    single_node = "NCCL INFO MNNVL busId 0x18000 fabric UUID 0.0 cliqueId 0x0 state 3 healthMask 0x0\n"
    (fabric,) = nccl_log.parse(single_node).mnnvl
    assert (fabric.clique_id, fabric.problems) == (0, [])  # normal on one HGX node, not a fault
    assert set(fabric.health.values()) == {None}
    # 0x9a = 0b10_01_10_10, high to low: access timeout (absent), route unhealthy (01: present), route
    # recovery (absent), degraded bandwidth (absent).
    degraded = nccl_log.parse(single_node.replace("healthMask 0x0", "healthMask 0x9a")).mnnvl[0]
    assert degraded.health == {
        "degraded_bandwidth": False,
        "route_recovery": False,
        "route_unhealthy": True,
        "access_timeout_recovery": False,
    }
    assert degraded.problems == ["route_unhealthy"]
