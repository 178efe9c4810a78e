"""MIG mode in the verdicts: named first where P2P fails on a GPU in MIG mode, and required off by inventory.mig.

Live runs go through the fake NVML (in-process, so that the worktree's plugin is the one judging); the
nvidia-smi -q evidence of the same node must give the same verdict as the live probe.
"""

from __future__ import annotations

import dataclasses
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import SNAPSHOTS
from fake_pynvml import make_fake_pynvml

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.judges import mig
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import Node, P2PMeasurement, P2PStatus, TransportChannel
from pytest_nvlink.model.document import SnapshotError, save_snapshot
from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers.common import ParseError
from pytest_nvlink.sources.evidence.parsers.smi_query import NO_MIG_NOTE, parse
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome

SMI_Q = Path(__file__).parent / "data" / "evidence" / "nvidia-smi-q" / "h100-sxm-8gpu-constructed-q.txt"
MIG_DISABLED_BLOCK = "MIG Mode                              : \n        Current                           : Disabled"
MIG_OFF = 'extends = "h100-sxm"\n[inventory]\nmig = "off"\n'


def _node(enabled: tuple[int, ...] = (2,), pending: dict[int, str] | None = None) -> Node:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")
    for gpu in node.gpus:
        gpu.mig_mode_current = "enabled" if gpu.index in enabled else "disabled"
        gpu.mig_mode_pending = (pending or {}).get(gpu.index, gpu.mig_mode_current)
    return node


def _context(node: Node, site: Path | None = None) -> Context:
    suite = load_suite("h100-8gpu")
    return Context(node, suite, load_thresholds(suite.thresholds_ref, site))


# --- the likely cause ----------------------------------------------------------------------------------


def test_mig_is_named_first_for_a_pair_with_a_gpu_in_mig_mode() -> None:
    node = _node(enabled=(2,), pending={2: "disabled"})
    cause = mig.with_mig_cause(node, (2, 5), "degraded NVLink")
    assert cause.startswith("GPU 2 is in MIG mode, which has no GPU-to-GPU P2P over NVLink or PCIe")
    assert "MIG disabled is pending, a GPU reset applies it" in cause
    assert cause.endswith("; otherwise degraded NVLink")
    assert mig.with_mig_cause(node, (0, 5), "degraded NVLink") == "degraded NVLink"
    assert mig.mig_note(node, (0, 1)) == ""


def test_a_mig_mode_pending_but_not_current_is_no_cause_of_a_failure_now() -> None:
    node = _node(enabled=(), pending={4: "enabled"})
    assert mig.mig_cause(node, (4, 5)) is None


def test_p2p_status_failure_on_a_mig_gpu_names_mig_before_the_other_causes() -> None:
    from pytest_nvlink.judges.topology import p2p_status

    node = _node()
    node.p2p = [
        P2PStatus(s.src, s.dst, "not_supported", "not_supported", "not_supported", "not_supported")
        if 2 in (s.src, s.dst)
        else s
        for s in node.p2p or []
    ]
    verdict = p2p_status(_context(node), 2, 3)
    assert verdict.outcome is Outcome.FAIL
    assert "likely cause: GPU 2 is in MIG mode" in verdict.message
    assert verdict.message.endswith("`nvidia-smi topo -p2p rw`")  # the other cause still follows


# --- inventory.mig ---------------------------------------------------------------------------------------


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "site.toml"
    path.write_text('[inventory]\nmig = "off"\n')
    return path


def test_inventory_mig_off_fails_a_gpu_in_mig_mode_with_its_sentence(site: Path) -> None:
    verdicts = [mig.gpu_mig(_context(_node(), site), index) for index in range(8)]
    assert [v.outcome for v in verdicts].count(Outcome.PASS) == 7
    assert verdicts[2].outcome is Outcome.FAIL
    assert verdicts[2].message == (
        "GPU 2: MIG mode is enabled, but site.toml:inventory.mig = 'off' requires it disabled; a GPU in MIG mode "
        "has no P2P with other GPUs (NVLink or PCIe) — disable it with `nvidia-smi -i 2 -mig 0` and reset the GPU"
    )


