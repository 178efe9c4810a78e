"""Bad inputs and misleading lines found by a user-style review of the fail-closed rules.

Each case runs the whole plugin and asserts the item's outcome and message.
"""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from conftest import SNAPSHOTS, sample, snapshot_with_lists, topo_p2p_text

from pytest_nvlink.sources.evidence.parsers import nccl_log
from pytest_nvlink.sources.evidence.parsers.detect import detect_kind

NCCL_TESTS = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"


def _cases(pytester: pytest.Pytester, *args: str) -> dict[str, tuple[str, str, dict[str, str]]]:
    """Run the plugin; per test case: outcome, message and JUnit properties."""
    xml_path = pytester.path / "junit.xml"
    pytester.runpytest(*args, f"--junitxml={xml_path}", "-p", "no:cacheprovider")
    cases = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome, message = tag, element.get("message", "")
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        cases[case.get("name", "")] = (outcome, message, props)
    return cases


def _one_process_per_rank(text: str, *, shared_bus: bool = False) -> str:
    """The 8-GPU run as `mpirun -np 8 all_reduce_perf -g 1` under Slurm --gpus-per-task=1: every rank sees device 0."""
    text = text.replace("nGpus 8", "nGpus 1")

    def rank_line(match: re.Match[str]) -> str:
        rank = int(match.group(1))
        bus = "[0x0f]" if shared_bus and rank < 2 else match.group(3)
        return f"#  Rank  {rank} Group  0 Pid    9{rank:02d} on {match.group(2)} device  0 {bus}"

    return re.sub(r"#  Rank  (\d) Group  0 Pid    944 on (\S+) device  \d (\[0x[0-9a-f]+\])", rank_line, text)


def test_ranks_numbered_per_process_are_judged_on_their_count(pytester: pytest.Pytester) -> None:
    """Eight processes on eight distinct bus ids all print `device 0`: per-process CUDA numbering, not one GPU."""
    evidence = pytester.path / "slurm-allreduce.txt"
    evidence.write_text(_one_process_per_rank(sample(NCCL_TESTS)), encoding="utf-8")
    args = ("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={evidence}", "--nvlink-evidence-missing=skip")
    outcome, message, props = _cases(pytester, *args, "-k", "busbw and all_reduce")["test_collective_busbw[all_reduce]"]
    assert (outcome, props["world_size"], props["rank_gpus"]) == ("passed", "8", "unknown"), message


def test_two_ranks_on_one_bus_id_still_fail_coverage(pytester: pytest.Pytester) -> None:
    evidence = pytester.path / "doubled-allreduce.txt"
    evidence.write_text(_one_process_per_rank(sample(NCCL_TESTS), shared_bus=True), encoding="utf-8")
    args = ("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={evidence}", "--nvlink-evidence-missing=skip")
    outcome, message, _ = _cases(pytester, *args, "-k", "busbw and all_reduce")["test_collective_busbw[all_reduce]"]
    assert outcome == "failure"
    assert "GPU(s) 1, 2, 3, 4, 5, 6, 7 not covered; GPU(s) 0 ran more than one rank" in message


def test_a_site_file_cannot_declare_no_nvlink_under_an_nvlink_suite(pytester: pytest.Pytester) -> None:
    """active_links = 0 under NV18 pairs turned every per-link check into "does not apply" without a reason."""
    site = pytester.path / "site.toml"
    site.write_text(
        '[nvlink]\nactive_links = 0\n[waive]\n"nvlink.link_speed_min_gbps" = "x"\n"nvlink.version" = "x"\n',
        encoding="utf-8",
    )
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-vm-pcie", f"--nvlink-thresholds={site}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: *site.toml:nvlink.active_links: 0 says the SKU has no NVLink, but suite *h100-8gpu.toml expects NV#*"]
    )


def test_no_nvlink_in_a_site_file_is_blamed_on_the_site_file(pytester: pytest.Pytester) -> None:
    site = pytester.path / "site.toml"
    site.write_text("[nvlink]\nactive_links = 0\n", encoding="utf-8")
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy", f"--nvlink-thresholds={site}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: *h100-sxm.toml:nvlink.link_speed_min_gbps: set for a SKU *site.toml:nvlink.active_links = 0*"]
    )


def _nccl_log(bad_channel: str) -> str:
    prefix = "node:100:200 [{r}] NCCL INFO "
    lines = [
        prefix.format(r=r)
        + f"ncclCommInitRank comm 0x1 rank {r} nranks 8 cudaDev {r} nvmlDev {r} busId {r}000 - Init START"
        for r in range(8)
    ]
    for channel in range(2):
        for r in range(8):
            via = bad_channel if (channel, r) == (1, 5) else "P2P/CUMEM"
            lines.append(
                prefix.format(r=r) + f"Channel {channel:02d}/0 : {r}[{r}] -> {(r + 1) % 8}[{(r + 1) % 8}] via {via}"
            )
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("via", "cause"), [("SHM/direct/direct", "staged through host memory"), ("NET/Socket/0", "network stack")]
)
def test_one_slow_hop_in_an_eight_rank_log_fails_with_expectation_and_cause(
    pytester: pytest.Pytester, via: str, cause: str
) -> None:
    log = pytester.path / "nccl.log"
    log.write_text(_nccl_log(via), encoding="utf-8")
    args = ("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={log}", "--nvlink-evidence-missing=skip", "-k", "transport")
    outcome, message, props = _cases(pytester, *args)["test_nccl_transport"]
    assert outcome == "failure"
    assert f"on 1 channel(s): rank 5[GPU 5] -> rank 6[GPU 6] via {via}; expected P2P or NVLS between GPUs" in message
    assert "(h100-8gpu.toml:topology.default); likely cause: " in message and cause in message
    assert (props["measured"], props["suite_key"]) == ("1 of 16 on SHM/NET", "topology.default")


