"""Evidence that hid a fault: each example passed or went unjudged; each now fails or stops (issue 24, section 4)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import sample

NVLINK5 = "nvlink/constructed-b200-8gpu-nvlink5-errors-recovery-failed.txt"
ALL_REDUCE = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"
P2P_A100 = "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt"
TOPO_A100 = "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
SMI_Q = "nvidia-smi-q/h100-sxm-8gpu-constructed-q.txt"
NCCL_LOG = "nccl-debug/h100-sxm-8gpu-constructed-nccl224-prefix-stripped.txt"
PEER_WARN = "Cuda failure 'peer access is not supported between these two devices'"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def run_evidence(pytester: pytest.Pytester, suite: str, select: str, *files: Path) -> pytest.RunResult:
    evidence = [f"--nvlink-evidence={path}" for path in files]
    return pytester.runpytest(f"--nvlink-suite={suite}", *evidence, "--nvlink-evidence-missing=skip", "-k", select)


def counts(run: pytest.RunResult) -> dict[str, int]:
    found = run.parseoutcomes()
    return {k: found.get(k, 0) for k in ("passed", "failed", "skipped", "errors")}


def line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.split("\n"), start=1) if needle in line)


def prefixed_log(host: str = "node-a") -> list[str]:
    """The shipped 8-rank NCCL 2.24 log with NCCL's usual ``host:pid:tid [dev]`` prefix on every line."""
    return [
        f"{host}:4242:4250 [0] {line}" if line.startswith("NCCL") else line for line in sample(NCCL_LOG).split("\n")
    ]


# --- nvidia-smi nvlink -e of NVLink5 drivers --------------------------------------------------------


def test_nvlink5_error_counters_are_read_and_judged(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "nvlink-e.txt", sample(NVLINK5))
    run = run_evidence(pytester, "b200-8gpu", "nvlink_errors", path)
    assert counts(run) == {"passed": 7, "failed": 1, "skipped": 0, "errors": 0}
    run.stdout.fnmatch_lines(
        [
            "*GPU 3: NVLink link_recovery errors 2 since the driver loaded (worst on link 5) exceed 0 "
            "(b200-sxm.toml:nvlink_errors.link_recovery_total_max) (also over: link_recovery_failed total)*",
        ]
    )


def test_nvlink5_counters_of_a_healthy_gpu_pass_judged_on_their_own_set(pytester: pytest.Pytester) -> None:
    healthy = re.sub(r"(Link 5: (?:Link recovery failed|Total link recovery) events: )2", r"\g<1>0", sample(NVLINK5))
    run = run_evidence(pytester, "b200-8gpu", "nvlink_errors", write(pytester.path, "e.txt", healthy))
    assert counts(run) == {"passed": 8, "failed": 0, "skipped": 0, "errors": 0}


# --- nccl-tests in-place columns ----------------------------------------------------------------------


def test_in_place_busbw_is_judged_with_the_out_of_place_one(pytester: pytest.Pytester) -> None:
    slow = [_in_place_busbw(line, "150.00") for line in sample(ALL_REDUCE).split("\n")]
    run = run_evidence(pytester, "a100-8gpu", "busbw", write(pytester.path, "ar.txt", "\n".join(slow)))
    assert counts(run)["failed"] == 1
    run.stdout.fnmatch_lines(["*all_reduce: busbw 150.0 GB/s over 8 ranks, below 207.0 GB/s*"])


def _in_place_busbw(line: str, busbw: str) -> str:
    """A result row of 64 MiB or more with its in-place busbw (second token from the right) replaced."""
    tokens = line.split()
    if not (tokens and tokens[0].isdigit() and int(tokens[0]) >= 64 << 20):
        return line
    head, _, tail = line.rpartition(tokens[-2])
    return f"{head}{busbw}{tail}"


# --- NaN and infinity in any cell --------------------------------------------------------------------


def _nan_in_p2p() -> tuple[str, str]:
    text = sample(P2P_A100)
    return text.replace(" 268.94 ", " -nan ", 1), "-nan"


def _inf_in_smi_q() -> tuple[str, str]:
    return re.sub(r"(Current\s*:\s*)5\b", r"\g<1>inf", sample(SMI_Q), count=1), ": inf"


def _nan_in_topo() -> tuple[str, str]:
    return sample(TOPO_A100).replace("0-63,128-191    0 ", "0-63,128-191    nan ", 1), "nan"


@pytest.mark.parametrize("variant", [_nan_in_p2p, _inf_in_smi_q, _nan_in_topo], ids=["p2p-matrix", "smi-q", "topo"])
def test_nan_or_inf_in_an_evidence_cell_stops_the_run_naming_file_and_line(
    pytester: pytest.Pytester, variant: Callable[[], tuple[str, str]]
) -> None:
    text, needle = variant()
    path = write(pytester.path, "broken.txt", text)
    run = run_evidence(pytester, "a100-8gpu", "nvlink", path)
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines([f"ERROR: --nvlink-evidence: {path}:{line_of(text, needle)}: *not a number*"])