def test_inventory_mig_off_fails_a_mig_mode_pending_enabled(site: Path) -> None:
    verdict = mig.gpu_mig(_context(_node(enabled=(), pending={6: "enabled"}), site), 6)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith("GPU 6: MIG mode is disabled now but enabled is pending, applied at the next")


def test_an_unknown_mig_mode_is_unknown_never_a_pass(site: Path) -> None:
    node = _node(enabled=())
    node.gpus[3].mig_mode_current = node.gpus[3].mig_mode_pending = None
    node.unknown_reasons["gpu3.mig_mode"] = "NVML: Insufficient Permissions"
    verdict = mig.gpu_mig(_context(node, site), 3)
    assert verdict.outcome is Outcome.UNKNOWN
    assert "NVML: Insufficient Permissions" in verdict.message


@pytest.mark.parametrize("value", ['"Off"', '"disabled"', "false", "0"])
def test_inventory_mig_takes_only_off_or_on(tmp_path: Path, value: str) -> None:
    path = tmp_path / "site.toml"
    path.write_text(f"[inventory]\nmig = {value}\n")
    with pytest.raises(ConfigError, match=r"site\.toml:inventory\.mig: expected \"off\" or \"on\""):
        load_thresholds("h100-sxm", path)


# --- snapshots and nvidia-smi -q --------------------------------------------------------------------------


def test_a_snapshot_with_an_impossible_mig_mode_names_file_and_key(tmp_path: Path) -> None:
    node = _node()
    node.gpus[1].mig_mode_pending = "Enabled"
    path = tmp_path / "node.json"
    save_snapshot(node, path)
    with pytest.raises(SnapshotError, match=r"node\.json:node\.gpus\[1\]\.mig_mode_pending: 'Enabled' is not a MIG"):
        load_snapshot(path)


def test_a_snapshot_round_trips_its_mig_modes(tmp_path: Path) -> None:
    node = _node(enabled=(2,), pending={2: "disabled", 5: "enabled"})
    path = tmp_path / "node.json"
    save_snapshot(node, path)
    loaded = load_snapshot(path)
    assert [(g.mig_mode_current, g.mig_mode_pending) for g in loaded.gpus] == [
        (g.mig_mode_current, g.mig_mode_pending) for g in node.gpus
    ]


def _smi_q(tmp_path: Path, enabled_gpu: int) -> Path:
    text = SMI_Q.read_text()
    blocks = text.split(MIG_DISABLED_BLOCK)
    assert len(blocks) == 9  # one MIG Mode block per GPU
    enabled = MIG_DISABLED_BLOCK.replace("Disabled", "Enabled")
    path = tmp_path / "nvidia-smi-q.txt"
    path.write_text(
        "".join(
            part + (enabled if i == enabled_gpu else MIG_DISABLED_BLOCK if i < 8 else "")
            for i, part in enumerate(blocks)
        )
    )
    return path


def test_smi_query_reads_mig_mode_into_the_model(tmp_path: Path) -> None:
    node = load_evidence([_smi_q(tmp_path, 2)])
    assert [(g.mig_mode_current, g.mig_mode_pending) for g in node.gpus][1:4] == [
        ("disabled", "disabled"),
        ("enabled", "disabled"),
        ("disabled", "disabled"),
    ]


def test_smi_query_mig_title_without_colon_and_na_as_on_a_gpu_without_mig() -> None:
    text = "GPU 00000000:18:00.0\n    MIG Mode\n        Current : N/A\n        Pending : N/A\n"
    (gpu,) = parse(text).gpus
    assert (gpu.values["mig_current"], gpu.values["mig_pending"]) == ("N/A", "N/A")
    assert "taken as disabled" in NO_MIG_NOTE