@pytest.mark.parametrize("source", ["replay", "evidence"])
def test_a_gap_in_the_gpu_numbering_of_a_snapshot_is_an_error(pytester: pytest.Pytester, source: str) -> None:
    """GPUs 0-6 and 9: replay counted 8 GPUs and passed test_gpu_count; as evidence GPU 7's pairs passed."""
    document = snapshot_with_lists(SNAPSHOTS / "h100-8gpu-healthy.json")
    document["node"]["gpus"][7]["index"] = 9
    path = pytester.path / "gap.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-{source}={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --nvlink-{source}: *gap.json:node.gpus[[]7].index: GPU 9 in a list of 8 GPU(s); *GPU(s) 7 would go*"]
    )


def test_a_lower_bound_gpu_list_may_stop_short(pytester: pytest.Pytester) -> None:
    """Evidence naming GPUs 0-6 of 8 is a lower bound, not a numbering error: GPU 7 is 'no evidence'."""
    document = snapshot_with_lists(SNAPSHOTS / "h100-8gpu-healthy.json")
    document["node"]["gpus"] = document["node"]["gpus"][:7]
    document["node"]["gpu_list"] = {"complete": False, "source": "nvlink-s.txt"}
    path = pytester.path / "seven.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    outcome, message, _ = _cases(pytester, "--nvlink-suite=h100-8gpu", f"--nvlink-replay={path}", "-k", "gpu_count")[
        "test_gpu_count"
    ]
    assert outcome == "failure" and "only a lower bound for the count" in message


def _p2p_figure_set(kind: str, pair: set[int], value: float) -> dict[str, Any]:
    document: dict[str, Any] = snapshot_with_lists(SNAPSHOTS / "h100-8gpu-healthy.json")
    for m in document["node"]["measurements"]["p2p"]:
        if m["kind"] == kind and {m["src"], m["dst"]} == pair:
            m["value"] = value
    return document


@pytest.mark.parametrize(
    ("kind", "value", "ceiling"), [("unidirectional", 5000.0, "478.1"), ("bidirectional", 1200.0, "956.2")]
)
@pytest.mark.parametrize("source", ["replay", "evidence"])
def test_a_figure_the_nvlinks_cannot_carry_fails(
    pytester: pytest.Pytester, source: str, kind: str, value: float, ceiling: str
) -> None:
    """5000 GB/s between two H100s (18 x 26.562 GB/s links) is a timing error; it passed as a fast pair."""
    path = pytester.path / "too-fast.json"
    path.write_text(json.dumps(_p2p_figure_set(kind, {0, 1}, value)), encoding="utf-8")
    args = ("--nvlink-suite=h100-8gpu", f"--nvlink-{source}={path}", "-k", f"{kind} and gpu0-gpu1")
    outcome, message, props = _cases(pytester, *args)[f"test_p2p_{kind}[gpu0-gpu1]"]
    assert outcome == "failure"
    assert f"{kind} bandwidth {value:.1f} GB/s is more than the {ceiling} GB/s the NVLinks can carry" in message
    assert f"h100-sxm.toml:p2p.{kind}_min_gbps; likely cause: the timing is wrong" in message
    assert (props["measured"], props["expected"], props["threshold_key"]) == (
        f"{value:g}",
        f"<= {ceiling}",
        f"p2p.{kind}_min_gbps",
    )


def test_a_fast_but_possible_figure_still_passes(pytester: pytest.Pytester) -> None:
    path = pytester.path / "fast.json"
    path.write_text(json.dumps(_p2p_figure_set("unidirectional", {0, 1}, 450.0)), encoding="utf-8")
    args = ("--nvlink-suite=h100-8gpu", f"--nvlink-replay={path}", "-k", "unidirectional and gpu0-gpu1")
    outcome, message, _ = _cases(pytester, *args)["test_p2p_unidirectional[gpu0-gpu1]"]
    assert outcome == "passed", message


def test_p2p_status_failure_names_the_suite_key(pytester: pytest.Pytester) -> None:
    """The expectation comes from the suite's topology: the message names file and key, not only 'NV18'."""
    files = []
    for capability, cell in (("r", "OK"), ("w", "OK"), ("n", "NS")):
        path = pytester.path / f"p2p-{capability}.txt"
        path.write_text(topo_p2p_text(capability, 8, cell), encoding="utf-8")
        files.append(f"--nvlink-evidence={path}")
    args = ("--nvlink-suite=h100-8gpu", *files, "--nvlink-evidence-missing=skip", "-k", "p2p_status and gpu0-gpu1")
    outcome, message, props = _cases(pytester, *args)["test_p2p_status[gpu0-gpu1]"]
    assert outcome == "failure"
    assert (
        "P2P not usable (nvlink not_supported) although the suite expects NV18 (h100-8gpu.toml:topology.default)"
        in (message)
    )
    assert props["suite_key"] == "topology.default"


@pytest.mark.parametrize("where", ["alone", "after an NCCL log"])
def test_a_long_line_without_blanks_is_read_in_linear_time(where: str) -> None:
    """A 100 kB line of one token took ~9 s to detect and ~90 s in the NCCL log parser (quadratic regexes)."""
    log = _nccl_log("P2P/CUMEM") if where != "alone" else ""
    text = log + "x" * 100_000 + "\n"
    started = time.perf_counter()
    kind = detect_kind(text)
    if kind == "nccl_log":
        nccl_log.parse(text)
    assert time.perf_counter() - started < 3.0
    assert kind == (None if where == "alone" else "nccl_log")
