"""Partial, trimmed and damaged outputs contribute what they state; damage elsewhere is a note.

Every input here is a variant built from the shipped samples (cut, indented, glued, concatenated).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import EVIDENCE, sample

from pytest_nvlink.record.coverage import file_coverage
from pytest_nvlink.sources.evidence.load import EvidenceError, load_evidence
from pytest_nvlink.sources.evidence.parsers import detect

A100_TOPO = "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
H100_TOPO = "topo/h100-sxm-8gpu-baremetal-supermicro-nccl1264-partial.txt"
H100_STATUS = "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt"
A100_ERRORS = "nvlink/a100-sxm4-40gb-vm-brev-nvlink-e-all.txt"
NCCL_TESTS = "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt"
P2P_CAPS = (
    "\tGPU0\tGPU1\tGPU2\nGPU0\tX\tOK\tOK\nGPU1\tOK\tX\tOK\nGPU2\tOK\tCNS\tX\n"
    "\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"
)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def gpu_block(text: str, index: int) -> str:
    """The ``GPU n: ...`` block of an nvidia-smi nvlink output, as ``-i n`` prints it."""
    start = text.index(f"GPU {index}:")
    end = text.find("GPU ", start + 1)
    return text[start : end if end > 0 else len(text)]


def outcomes(result: pytest.RunResult) -> dict[str, set[str]]:
    """check name -> set of outcomes (PASSED/FAILED/SKIPPED) over its items, from a -rA run."""
    found: dict[str, set[str]] = {}
    for line in result.stdout.lines:
        words = line.split()
        if len(words) >= 2 and words[0] in ("PASSED", "FAILED", "SKIPPED") and "::" in words[1]:
            name = words[1].split("::")[1].split("[")[0]
            found.setdefault(name, set()).add(words[0])
    return found


# --- outputs that cover part of the node -------------------------------------------------


def test_one_gpu_nvlink_status_judges_that_gpu_only(pytester: pytest.Pytester) -> None:
    path = write(pytester.path, "nvlink-s-i0.txt", "$ nvidia-smi nvlink -s -i 0\n" + gpu_block(sample(H100_STATUS), 0))
    node = load_evidence([path])
    assert len(node.gpus) == 1 and node.gpu_list is not None and not node.gpu_list.complete
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "active_links or speed or count"
    )
    counts = result.parseoutcomes()
    # GPU 0's 18 links at 26.562 GB/s pass; the other seven GPUs and the count are "no evidence" (failed
    # under the default --nvlink-evidence-missing=fail), never "GPU n is missing".
    assert counts["passed"] == 2, result.stdout.str()
    assert "only 1 GPU(s) were found" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*no evidence for the GPU count: *no file lists every GPU*"])
    skipped = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "--nvlink-evidence-missing=skip", "-k", "count"
    )
    skipped.assert_outcomes(skipped=1, deselected=skipped.parseoutcomes()["deselected"])


def test_status_then_capabilities_of_one_gpu_in_one_file(tmp_path: Path) -> None:
    status = gpu_block(sample(H100_STATUS), 3)
    caps = "GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n" + "".join(
        f"         Link {n}, P2P is supported: true\n" for n in range(18)
    )
    uuid = status.split("UUID: ")[1].split(")")[0]
    text = "$ nvidia-smi nvlink --status -i 3\n" + status + "$ nvidia-smi nvlink --capabilities -i 3\n"
    node = load_evidence([write(tmp_path, "gpu3.txt", text + caps.replace("GPU-x", uuid))])
    gpu3 = node.gpu(3)
    assert gpu3 is not None and gpu3.active_link_count() == 18
    assert node.gpu(0) is not None and node.gpu(0).nvlinks is None  # type: ignore[union-attr]
    assert node.gpu_list is not None and not node.gpu_list.complete


def test_error_counters_of_gpu_3_only(tmp_path: Path) -> None:
    node = load_evidence([write(tmp_path, "e-i3.txt", gpu_block(sample(A100_ERRORS), 3))])
    links = node.gpu(3).nvlinks  # type: ignore[union-attr]
    assert links is not None and all(link.errors is not None for link in links)
    assert node.gpu(2).nvlinks is None  # type: ignore[union-attr]


# --- paste damage outside the GPU block --------------------------------------------------


def test_glued_nic_and_affinity_cells_are_notes(tmp_path: Path) -> None:
    text = sample(A100_TOPO)
    gpu2 = next(line for line in text.splitlines() if line.startswith("GPU2"))
    damaged = gpu2.replace("SYS     SYS     0-63", "SYS     SYS0-63", 1)  # NIC3 ran into the affinity
    text = text.replace(gpu2, damaged).replace("SYS     SYS     SYS     SYS     0-63", "PXBNODE SYS SYS 0-63", 1)
    path = write(tmp_path, "topo.txt", text)
    node = load_evidence([path])
    assert len(node.paths or []) == 28 and {p.path for p in node.paths or []} == {"NV12"}
    assert node.gpu(2).cpu_affinity is None and node.gpu(3).cpu_affinity == "0-63,128-191"  # type: ignore[union-attr]
    (file, families, notes), *_ = file_coverage(node)
    assert file == str(path) and "paths" in families
    assert notes[0].startswith("line 4: row GPU2: NIC or affinity cells damaged")
    assert len(notes) == 3 and all("NIC path is not read" in note for note in notes[1:])  # PXBNODE vs SYS


def test_uneven_nic_rows_are_notes_but_a_gpu_cell_is_an_error(tmp_path: Path) -> None:
    text = sample(H100_TOPO)
    nic1 = next(line for line in text.splitlines() if line.startswith("NIC1"))
    node = load_evidence([write(tmp_path, "t.txt", text.replace(nic1, nic1.replace("\tSYS", "", 1)))])
    assert node.path(0, 7) == "NV18"
    notes = node.evidence_notes[str(tmp_path / "t.txt")]
    assert len(notes) == 1 and notes[0].startswith("line 11: row NIC1 damaged")
    gpu5 = next(line for line in text.splitlines() if line.startswith("GPU5"))
    bad = text.replace(gpu5, gpu5.replace("NV18\tNV18", "NV1\tNV18", 1))
    with pytest.raises(EvidenceError, match=r"t2\.txt:2: asymmetric matrix: .*row GPU5 column GPU0 is 'NV1'"):
        load_evidence([write(tmp_path, "t2.txt", bad)])


# --- topo -p2p without its command line; combined files ----------------------------------


def test_p2p_matrices_without_command_lines_give_the_count_with_a_note(tmp_path: Path) -> None:
    path = write(tmp_path, "p2p.txt", P2P_CAPS + P2P_CAPS.replace("OK\tCNS", "NS\tCNS"))
    node = load_evidence([path])
    assert len(node.gpus) == 3 and node.p2p is None
    notes = node.evidence_notes[str(path)]
    assert len(notes) == 2 and all("capability (r, w, n, a) is not stated" in n for n in notes)
    assert notes[0].endswith("(1 pair(s) not OK: GPU2->GPU1 chipset_not_supported)")
    assert notes[1].endswith("(2 pair(s) not OK: GPU2->GPU0 not_supported, GPU2->GPU1 chipset_not_supported)")


def test_p2p_read_then_write_with_command_lines(tmp_path: Path) -> None:
    text = "$ nvidia-smi topo -p2p r\n" + P2P_CAPS + "$ nvidia-smi topo -p2p w\n" + P2P_CAPS.replace("CNS", "OK")
    node = load_evidence([write(tmp_path, "rw.txt", text)])
    status = node.p2p_status(2, 1)
    assert status is not None and (status.read, status.write) == ("chipset_not_supported", "ok")


def test_topo_m_and_p2p_block_in_one_file_are_both_read(tmp_path: Path) -> None:
    p2p = "\t".join(["", *(f"GPU{i}" for i in range(8))]) + "\n"
    p2p += "".join("\t".join([f"GPU{a}", *("X" if a == b else "OK" for b in range(8))]) + "\n" for a in range(8))
    text = sample(A100_TOPO) + "\n$ nvidia-smi topo -p2p n\n" + p2p
    node = load_evidence([write(tmp_path, "both.txt", text)])
    assert node.path(0, 1) == "NV12" and node.p2p_status(0, 1).nvlink == "ok"  # type: ignore[union-attr]
    command = text.splitlines().index("$ nvidia-smi topo -p2p n") + 1
    assert [p.start_line for p in detect.split_parts(text)] == [1, command]


# --- indentation and wrappers ------------------------------------------------------------


@pytest.mark.parametrize(
    "wrap",
    [
        lambda t: "\n".join("    " + line for line in t.splitlines()),  # markdown code block
        lambda t: "```\n" + "\n".join("      " + line for line in t.splitlines()) + "\n```\n",
        lambda t: "PyTorch version: 2.3.0\nGPU Topology:\n" + t.lstrip("\t ") + "\nNvidia driver version: 550\n",
        lambda t: "user@node:~$ nvidia-smi topo -m\n" + t + "user@node:~$ \n",
        lambda t: "\n".join(line + " \t " for line in t.splitlines()).replace("\n", "\r\n"),
        lambda t: t[: t.index("Legend:") + 30],  # Legend cut short
    ],
    ids=["markdown", "fenced-6", "collect_env", "prompt", "trailing-crlf", "legend-cut"],
)
def test_wrapped_topo_is_read(tmp_path: Path, wrap: object) -> None:
    assert callable(wrap)
    for name in (A100_TOPO, H100_TOPO):
        text = sample(name)
        node = load_evidence([write(tmp_path, "t.txt", wrap(text + "\nLegend:\n\n  X    = Self\n"))])
        assert len(node.paths or []) == 28 and node.evidence_notes == {}, name


@pytest.mark.parametrize("relative", [H100_STATUS, A100_ERRORS, NCCL_TESTS])
def test_indented_crlf_outputs_of_other_tools(tmp_path: Path, relative: str) -> None:
    text = "> $ command\n" + "\n".join("      " + line + "  " for line in sample(relative).splitlines())
    node = load_evidence([write(tmp_path, "x.txt", text.replace("\n", "\r\n"))])
    assert len(node.gpus) == 8


# --- files with several outputs, unusable files --------------------------------------------


def test_every_output_of_a_concatenated_file_is_read(pytester: pytest.Pytester) -> None:
    text = sample(NCCL_TESTS) + "\n$ nvidia-smi topo -m\n" + sample(A100_TOPO)
    path = write(pytester.path, "both.txt", text)
    node = load_evidence([path])
    assert node.path(0, 1) == "NV12" and node.measurements.collectives
    assert set(file_coverage(node)[0][1]) >= {"paths", "collectives"}
    result = pytester.runpytest(
        "--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "test_path or busbw", "-rA"
    )
    assert outcomes(result)["test_path"] == {"PASSED"}


def test_unusable_files_in_a_folder_fail_the_run_until_excluded(pytester: pytest.Pytester) -> None:
    folder = pytester.path / "evidence"
    folder.mkdir()
    write(folder, "topo.txt", sample(A100_TOPO))
    (folder / "topo-utf16.txt").write_bytes(sample(A100_TOPO).encode("utf-16"))
    (folder / "core").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00")
    (folder / "cp1252.txt").write_bytes("GPU0 \u2014 fine\n".encode("cp1252"))
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={folder}", "-k", "test_path")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*2 file(s) in the evidence folders cannot be used:*core (binary: NUL byte on line 1)*"
            "cp1252.txt (not UTF-8 text: byte 0x97 on line 1)*--nvlink-evidence-exclude=GLOB*"
        ]
    )
    pytester.makeini("[pytest]\nnvlink_evidence_exclude =\n    core\n    cp1252*\n")
    result = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={folder}", "-k", "test_path", "-rA")
    assert outcomes(result)["test_path"] == {"PASSED"}, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*topo-utf16.txt: inventory, paths*",
            "*note: read as UTF-16 (byte-order mark)*",
            "*cp1252.txt: contributed nothing*",
            "*note: not used: excluded by --nvlink-evidence-exclude=cp1252[*]",
        ]
    )


def test_unknown_part_names_the_line_where_it_begins(tmp_path: Path) -> None:
    text = sample(A100_TOPO) + "\n$ nvidia-smi topo -m\n\tGPU0\tGPU1\nGPU0\t???\n"
    command = text.splitlines().index("$ nvidia-smi topo -m") + 1
    with pytest.raises(EvidenceError, match=rf"t\.txt:{command}: cannot tell which tool"):
        load_evidence([write(tmp_path, "t.txt", text)])


# Samples that are several runs of one tool appended to one log, each run a part of its own.
SEVERAL_RUNS = {
    "bandwidthTest/constructed-h200-8gpu-per-device-runs-gpu5-slow.txt": 8,
    "bandwidthTest/constructed-v100-range-mode-mbs-pinned-and-pageable.txt": 2,
}


def test_shipped_samples_are_one_part_each() -> None:
    for path in sorted(EVIDENCE.rglob("*.txt")):
        runs = SEVERAL_RUNS.get(path.relative_to(EVIDENCE).as_posix(), 1)
        assert len(detect.split_parts(path.read_text())) == runs, path


# --- a topo -m matrix whose header line was lost -----------------------------------------


def test_headerless_topo_takes_columns_from_the_rows(pytester: pytest.Pytester) -> None:
    lines = sample(H100_TOPO).splitlines()
    path = write(pytester.path, "topo.txt", "\n".join(lines[1:]) + "\n")
    node = load_evidence([path])
    assert len(node.paths or []) == 28 and {p.path for p in node.paths or []} == {"NV18"}
    assert node.evidence_notes[str(path)][0].startswith("line 1: header line missing; columns taken from")
    run = pytester.runpytest("--nvlink-suite=h100-8gpu", f"--nvlink-evidence={path}", "-k", "test_path")
    run.assert_outcomes(passed=28, deselected=run.parseoutcomes()["deselected"])


def test_headerless_topo_with_a_gpu_row_lost_is_an_error(tmp_path: Path) -> None:
    lines = sample(A100_TOPO).splitlines()
    text = "\n".join(line for line in lines[1:] if not line.startswith("GPU7")) + "\n"
    with pytest.raises(EvidenceError, match=r"t\.txt:1: header line missing and row GPU0 has an NVLink cell"):
        load_evidence([write(tmp_path, "t.txt", text)])


# --- older formats ---------------------------------------------------------------------------


def test_old_topo_with_mlx5_columns_and_no_gpu_numa_id(pytester: pytest.Pytester) -> None:
    text = sample(A100_TOPO).replace("NIC", "mlx5_")
    text = re.sub(r"\s+GPU NUMA ID", "", text)
    text = re.sub(r"(?m)^(GPU\d.*?\d)\s+N/A$", r"\1", text)
    path = write(pytester.path, "old.txt", text[: text.index("Legend:")])
    node = load_evidence([path])
    assert node.path(3, 4) == "NV12" and node.gpu(0).numa_node == 0 and node.evidence_notes == {}  # type: ignore[union-attr]
    run = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "test_path")
    run.assert_outcomes(passed=28, deselected=run.parseoutcomes()["deselected"])


def test_p2p_bandwidth_latency_test_indented_six_spaces(tmp_path: Path) -> None:
    text = "\n".join(
        "      " + line for line in sample("p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt").splitlines()
    )
    node = load_evidence([write(tmp_path, "p2p.txt", text)])
    assert len(node.gpus) == 8 and len([m for m in node.measurements.p2p if m.kind == "unidirectional"]) == 56


def test_glued_nic_cells_judged_as_a_person_would(pytester: pytest.Pytester) -> None:
    text = sample(A100_TOPO).replace("SYS     SYS     SYS     SYS     0-63", "SYS     SYS     SYS     SYS0-63", 1)
    path = write(pytester.path, "topo.txt", text)
    run = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "test_path or count")
    run.assert_outcomes(passed=29, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(
        ["*topo.txt: inventory, paths", "  note: line 2: row GPU0: NIC or affinity cells damaged*"]
    )


def test_p2p_read_and_write_matrices_of_eight_gpus_judged(pytester: pytest.Pytester) -> None:
    def matrix(bad: tuple[int, int] | None) -> str:
        rows = "".join(
            "\t".join([f"GPU{a}", *("X" if a == b else ("NS" if (a, b) == bad else "OK") for b in range(8))]) + "\n"
            for a in range(8)
        )
        return "\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\n" + rows

    text = "$ nvidia-smi topo -p2p r\n" + matrix(None) + "\n$ nvidia-smi topo -p2p w\n" + matrix((3, 5))
    path = write(pytester.path, "p2p.txt", text)
    run = pytester.runpytest("--nvlink-suite=a100-8gpu", f"--nvlink-evidence={path}", "-k", "p2p_status", "-rfs")
    # Read and write "OK" hold over PCIe too: on NVLink pairs they are no evidence without the
    # NVLink capability (-p2p n); the pair whose write is stated unusable fails all the same.
    run.assert_outcomes(failed=56, deselected=run.parseoutcomes()["deselected"])
    run.stdout.fnmatch_lines(["GPU 3 -> GPU 5: P2P not usable (write not_supported) although the suite expects NV12*"])
    run.stdout.fnmatch_lines(["no evidence for the P2P status GPU 0 -> GPU 1*"])