def test_smi_query_refuses_a_mig_mode_it_does_not_know() -> None:
    text = "GPU 00000000:18:00.0\n    MIG Mode\n        Current : Enabeld\n        Pending : Disabled\n"
    with pytest.raises(ParseError, match="under MIG Mode") as raised:
        parse(text)
    assert raised.value.line_no == 3


def test_pcie_generation_current_is_not_taken_for_a_mig_mode() -> None:
    text = (
        "GPU 00000000:18:00.0\n    MIG Mode\n        Current : Disabled\n        Pending : Disabled\n"
        "    PCIe Generation\n        Max : 5\n        Current : 5\n"
    )
    (gpu,) = parse(text).gpus
    assert (gpu.values["mig_current"], gpu.values["pcie_gen_current"]) == ("Disabled", "5")


# --- through the plugin: live (fake NVML) and evidence ------------------------------------------------------


def _run(pytester: pytest.Pytester, *args: str) -> dict[str, tuple[str, str]]:
    """Each item's (outcome, failure message) from a run in this process (the worktree's plugin judges)."""
    xml_path = pytester.path / "junit.xml"
    pytester.runpytest("--nvlink-suite=h100-8gpu", *args, f"--junitxml={xml_path}", "-p", "no:cacheprovider")
    found = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome, message = tag, element.get("message", "")
        found[case.get("name", "")] = (outcome, message)
    return found


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> list[Node]:
    """The node the fake NVML serves; tests edit it before the run probes it."""
    node = _node()
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml(node))
    return [node]


def test_live_p2p_failures_on_a_mig_gpu_name_mig(pytester: pytest.Pytester, live: list[Node]) -> None:
    node = live[0]
    node.p2p = [
        P2PStatus(s.src, s.dst, "not_supported", "not_supported", "not_supported", "not_supported")
        if 2 in (s.src, s.dst)
        else s
        for s in node.p2p or []
    ]
    items = _run(pytester, "-k", "p2p_status and (gpu2-gpu3 or gpu0-gpu1) or p2p_unidirectional and gpu2-gpu3")
    outcome, message = items["test_p2p_status[gpu2-gpu3]"]
    assert outcome == "failure" and "P2P not usable (read not_supported" in message
    assert "likely cause: GPU 2 is in MIG mode, which has no GPU-to-GPU P2P over NVLink or PCIe" in message
    assert items["test_p2p_status[gpu0-gpu1]"] == ("passed", "")
    outcome, message = items["test_p2p_unidirectional[gpu2-gpu3]"]
    assert outcome == "failure" and "likely cause: GPU 2 is in MIG mode" in message  # the copy could not run


def test_live_inventory_mig_off_fails_the_mig_gpu_and_passes_a_node_without_mig(
    pytester: pytest.Pytester, live: list[Node]
) -> None:
    site = pytester.makefile(".toml", site='[inventory]\nmig = "off"\n')
    items = _run(pytester, f"--nvlink-thresholds={site}", "-k", "gpu_mig")
    assert sorted(name for name, (outcome, _) in items.items() if outcome != "passed") == ["test_gpu_mig[gpu2]"]
    assert items["test_gpu_mig[gpu2]"][1].startswith(
        "Failed: GPU 2: MIG mode is enabled, but site.toml:inventory.mig = 'off'"
    )
    assert len(items) == 8
    live[0].gpus[2].mig_mode_current = live[0].gpus[2].mig_mode_pending = "disabled"
    items = _run(pytester, f"--nvlink-thresholds={site}", "-k", "gpu_mig")
    assert {outcome for outcome, _ in items.values()} == {"passed"} and len(items) == 8


