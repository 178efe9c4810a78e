"""Where the docs and the behaviour disagreed (issue 24, section 5): a results JSON given as a baseline says
what to give instead (README: the results JSON is fleet's input, a baseline is a snapshot), and files of
different kinds that name different hosts are a conflict, as two nccl-tests files already are."""

from __future__ import annotations

import pytest
from conftest import EVIDENCE, REPO

NCCL_TESTS = EVIDENCE / "nccl-tests" / "a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"  # on inst-ks8ls-comp


def _one_host_log(host: str) -> str:
    lines = [f"{host}:100:101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"]
    lines += [
        f"{host}:100:101 [{r}] NCCL INFO ncclCommInitRank comm 0x1 rank {r} nranks 8 cudaDev {r} nvmlDev {r} busId 1"
        for r in range(8)
    ]
    lines += [
        f"{host}:100:102 [{r}] NCCL INFO Channel 00/0 : {r}[{r}] -> {(r + 1) % 8}[{(r + 1) % 8}] via P2P/CUMEM"
        for r in range(8)
    ]
    return "\n".join([*lines, ""])


def test_a_results_json_as_baseline_says_to_give_a_snapshot(pytester: pytest.Pytester) -> None:
    results = pytester.path / "results.json"
    done = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", f"--nvlink-json={results}"
    )
    assert done.ret == pytest.ExitCode.OK and results.is_file()
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", f"--nvlink-baseline={results}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --nvlink-baseline: {results}: a results JSON (--nvlink-json), not a snapshot: it keeps the "
            "verdicts, not every fact and figure a replay or a baseline compares; give the run's --nvlink-save "
            "snapshot or its --nvlink-save-dir folder"
        ]
    )
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "usable as a baseline" not in readme and "a baseline is a snapshot" in readme


def test_an_nccl_log_of_another_host_than_the_nccl_tests_run_is_a_conflict(pytester: pytest.Pytester) -> None:
    log = pytester.path / "nccl-debug.txt"
    log.write_text(_one_host_log("other-node"), encoding="utf-8")
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu", f"--nvlink-evidence={NCCL_TESTS}", f"--nvlink-evidence={log}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --nvlink-evidence: host: {NCCL_TESTS} comes from host 'inst-ks8ls-comp' but {log} from host "
            "'other-node'; evidence must come from the one server being judged"
        ]
    )


def test_an_nccl_log_of_the_same_host_in_other_case_is_no_conflict(pytester: pytest.Pytester) -> None:
    log = pytester.path / "nccl-debug.txt"
    log.write_text(_one_host_log("INST-KS8LS-COMP"), encoding="utf-8")
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu",
        f"--nvlink-evidence={NCCL_TESTS}",
        f"--nvlink-evidence={log}",
        "--nvlink-evidence-missing=skip",
        "-k",
        "nccl_transport",
    )
    assert "evidence must come from the one server" not in result.stderr.str()
    result.assert_outcomes(passed=1, deselected=result.parseoutcomes()["deselected"])
