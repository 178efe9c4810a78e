"""One GPU counted twice is not two GPUs, in every source (issue 24, section 3).

A GPU's identity (UUID, serial, PCI bus id, CUDA index) is unique per node; a repeat fails the inventory
gate naming both GPUs and the field, and the repeated entry's items fail as a lost GPU's do. A probe error
naming a GPU fails that GPU; a link id the SKU does not have is impossible, not an extra link; the fabric
health summary is read without regard to case; a node with more GPUs than the suite fails the count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EVIDENCE, SNAPSHOTS

from pytest_nvlink.model import Gpu

SUITE = "--nvlink-suite=h100-8gpu"
NVLINK_S = EVIDENCE / "nvlink" / "h100-sxm-8gpu-aws-p5-nvlink-status.txt"
SMI_Q = EVIDENCE / "nvidia-smi-q" / "h100-sxm-8gpu-constructed-q.txt"
GPU6_UUID = "GPU-7e33e3c5-6511-3a15-3174-b38d99093e56"
GPU7_UUID = "GPU-904c6966-ccb1-735a-fb5b-718b34a7c0cd"


def _healthy() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((SNAPSHOTS / "h100-8gpu-healthy.json").read_text(encoding="utf-8"))
    return document


def _write(pytester: pytest.Pytester, name: str, document: dict[str, Any]) -> Path:
    path = pytester.path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _failure_text(result: pytest.RunResult, test: str) -> str:
    """The one-line reason of ``test`` in the short test summary (-rf)."""
    out = result.stdout.str()
    marker = f"__ {test} __"
    assert marker in out, out[-3000:]
    return out.split(marker, 1)[1].split("\n", 2)[1]


# --- duplicated identity --------------------------------------------------------------------------


def test_a_snapshot_with_gpu6_counted_twice_fails_the_gate_and_gpu7s_items(pytester: pytest.Pytester) -> None:
    document = _healthy()
    gpus = document["node"]["gpus"]
    for key in ("uuid", "serial", "pci_bus_id"):
        gpus[7][key] = gpus[6][key]
    result = pytester.runpytest(SUITE, f"--nvlink-replay={_write(pytester, 'twice.json', document)}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    count = _failure_text(result, "test_gpu_count")
    assert count.startswith("expected 8 GPUs (h100-8gpu.toml:suite.gpu_count), found 7 usable: GPU 7 has the UUID, ")
    assert "serial number and PCI bus id of GPU 6" in count and gpus[6]["uuid"] in count
    model = _failure_text(result, "test_gpu_model[gpu7]")
    assert model.startswith("GPU 7 is not judged on another GPU's facts: GPU 7 has the UUID")
    # GPU 7's every item (inventory, NVLink, PCIe, fabric, pairs) fails; GPUs 0-6 among themselves pass.
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 87 and outcomes["passed"] == 301


def test_an_nvlink_status_capture_with_gpu6s_uuid_twice_fails(pytester: pytest.Pytester) -> None:
    capture = pytester.path / "nvlink-s.txt"
    capture.write_text(NVLINK_S.read_text(encoding="utf-8").replace(GPU7_UUID, GPU6_UUID), encoding="utf-8")
    result = pytester.runpytest(SUITE, f"--nvlink-evidence={capture}", "-k", "test_gpu_count or gpu7", "-rA")
    count = _failure_text(result, "test_gpu_count")
    assert f"GPU 7 has the UUID of GPU 6 (uuid {GPU6_UUID}): one GPU counted twice" in count
    result.stdout.fnmatch_lines(["FAILED nvlink/test_nvlink.py::test_nvlink_speed[[]gpu7[]] - *"])
    assert "PASSED nvlink/test_nvlink.py::test_nvlink_speed[gpu7]" not in result.stdout.str()


def test_an_nvidia_smi_q_with_gpu6s_section_pasted_over_gpu7s_fails_the_count(pytester: pytest.Pytester) -> None:
    lines = SMI_Q.read_text(encoding="utf-8").split("\n")
    start6 = lines.index("GPU 00000000:BA:00.0")
    start7 = lines.index("GPU 00000000:DB:00.0")
    end7 = start7 + (start7 - start6)
    pasted = pytester.path / "q.txt"
    pasted.write_text("\n".join(lines[:start7] + lines[start6:start7] + lines[end7:]), encoding="utf-8")
    result = pytester.runpytest(SUITE, f"--nvlink-evidence={pasted}", "-k", "test_gpu_count or test_gpu_model")
    count = _failure_text(result, "test_gpu_count")
    assert "found 7 usable: GPU 7 has the UUID and PCI bus id of GPU 6" in count
    assert "8 GPUs found" not in result.stdout.str()
    result.stdout.fnmatch_lines(["FAILED nvlink/test_inventory.py::test_gpu_model[[]gpu7[]] - *"])


def test_a_duplicated_cuda_index_fails_the_gate(pytester: pytest.Pytester) -> None:
    document = _healthy()
    for index, gpu in enumerate(document["node"]["gpus"]):
        gpu["cuda_index"] = index
    document["node"]["gpus"][7]["cuda_index"] = 6
    result = pytester.runpytest(SUITE, f"--nvlink-replay={_write(pytester, 'cuda.json', document)}", "-k", "gpu_count")
    assert "GPU 7 has the CUDA index of GPU 6 (cuda_index 6)" in _failure_text(result, "test_gpu_count")


def test_identity_on_a_rack_bus_ids_and_cuda_indices_repeat_per_host_only() -> None:
    from pytest_nvlink.model.identity import duplicate_identities

    # Two trays built alike: the same bus id and CUDA index on each host name two GPUs, a UUID never does.
    a = Gpu(index=0, uuid="GPU-a", pci_bus_id="0008:01:00.0", cuda_index=0, host="tray-a")
    b = Gpu(index=4, uuid="GPU-b", pci_bus_id="0008:01:00.0", cuda_index=0, host="tray-b")
    assert duplicate_identities([a, b]) == []
    c = Gpu(index=5, uuid="gpu-A", host="tray-b")  # a UUID compared without regard to case
    d = Gpu(index=1, pci_bus_id="00000008:01:00.0", host="tray-a")  # NVML's 8-digit domain, the same bus
    found = duplicate_identities([a, b, c, d])
    assert [(x.gpu, x.first, [f for f, _ in x.shared]) for x in found] == [(5, 0, ["uuid"]), (1, 0, ["pci_bus_id"])]


# --- probe errors that name a GPU -----------------------------------------------------------------


def test_a_probe_error_naming_a_gpu_fails_it_though_the_list_is_complete(pytester: pytest.Pytester) -> None:
    document = _healthy()
    document["node"]["probe_errors"] = ["GPU 3: Xid 79, GPU has fallen off the bus"]
    result = pytester.runpytest(SUITE, f"--nvlink-replay={_write(pytester, 'xid.json', document)}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    count = _failure_text(result, "test_gpu_count")
    assert "found 7: GPU 3: probe error: Xid 79, GPU has fallen off the bus" in count
    result.stdout.fnmatch_lines(["FAILED nvlink/test_nvlink.py::test_nvlink_speed[[]gpu3[]] - *"])
    assert (
        result.parseoutcomes()["failed"] == 87
    )  # test_xid[gpu3] and test_host_link[gpu3] too: a lost GPU judges nothing


def test_probe_errors_name_gpus_by_index_bus_id_or_tray() -> None:
    from pytest_nvlink.model.identity import gpus_named_in

    gpus = [
        Gpu(index=0, pci_bus_id="0000:18:00.0"),
        Gpu(index=4, pci_bus_id="0008:01:00.0", host="tray-b", local_index=0),
        Gpu(index=1, pci_bus_id="0008:01:00.0", host="tray-a", local_index=1),
    ]
    errors = [
        "NVML could not count the GPUs (x)",  # names no GPU
        "GPU 00000000:18:00.0: Xid 79",  # nvidia-smi's bus-id form, not "GPU 0"
        "tray tray-b: GPU 0 (bus 0008:01:00.0) is lost: GPU is lost",  # a tray numbers its own GPUs
        "GPU 1: Xid 48",
    ]
    assert gpus_named_in(errors, gpus) == {
        0: "probe error: Xid 79",
        4: "probe error: (bus 0008:01:00.0) is lost: GPU is lost",
        1: "probe error: Xid 48",
    }


# --- link ids outside the SKU's range -------------------------------------------------------------


def test_link_18_on_an_h100_snapshot_is_an_input_error(pytester: pytest.Pytester) -> None:
    document = _healthy()
    document["node"]["gpus"][3]["nvlinks"][17]["link"] = 18
    path = _write(pytester, "link18.json", document)
    result = pytester.runpytest(SUITE, f"--nvlink-replay={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --nvlink-replay: {path}:node.gpus[[]3[]].nvlinks[[]17[]].link: NVLink 18 is outside the links "
            "0-17 an NVLink 4 GPU has (h100-sxm.toml:nvlink.version), so it is impossible, not an extra link*"
        ]
    )


def test_link_18_in_an_nvlink_status_capture_is_an_input_error(pytester: pytest.Pytester) -> None:
    lines = NVLINK_S.read_text(encoding="utf-8").split("\n")
    gpu3 = lines.index(next(line for line in lines if line.startswith("GPU 3:")))
    lines[gpu3 + 18] = lines[gpu3 + 18].replace("Link 17:", "Link 18:")
    capture = pytester.path / "nvlink-s.txt"
    capture.write_text("\n".join(lines), encoding="utf-8")
    result = pytester.runpytest(SUITE, f"--nvlink-evidence={capture}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --nvlink-evidence: {capture}: GPU 3 Link 18: NVLink 18 is outside*"])


def test_link_18_read_live_is_a_probe_error_that_fails_the_gpu(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from fake_pynvml import make_fake_pynvml

    from pytest_nvlink.sources.snapshot.file import load_snapshot

    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    links = node.gpus[3].nvlinks
    assert links is not None
    links.append(dataclasses.replace(links[17], link=18))  # the driver counts 19 links on GPU 3
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml(node))
    result = pytester.runpytest(SUITE, "-k", "test_gpu_count or test_gpu_model")
    count = _failure_text(result, "test_gpu_count")
    assert "GPU 3: probe error: NVML reports NVLink 18 is outside the links 0-17 an NVLink 4 GPU has" in count
    result.stdout.fnmatch_lines(["FAILED nvlink/test_inventory.py::test_gpu_model[[]gpu3[]] - *"])


# --- fabric health, more GPUs than the suite ------------------------------------------------------


def test_fabric_health_summary_is_matched_without_regard_to_case(pytester: pytest.Pytester) -> None:
    document = _healthy()
    document["node"]["gpus"][2]["fabric"]["health_summary"] = "Unhealthy"
    path = _write(pytester, "unhealthy.json", document)
    result = pytester.runpytest(SUITE, f"--nvlink-replay={path}", "-k", "test_fabric")
    result.assert_outcomes(failed=1, passed=7, deselected=380)
    assert _failure_text(result, "test_fabric[gpu2]").startswith("GPU 2: fabric health reports summary:unhealthy")


def test_a_node_with_more_gpus_than_the_suite_fails_the_count(pytester: pytest.Pytester) -> None:
    document = _healthy()
    extra = json.loads(json.dumps(document["node"]["gpus"][7]))
    extra.update(index=8, uuid="GPU-00000000-0000-4000-8000-000000000008", serial="1654223018799")
    extra["pci_bus_id"] = "0000:dc:00.0"
    document["node"]["gpus"].append(extra)
    result = pytester.runpytest(SUITE, f"--nvlink-replay={_write(pytester, 'nine.json', document)}", "-k", "count")
    result.assert_outcomes(failed=1, deselected=387)
    count = _failure_text(result, "test_gpu_count")
    assert count.startswith("expected 8 GPUs (h100-8gpu.toml:suite.gpu_count), found 9: this node is not the shape")


def test_evidence_naming_more_gpus_than_the_suite_fails_the_count(pytester: pytest.Pytester) -> None:
    # nvlink -s names GPUs only up to the highest it printed (a lower bound); above the suite's count: too many.
    text = NVLINK_S.read_text(encoding="utf-8")
    block = text[text.index("GPU 7:") :]
    capture = pytester.path / "nvlink-s.txt"
    capture.write_text(text + block.replace("GPU 7:", "GPU 8:").replace(GPU7_UUID, GPU7_UUID[:-1] + "e"))
    result = pytester.runpytest(SUITE, f"--nvlink-evidence={capture}", "-k", "count")
    result.assert_outcomes(failed=1, deselected=387)
    assert "found 9: this node is not the shape suite h100-8gpu describes" in _failure_text(result, "test_gpu_count")