def test_live_unknown_mig_mode_fails_closed(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = make_fake_pynvml(_node(enabled=()))
    fake.inject_error("nvmlDeviceGetMigMode", fake.NVML_ERROR_NO_PERMISSION, gpu=3)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    site = pytester.makefile(".toml", site='[inventory]\nmig = "off"\n')
    items = _run(pytester, f"--nvlink-thresholds={site}", "-k", "gpu_mig")
    outcome, message = items["test_gpu_mig[gpu3]"]
    assert outcome == "failure" and "MIG mode of GPU 3" in message and "Insufficient Permissions" in message


def test_without_inventory_mig_no_mig_check_is_collected(pytester: pytest.Pytester, live: list[Node]) -> None:
    assert _run(pytester, "-k", "gpu_mig or gpu_model") == {f"test_gpu_model[gpu{i}]": ("passed", "") for i in range(8)}


def test_smi_query_evidence_gives_the_live_verdict(pytester: pytest.Pytester, live: list[Node], tmp_path: Path) -> None:
    live[0].gpus[2].mig_mode_pending = "disabled"  # as the file says: enabled now, disabled after a reset
    site = pytester.makefile(".toml", site='[inventory]\nmig = "off"\n')
    from_live = _run(pytester, f"--nvlink-thresholds={site}", "-k", "gpu_mig")
    evidence = _smi_q(tmp_path, 2)
    from_evidence = _run(pytester, f"--nvlink-thresholds={site}", f"--nvlink-evidence={evidence}", "-k", "gpu_mig")
    assert from_evidence == from_live
    assert from_live["test_gpu_mig[gpu2]"][0] == "failure"
    assert (
        "MIG mode is enabled (disabled is pending: a GPU reset applies it), but" in from_live["test_gpu_mig[gpu2]"][1]
    )


# --- every P2P and collective failure on a MIG GPU names MIG first ------------------------------------


def _figure(node: Node, src: int, dst: int, kind: str) -> P2PMeasurement:
    return next(m for m in node.measurements.p2p if (m.src, m.dst, m.kind) == (src, dst, kind))


def test_a_slow_p2p_figure_and_a_failed_path_proof_name_mig_first() -> None:
    from pytest_nvlink.judges.bandwidth import p2p_figure, path_proof

    node = _node()
    slow = _figure(node, 2, 3, "unidirectional")
    slow.value = 20.0
    verdict = p2p_figure(_context(node), 2, 3, "unidirectional", slow)
    assert verdict.outcome is Outcome.FAIL
    assert (
        "likely cause: GPU 2 is in MIG mode" in verdict.message and "; otherwise 20 GB/s is a PCIe" in verdict.message
    )
    proof = dataclasses.replace(_figure(node, 2, 3, "unidirectional"), nvlink_bytes=0, pcie_bytes=slow.bytes_copied)
    verdict = path_proof(_context(node), 2, 3, proof)
    assert verdict.outcome is Outcome.FAIL and "silent PCIe fallback" in verdict.message
    assert "; likely cause: GPU 2 is in MIG mode" in verdict.message
    assert verdict.message.endswith("otherwise check P2P status, Fabric Manager and VM passthrough of NVLink")
    healthy = p2p_figure(_context(node), 0, 1, "unidirectional", dataclasses.replace(slow, src=0, dst=1))
    assert healthy.outcome is Outcome.FAIL and "MIG" not in healthy.message  # no GPU of the pair in MIG mode


def test_nccl_transport_and_collective_failures_name_the_mig_gpu() -> None:
    from pytest_nvlink.judges.collectives import collective, nccl_transport

    node = _node(enabled=(6,))
    audit = node.measurements.nccl
    assert audit is not None
    audit.channels.append(TransportChannel(7, 2, 2, 6, 6, "SHM", "SHM/direct/direct"))
    verdict = nccl_transport(_context(node), audit)
    assert verdict.outcome is Outcome.FAIL
    assert (
        "likely cause: GPU 6 is in MIG mode" in verdict.message
        and "; otherwise NCCL could not use P2P" in verdict.message
    )
    results = node.measurements.collectives
    for result in results:
        result.busbw_gbps = 1.0
    verdict = collective(_context(node), "all_reduce", results)
    assert verdict.outcome is Outcome.FAIL and "likely cause: GPU 6 is in MIG mode" in verdict.message
