"""Every real sample judged by the right suite as a person reading it would; damaged variants fail."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import DATA, topo_p2p_text

EVIDENCE = DATA / "evidence"

# (suite, sample, check -> number of items that must pass); everything else must be "no evidence".
# test_gpu_count passes only where the file lists every GPU (topo -m, the p2p tools' matrices);
# nvidia-smi nvlink and nccl-tests name the GPUs they ran on, a lower bound for the count.
SAMPLES = [
    ("a100-8gpu", "topo/a100-sxm4-80gb-8gpu-distserve3.txt", {"test_path": 28, "test_gpu_count": 1}),
    (
        "h100-8gpu",
        "topo/h100-sxm-8gpu-baremetal-supermicro-nccl1264-partial.txt",
        {"test_path": 28, "test_gpu_count": 1},
    ),
    ("l40s-4gpu", "topo/l40s-4gpu-pcie-only-node-sys.txt", {"test_path": 6, "test_gpu_count": 1}),
    ("h100-nvl-pair", "topo/h100-pcie-nvlink-bridge-pair-hpe-dl380a.txt", {"test_path": 1, "test_gpu_count": 1}),
    (
        "h100-8gpu",
        "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt",
        {"test_nvlink_active_links": 8, "test_nvlink_speed": 8, "test_gpu_model": 8},
    ),
    # nvidia-smi 535 prints no ECC data counter for A100, so the errors check has no evidence (see
    # test_fail_closed_thresholds.py::test_nvlink_e_without_a_counter_is_no_evidence).
    ("a100-8gpu", "nvlink/a100-sxm4-40gb-vm-brev-nvlink-e-all.txt", {"test_gpu_model": 8}),
    (
        "a100-8gpu",
        "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt",
        {"test_collective_busbw": 1, "test_gpu_model": 8},
    ),
    (
        # CUDA's "can access peer" matrix holds for P2P over PCIe too: no test_p2p_status on NVLink pairs.
        "a100-8gpu",
        "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt",
        {
            "test_p2p_unidirectional": 56,
            "test_p2p_bidirectional": 56,
            "test_p2p_latency": 56,
            "test_gpu_count": 1,
            "test_gpu_model": 8,
        },
    ),
    (
        "a100-8gpu",
        "nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt",
        {"test_p2p_unidirectional": 56, "test_gpu_count": 1},
    ),
]
# A 2-rank NCCL log (GPUs 0 and 2 of an 8-GPU node): all P2P, but it says nothing about the other 6 GPUs.
TWO_RANK_LOG = "nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt"


def _passed_per_check(result: pytest.RunResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in result.stdout.lines:
        if " PASSED" in line and "::" in line:
            name = line.split("::")[1].split("[")[0].split()[0]
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.parametrize(
    ("suite", "sample", "expected"), SAMPLES, ids=[s[1].split("/")[0] + ":" + s[0] for s in SAMPLES]
)
def test_sample_judged_as_a_person_would(
    pytester: pytest.Pytester, suite: str, sample: str, expected: dict[str, int]
) -> None:
    result = pytester.runpytest(
        f"--nvlink-suite={suite}", f"--nvlink-evidence={EVIDENCE / sample}", "--nvlink-evidence-missing=skip", "-v"
    )
    assert result.ret == 0, result.stdout.str()
    # Exactly what the sample covers passes; nothing else may (those are skips with "no evidence for").
    assert _passed_per_check(result) == expected
    result.stdout.fnmatch_lines(["*evidence *checks *files*"])


def test_two_rank_nccl_log_does_not_pass_the_8_gpu_transport_audit(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-evidence={EVIDENCE / TWO_RANK_LOG}",
        "--nvlink-evidence-missing=skip",
        "-k",
        "test_nccl_transport",
    )
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(
        [
            "*NCCL transport audit incomplete: the log covers 2 rank(s) (0, 1) on GPU(s) 0, 2, but the suite "
            "expects GPU(s) 0, 1, 2, 3, 4, 5, 6, 7 on NVLink (h100-8gpu.toml:topology); "
            "no channel of GPU(s) 1, 3, 4, 5, 6, 7 was seen*"
        ]
    )


def test_missing_evidence_fails_by_default(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={EVIDENCE / SAMPLES[0][1]}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*no evidence for the NVLink state of GPU 0*"])


def _variant(tmp: Path, sample: str, old: str, new: str, count: int = 1) -> Path:
    text = (EVIDENCE / sample).read_text()
    assert text.count(old) >= count
    path = tmp / Path(sample).name
    path.write_text(text.replace(old, new, count))
    return path


def test_vm_topology_reads_as_silent_pcie_fallback(pytester: pytest.Pytester) -> None:
    sample = "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
    path = _variant(pytester.path, sample, "NV12", "PHB", count=-1)
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "test_path")
    result.assert_outcomes(failed=28, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(["*path is PHB, expected NV12*silent PCIe fallback*"])


def test_inactive_link_in_nvlink_status_fails_that_gpu(pytester: pytest.Pytester) -> None:
    sample = "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt"
    text = (EVIDENCE / sample).read_text()
    gpu3 = text.index("GPU 3:")
    damaged = text[:gpu3] + text[gpu3:].replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 1)
    path = pytester.path / "nvlink-s.txt"
    path.write_text(damaged)
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "active_links")
    result.assert_outcomes(passed=7, failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(["*GPU 3: 17 of 18 NVLinks active*inactive link(s): 5*"])


def test_wrong_data_in_nccl_tests_fails_the_collective(pytester: pytest.Pytester) -> None:
    sample = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"
    row = "1073741824     268435456     float     sum      -1   8166.8  131.48  230.08      0"
    path = _variant(pytester.path, sample, row, row[:-1] + "3")
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "all_reduce")
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(["*all_reduce at 1024 MiB returned WRONG DATA*"])


def test_files_that_disagree_name_both(pytester: pytest.Pytester) -> None:
    topo = EVIDENCE / "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
    four = EVIDENCE / "topo/l40s-4gpu-pcie-only-node-sys.txt"
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={topo}", f"--nvlink-evidence={four}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert "a100-sxm4-80gb-8gpu-distserve3.txt" in text
    assert "l40s-4gpu-pcie-only-node-sys.txt" in text


def test_unreadable_file_names_file_and_line(pytester: pytest.Pytester) -> None:
    sample = "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
    text = (EVIDENCE / sample).read_text().splitlines()
    row = next(i for i, line in enumerate(text) if line.startswith("GPU3"))
    text[row] = "GPU3    NV12    NV12"  # a row cut short: which cells are missing cannot be known
    path = pytester.path / "topo.txt"
    path.write_text("\n".join(text) + "\n")
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --nvlink-evidence: *topo.txt:{row + 1}: row GPU3 has 2 cells for 8 GPU columns*"]
    )


def _junit(pytester: pytest.Pytester, *args: str) -> dict[str, ET.Element]:
    xml_path = pytester.path / "junit.xml"
    pytester.runpytest(*args, f"--junitxml={xml_path}", "-p", "no:cacheprovider")
    return {case.get("name", ""): case for case in ET.parse(xml_path).getroot().iter("testcase")}


def _failure(case: ET.Element) -> str:
    failure = case.find("failure")
    assert failure is not None, case.get("name")
    return failure.text or ""  # the whole message; the attribute is shortened


def test_nvlink_status_naming_seven_of_eight_gpus_is_no_evidence_for_the_count(pytester: pytest.Pytester) -> None:
    """Hole: the count was the highest index + 1, so a capture without GPU 3 passed test_gpu_count."""
    text = (EVIDENCE / "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt").read_text()
    path = pytester.path / "nvlink-s.txt"
    path.write_text(text[: text.index("GPU 3:")] + text[text.index("GPU 4:") :])
    cases = _junit(pytester, "--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "gpu_count or active_links")
    message = _failure(cases["test_gpu_count"])
    assert "no evidence for the GPU count: " in message
    assert "nvlink-s.txt name(s) GPUs up to GPU 7 but no file lists every GPU" in message
    assert "8 is only a lower bound" in message
    assert "no evidence for the NVLink state of GPU 3" in _failure(cases["test_nvlink_active_links[gpu3]"])
    assert cases["test_nvlink_active_links[gpu4]"].find("failure") is None
    skip = _junit(
        pytester,
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-evidence={path}",
        "--nvlink-evidence-missing=skip",
        "-k",
        "gpu_count",
    )
    skipped = skip["test_gpu_count"].find("skipped")
    assert skipped is not None and "only a lower bound" in (skipped.text or "") + skipped.get("message", "")


def test_nvlink_status_of_seven_gpus_does_not_say_gpu7_is_missing(pytester: pytest.Pytester) -> None:
    text = (EVIDENCE / "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt").read_text()
    path = pytester.path / "nvlink-s.txt"
    path.write_text(text[: text.index("GPU 7:")])
    cases = _junit(pytester, "--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "gpu_count or gpu_model")
    assert "7 is only a lower bound" in _failure(cases["test_gpu_count"])
    assert "no evidence for GPU 7: " in _failure(cases["test_gpu_model[gpu7]"])


def test_topology_listing_seven_gpus_fails_the_count(pytester: pytest.Pytester) -> None:
    """A file that lists every GPU is evidence for the count: 7 where the suite expects 8 fails."""
    header = "\t" + "\t".join(f"GPU{i}" for i in range(7))
    rows = ["\t".join([f"GPU{a}", *(" X " if a == b else "NV12" for b in range(7))]) for a in range(7)]
    path = pytester.path / "topo.txt"
    path.write_text("\n".join([header, *rows]) + "\n")
    cases = _junit(pytester, "--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "gpu_count")
    assert "expected 8 GPUs (a100-8gpu.toml:suite.gpu_count), found 7;" in _failure(cases["test_gpu_count"])


def test_p2p_access_matrix_is_no_evidence_for_nvlink_p2p(pytester: pytest.Pytester) -> None:
    """Hole: CUDA's "CAN Access Peer" read as NVLink P2P; with the topology at PHB the pairs still passed."""
    topo = _variant(pytester.path, "topo/a100-sxm4-80gb-8gpu-distserve3.txt", "NV12", "PHB", count=-1)
    p2p = EVIDENCE / "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt"
    args = ("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={topo}", f"--nvlink-evidence={p2p}", "-k", "path or status")
    cases = _junit(pytester, *args)
    statuses = {name: case for name, case in cases.items() if name.startswith("test_p2p_status[")}
    assert len(statuses) == 56
    for case in statuses.values():
        message = _failure(case)
        assert "no evidence for the P2P status GPU " in message
        assert "states CUDA peer access, which P2P over PCIe also grants, not NVLink P2P capability" in message
    assert "path is PHB, expected NV12" in _failure(cases["test_path[gpu0-gpu1]"])


