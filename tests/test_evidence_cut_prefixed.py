"""Issue 26, classes 1, 3, 7 and 8: cut-short nvlink captures, launcher line prefixes, cut topo legends and
NCCL logs without their prefix, read as a person reading them would."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import EVIDENCE, sample

from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers import detect, nccl_log, nvlink, topo
from pytest_nvlink.sources.evidence.parsers.prefixes import strip_prefixes

CUT = "nvlink/a100-sxm4-80gb-8gpu-constructed-status-cut-short.txt"
P5 = "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt"
LEGEND_CUT = "topo/a100-sxm4-80gb-8gpu-vm-constructed-phb-legend-cut.txt"
SRUN = "topo/h100-sxm-8gpu-constructed-srun-label.txt"
NCCL_224 = "nccl-debug/h100-sxm-8gpu-constructed-nccl224-prefix-stripped.txt"
READABLE = [
    "topo/a100-sxm4-80gb-8gpu-distserve3.txt",
    "topo/h100-sxm-8gpu-baremetal-supermicro-nccl1264-partial.txt",
    P5,
    "nvlink/a100-sxm4-40gb-vm-brev-nvlink-e-all.txt",
    "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt",
    "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt",
    "nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt",
    "nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt",
    "nvidia-smi-q/h100-sxm-8gpu-constructed-q.txt",
]
PREFIXES = {
    "openmpi": "[1,0]<stdout>:",
    "srun": " 0: ",
    "pdsh": "node7: ",
    "ray": "(WorkerDict pid=123) ",
    "quoted": "> > > ",
    "kubectl": "2024-05-01T10:00:00.123456789Z ",
    "cri": "2024-05-01T10:00:00.1Z stdout F ",
    "journal": "May  1 10:00:00 node7 bash[123]: ",
    "compose": "svc-1  | ",
    "stacked": "[1,3]<stdout>:2024-05-01T10:00:00Z ",
}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def prefixed(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.split("\n"))


def readable(text: str) -> bool:
    return detect.detect_kind(text) is not None


def outcomes(result: pytest.RunResult, check: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in result.stdout.lines:
        match = re.search(rf"::{check}\[(\S+)\] (PASSED|FAILED|SKIPPED|ERROR)", line)  # -v lines
        if match:
            found[match.group(1)] = match.group(2)
    return found


# --- class 3: launcher and log-collector prefixes --------------------------------------------------


@pytest.mark.parametrize("relative", READABLE)
@pytest.mark.parametrize("prefix", PREFIXES.values(), ids=PREFIXES.keys())
def test_a_prefix_on_every_line_parses_as_the_bare_output(relative: str, prefix: str) -> None:
    bare = sample(relative)
    stripped = strip_prefixes(prefixed(bare, prefix), readable)
    assert stripped.removed, "the prefix must be named in the file's notes"
    assert detect.parse_any(stripped.text) == detect.parse_any(bare)


@pytest.mark.parametrize("relative", READABLE)
def test_bare_outputs_are_left_as_they_are(relative: str) -> None:
    bare = sample(relative)
    assert strip_prefixes(bare, readable).removed == ()


def test_ray_prefix_and_repeated_suffix_and_trailing_spaces_go_trailing_tabs_stay() -> None:
    text = "GPU0\tX\tNV18\t\n(pid=5) line [repeated 16x across cluster]\nend   "
    stripped = strip_prefixes(text)
    assert stripped.text.split("\n") == ["GPU0\tX\tNV18\t", "line", "end"]
    assert any("repeated" in what for what in stripped.removed)


def test_rack_host_lines_are_separators_not_prefixes() -> None:
    text = "host: tray01\nGPU 0: A (UUID: GPU-1)\n  Link 0: 50 GB/s\nhost: tray02\nGPU 0: A (UUID: GPU-2)\n"
    assert strip_prefixes(text).text == text


def test_several_pdsh_hosts_are_not_merged_into_one_output() -> None:
    # Two hosts' lines interleaved: stripping would mix two machines' facts; the text is left alone.
    lines = sample(P5).split("\n")
    text = "\n".join(f"node{n % 2}: {line}" for n, line in enumerate(lines))
    assert strip_prefixes(text, readable).removed == ()


def test_a_minority_prefix_of_an_ambiguous_shape_is_kept() -> None:
    text = "0: not a label\nplain line\nanother line\nthird line\n"
    assert strip_prefixes(text).removed == ()


def test_srun_labelled_topo_is_judged_with_a_note(pytester: pytest.Pytester) -> None:
    path = EVIDENCE / SRUN
    node = load_evidence([path])
    assert any("srun --label prefix ('0:')" in note for note in node.evidence_notes[str(path)])
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "test_path", "-rA", "-v")
    paths = outcomes(result, "test_path")
    assert len(paths) == 28 and paths.pop("gpu3-gpu6") == "FAILED"
    assert set(paths.values()) == {"PASSED"}
    result.stdout.fnmatch_lines(["*GPU 3 <-> GPU 6: path is NODE, expected NV18*"])


@pytest.mark.parametrize("prefix", ["[1,0]<stdout>:", "(WorkerDict pid=123) ", "node7: "], ids=["mpi", "ray", "pdsh"])
def test_prefixed_nvlink_status_keeps_its_fault(pytester: pytest.Pytester, prefix: str) -> None:
    text = sample(P5).replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 1)
    path = write(pytester.path, "nvlink.txt", prefixed(text, prefix))
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "active_links", "-rA", "-v"
    )
    assert outcomes(result, "test_nvlink_active_links") == {
        f"gpu{n}": "FAILED" if n == 0 else "PASSED" for n in range(8)
    }
    result.stdout.fnmatch_lines(["*GPU 0: 17 of 18 NVLinks active*inactive link(s): 5*"])


# --- class 1: nvidia-smi nvlink -s cut short -----------------------------------------------------


@pytest.mark.parametrize("marker", ["...", "....", "......", "[...]", "<snip>", "(output truncated)", " [ ... ] "])
def test_an_elision_marker_makes_that_gpus_link_count_unknown(marker: str) -> None:
    lines = sample(P5).split("\n")
    gpu2 = lines.index(next(line for line in lines if line.startswith("GPU 2:")))
    text = "\n".join([*lines[: gpu2 + 2], marker, *lines[gpu2 + 19 :]])  # GPU 2: link 0, then the marker
    report = nvlink.parse(text)
    cut = {gpu.index: gpu.cut for gpu in report.gpus if gpu.cut is not None}
    assert list(cut) == [2] and cut[2] == (gpu2 + 3, f"cut short at {marker.strip()!r}")
    assert report.notes == ((gpu2 + 3, f"GPU 2: the nvidia-smi nvlink block is cut short at {marker.strip()!r}; "
                             "its link count is not known"),)  # fmt: skip


def test_the_last_block_shorter_than_its_like_is_cut_but_a_whole_output_is_not() -> None:
    lines = sample(P5).rstrip("\n").split("\n")
    report = nvlink.parse("\n".join(lines[:-15]))  # GPU 7 ends after its third link
    assert [(gpu.index, gpu.cut is not None) for gpu in report.gpus if gpu.cut] == [(7, True)]
    assert "ends after 3 link line(s) where the other NVIDIA H100 80GB HBM3 blocks have 18" in report.notes[0][1]
    assert all(gpu.cut is None for gpu in nvlink.parse(sample(P5)).gpus)
    only_one = "\n".join(lines[:3])  # one GPU, two links: nothing to compare with, a person could not tell
    assert nvlink.parse(only_one).gpus[0].cut is None


def test_cut_gpu_is_unknown_complete_gpus_are_judged(pytester: pytest.Pytester) -> None:
    path = EVIDENCE / CUT
    node = load_evidence([path])
    assert [gpu.index for gpu in node.gpus if gpu.nvlinks is None] == [2, 3, 4, 6]
    assert node.gpus[1].active_link_count() == 11
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "--nvlink-evidence-missing=skip", "-k",
        "active_links", "-rA", "-v",
    )  # fmt: skip
    assert outcomes(result, "test_nvlink_active_links") == {
        "gpu0": "PASSED", "gpu1": "FAILED", "gpu2": "SKIPPED", "gpu3": "SKIPPED",
        "gpu4": "SKIPPED", "gpu5": "PASSED", "gpu6": "SKIPPED", "gpu7": "SKIPPED",
    }  # fmt: skip
    result.stdout.fnmatch_lines(
        [
            "*GPU 1: 11 of 12 NVLinks active*inactive link(s): 7*",
            "*note: line 33: GPU 2: the nvidia-smi nvlink block is cut short at '......'; its link count is not known",
            "*note: line 50: GPU 6: the nvidia-smi nvlink block is cut short: the output ends after 3 link line(s)*",
            f"*no evidence for the NVLink state of GPU 2: {path}:33: GPU 2's block is cut short at '......'*",
        ]
    )
    result.stdout.no_fnmatch_line("*: 1 of 12 NVLinks active*")


def test_a_whole_capture_of_the_cut_gpu_elsewhere_still_counts(tmp_path: Path) -> None:
    lines = sample(P5).split("\n")
    cut = write(tmp_path, "cut.txt", "\n".join([*lines[:3], "......"]))
    whole = write(tmp_path, "whole.txt", sample(P5))
    node = load_evidence([cut, whole])
    assert node.gpus[0].active_link_count() == 18


# --- class 7: a topo -m legend cut before NV# ----------------------------------------------------


def test_cut_legend_vm_with_every_pair_phb_fails_the_paths(pytester: pytest.Pytester) -> None:
    path = EVIDENCE / LEGEND_CUT
    matrix = topo.parse(sample(LEGEND_CUT))
    assert not matrix.pcie_only and set(matrix.paths.values()) == {"PHB"}
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "test_path", "-rA", "-v")
    assert set(outcomes(result, "test_path").values()) == {"FAILED"} and len(outcomes(result, "test_path")) == 28
    result.stdout.fnmatch_lines(
        [
            "*GPU 0 <-> GPU 1: path is PHB, expected NV12*",
            "*the Legend stops before its NV# line (cut short): read as topo -m*",
        ]
    )


def test_the_mp_command_line_still_says_mp(tmp_path: Path) -> None:
    path = write(tmp_path, "mp.txt", "$ nvidia-smi topo -mp\n" + sample(LEGEND_CUT))
    node = load_evidence([path])
    assert node.paths is None and "topo -mp" in node.unknown_reasons["paths"]


# --- class 8: NCCL logs without the host:pid:tid prefix ------------------------------------------


def test_prefix_stripped_nccl_224_log_with_zero_mnnvl_uuid_passes(pytester: pytest.Pytester) -> None:
    log = nccl_log.parse(sample(NCCL_224))
    assert (log.version, log.nranks, log.nnodes, len(log.ranks), log.hosts) == ("2.24.3+cuda12.6", 8, 1, 8, ())
    assert {fabric.fabric_uuid for fabric in log.mnnvl} == {"0.0"} and not any(f.problems for f in log.mnnvl)
    assert {c.transport for c in log.channels} == {"P2P"} and len(log.channels) == 24 * 8
    path = EVIDENCE / NCCL_224
    result = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "transport")
    result.assert_outcomes(passed=1, deselected=result.parseoutcomes()["deselected"])


@pytest.mark.parametrize(
    "prefix",
    [
        "12345:12399 [0] ",
        "2025-01-31 12:00:00.123 ",
        "2025-01-31 12:00:00.123 [0] ",
        "[rank0]: ",
        "I0131 trainer.py:42] ",
    ],
    ids=["pid-tid", "timestamp", "timestamp-dev", "torch-rank", "glog"],
)
def test_nccl_lines_after_any_logger_prefix_are_read(prefix: str) -> None:
    text = "\n".join(prefix + line for line in sample(NCCL_224).split("\n") if line)
    assert detect.detect_kind(strip_prefixes(text, readable).text) == nccl_log.KIND
    log = nccl_log.parse(text)
    assert len(log.channels) == 24 * 8 and log.nranks == 8


def test_a_line_that_is_not_nccls_is_skipped_not_refused() -> None:
    text = "loss 0.25 step 10\nNCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\nsome framework line\n"
    assert len(nccl_log.parse(text).channels) == 1