# --- NCCL logs ---------------------------------------------------------------------------------------


def test_nccl_warn_fails_the_transport_audit_although_every_channel_says_p2p(pytester: pytest.Pytester) -> None:
    log = [*prefixed_log(), f"node-a:4242:4251 [3] transport/p2p.cc:275 NCCL WARN {PEER_WARN}"]
    run = run_evidence(pytester, "h100-8gpu", "nccl_transport", write(pytester.path, "nccl.log", "\n".join(log)))
    assert counts(run)["failed"] == 1
    run.stdout.fnmatch_lines([f"*NCCL warned: {PEER_WARN}; a run whose log holds an NCCL WARN is no proof*"])


def test_channel_line_glued_to_the_line_before_is_still_read(pytester: pytest.Pytester) -> None:
    log = prefixed_log()
    at = next(i for i, line in enumerate(log) if "Channel 00/0 : 1[1] -> 2[2]" in line)
    log[at] = log[at].replace("via P2P/CUMEM/read", "via SHM/direct/direct")
    glued = [*log[: at - 1], log[at - 1] + log[at], *log[at + 1 :]]  # the newline before it was lost
    run = run_evidence(pytester, "h100-8gpu", "nccl_transport", write(pytester.path, "nccl.log", "\n".join(glued)))
    assert counts(run)["failed"] == 1
    run.stdout.fnmatch_lines(
        ["*NCCL used SHM instead of NVLink P2P on 1 channel(s): rank 1?GPU 1? -> rank 2?GPU 2? via SHM/direct/direct*"]
    )


# --- nvidia-smi -q Health block ------------------------------------------------------------------------


def test_route_unhealthy_fails_the_gpu_whatever_the_summary_says(pytester: pytest.Pytester) -> None:
    text = sample(SMI_Q)
    gpu2 = text.index("GPU 00000000:3A:00.0")
    at = text.index("Route Unhealthy               : False", gpu2)
    text = text[:at] + text[at:].replace("False", "True", 1)
    assert "Summary                       : Healthy" in text[gpu2:]
    run = run_evidence(pytester, "h100-8gpu", "fabric", write(pytester.path, "q.txt", text))
    assert counts(run) == {"passed": 7, "failed": 1, "skipped": 0, "errors": 0}
    run.stdout.fnmatch_lines(["*GPU 2: fabric health reports route_unhealthy although registration completed*"])


# --- hosts across files of different kinds ----------------------------------------------------------


def test_nccl_log_from_another_host_than_the_nccl_tests_run_is_a_conflict(pytester: pytest.Pytester) -> None:
    tests = write(pytester.path, "ar.txt", sample(ALL_REDUCE))  # run on host inst-ks8ls-comp
    log = write(pytester.path, "nccl.log", "\n".join(prefixed_log("gpu-node-042")))
    run = run_evidence(pytester, "a100-8gpu", "nvlink", tests, log)
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines(
        [f"*host: {tests} comes from host 'inst-ks8ls-comp' but {log} from host 'gpu-node-042'; evidence must come*"]
    )


# --- P2P figures beyond the links' capacity -------------------------------------------------------------


def test_p2p_figure_above_what_the_links_carry_fails_without_nvlink_status(pytester: pytest.Pytester) -> None:
    text = sample(P2P_A100).replace(" 268.94 ", " 1500.00 ", 1)  # GPU 0 -> GPU 1, P2P writes
    run = run_evidence(pytester, "a100-8gpu", "unidirectional", write(pytester.path, "p2p.txt", text))
    assert counts(run)["failed"] == 1
    run.stdout.fnmatch_lines(
        [
            "*GPU 0 -> GPU 1: unidirectional bandwidth 1500.0 GB/s is more than the 300.0 GB/s the NVLinks can carry "
            "(the SKU's 12 link(s) at their minimum speed, a100-sxm4.toml:nvlink.active_links x "
            "a100-sxm4.toml:nvlink.link_speed_min_gbps, as the GPUs' own links are not reported)*"
        ]
    )


# --- topo -p2p with its command line cut off ----------------------------------------------------------


@pytest.mark.parametrize("command", ["-p2p n", "p2p n", "--p2pstatus n"])
def test_topo_p2p_matrix_with_a_cut_command_line_judges_its_ns_cells(pytester: pytest.Pytester, command: str) -> None:
    header = " \t" + "".join(f"GPU{i}\t" for i in range(8))
    rows = [
        f" GPU{a}\t" + "".join("X\t" if a == b else ("NS\t" if (a, b) == (0, 5) else "OK\t") for b in range(8))
        for a in range(8)
    ]
    text = "\n".join([command, header, *rows, "", "Legend:", "", "  OK   = Status Ok", "  NS   = Not supported", ""])
    run = run_evidence(pytester, "h100-8gpu", "p2p_status", write(pytester.path, "p2p-n.txt", text))
    assert counts(run)["failed"] == 1
    run.stdout.fnmatch_lines(["*GPU 0 -> GPU 5: P2P not usable (nvlink not_supported)*"])