def test_topo_p2p_n_states_nvlink_capability(pytester: pytest.Pytester) -> None:
    p2p = EVIDENCE / "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt"
    nvlink = pytester.path / "p2p-n.txt"
    nvlink.write_text(topo_p2p_text("n", 8).replace("GPU5\tOK", "GPU5\tNS", 1))
    args = ("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={p2p}", f"--nvlink-evidence={nvlink}", "-k", "p2p_status")
    cases = _junit(pytester, *args)
    failing = {name for name, case in cases.items() if case.find("failure") is not None}
    assert failing == {"test_p2p_status[gpu5-gpu0]"}
    assert "P2P not usable (nvlink not_supported)" in _failure(cases["test_p2p_status[gpu5-gpu0]"])


def test_conflicting_figures_take_the_worst_and_name_its_file(pytester: pytest.Pytester) -> None:
    """Hole: across files the best figure won (max bandwidth), so one slow capture was outvoted."""
    sample = "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt"
    slow = _variant(pytester.path, sample, "     0 1528.86 268.94", "     0 1528.86  98.94")
    args = ("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={EVIDENCE / sample}", f"--nvlink-evidence={slow}")
    cases = _junit(pytester, *args, "-k", "p2p_unidirectional")
    failing = {name for name, case in cases.items() if case.find("failure") is not None}
    assert failing == {"test_p2p_unidirectional[gpu0-gpu1]"}
    message = _failure(cases["test_p2p_unidirectional[gpu0-gpu1]"])
    assert f"unidirectional bandwidth 98.9 GB/s (p2pBandwidthLatencyTest: {slow} (worst of 2 figures; " in message
    assert f"also 268.94 GB/s from p2pBandwidthLatencyTest: {EVIDENCE / sample}))" in message
    props = {p.get("name"): p.get("value") for p in cases["test_p2p_unidirectional[gpu0-gpu1]"].iter("property")}
    assert props["measured"] == "98.94"
    assert str(props["measurement_source"]).startswith(f"p2pBandwidthLatencyTest: {slow} (worst of 2")


def test_files_from_two_hosts_are_a_conflict(pytester: pytest.Pytester) -> None:
    sample = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"
    other = pytester.path / "other-host"
    other.mkdir()
    copy = _variant(other, sample, "on inst-ks8ls-comp device", "on inst-zz9-comp device", count=-1)
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu", f"--nvlink-evidence={EVIDENCE / sample}", f"--nvlink-evidence={copy}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --nvlink-evidence: host: {EVIDENCE / sample} comes from host 'inst-ks8ls-comp' but {copy} from "
            "host 'inst-zz9-comp'; evidence must come from the one server being judged"
        ]
    )
