"""Xid events during the run: the NVML listener on the fake driver, kernel logs as evidence, the judge and its keys."""

from __future__ import annotations

import ctypes
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import SNAPSHOTS, sample, serve_live_node
from fake_pynvml import make_fake_pynvml

from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.config.values import ConfigError
from pytest_nvlink.judges import platform, xid
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import CampaignSpan, EventWindow, Node, XidEvent
from pytest_nvlink.model.document import node_from_document, snapshot_document
from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers import kernel_log
from pytest_nvlink.sources.live.events import XidListener
from pytest_nvlink.sources.snapshot.file import load_snapshot
from pytest_nvlink.verdict import Outcome, resolved

DMESG_XID74 = "kernel-log/dmesg-constructed-xid74-gpu2.txt"
DMESG_CLEAN = "kernel-log/dmesg-T-constructed-clean.txt"
JOURNAL_SXID = "kernel-log/journal-constructed-sxid-fabricmanager.txt"
KERN_FALLEN = "kernel-log/kern-log-constructed-fallen-off.txt"
SMI_Q = "nvidia-smi-q/h100-sxm-8gpu-constructed-q.txt"


def context(node: Node, suite: str = "h100-8gpu") -> Context:
    loaded = load_suite(suite)
    return Context(node, loaded, load_thresholds(loaded.thresholds_ref))


def healthy() -> Node:
    return load_snapshot(SNAPSHOTS / "h100-8gpu-healthy.json")


def listen(node: Node, fake: object, *, after: float = 0.3) -> None:
    listener = XidListener(node, fake, timeout_ms=20)  # type: ignore[arg-type]
    listener.start()
    time.sleep(after)
    listener.stop()


# --- the live listener on the fake NVML ---------------------------------------------------------


def test_listener_records_the_xid_of_each_gpu_and_the_window() -> None:
    node = healthy()
    fake = make_fake_pynvml(node)
    fake.queue_xid(3, 79)
    listen(node, fake)
    assert node.xid_events is not None and node.event_window is not None
    [event] = node.xid_events
    assert (event.gpu, event.xid, event.kind, event.pci_bus_id) == (3, 79, "xid", node.gpus[3].pci_bus_id)
    assert event.at_s is not None and 0 <= event.at_s < 0.3
    assert node.event_window.gpus == list(range(8))
    assert node.event_window.length_s is not None and node.event_window.length_s >= 0.3
    assert fake.fake_state.init_count == 0  # the listener's nvmlInit is matched by its nvmlShutdown
    assert fake.fake_state.event_sets == {}  # and its event set was freed


def test_live_xid_79_on_gpu3_fails_test_xid_gpu3_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_live_node(pytester, monkeypatch, healthy(), 8, setup="module.queue_xid(3, 79)")
    result = pytester.runpytest_subprocess(
        "--nvlink-suite=h100-8gpu", "-k", "test_xid", "-p", "no:cacheprovider", "-p", "fake_nvml_plugin"
    )
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(["FAILED nvlink/test_xid.py::test_xid[[]gpu3]*"])
    result.stdout.fnmatch_lines(
        ["GPU 3: Xid 79 (GPU has fallen off the bus) * s into the run (*), * fails the GPU (*:xid.fail)*"]
    )


def test_live_run_without_event_support_is_unknown(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    serve_live_node(pytester, monkeypatch, healthy(), 8, options=", no_xid_events={1}")
    result = pytester.runpytest_subprocess(
        "--nvlink-suite=h100-8gpu", "-k", "test_xid", "-p", "no:cacheprovider", "-p", "fake_nvml_plugin"
    )
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(["FAILED nvlink/test_xid.py::test_xid[[]gpu1]*"])
    result.stdout.fnmatch_lines(["could not determine the Xid events of GPU 1: the driver offers no Xid events*"])


def test_a_driver_that_refuses_registration_makes_the_item_unknown() -> None:
    node = healthy()
    fake = make_fake_pynvml(node)
    fake.inject_error("nvmlDeviceRegisterEvents", fake.NVML_ERROR_NOT_SUPPORTED, gpu=5)
    listen(node, fake, after=0.05)
    assert node.event_window is not None and 5 not in node.event_window.gpus
    verdict = xid.xid(context(node), 5)
    assert verdict.outcome is Outcome.UNKNOWN
    assert "refused to register Xid events for GPU 5 (NVML: Not Supported)" in verdict.message
    assert resolved(verdict, Outcome.FAIL).outcome is Outcome.FAIL  # as unread counters do
    assert xid.xid(context(node), 4).outcome is Outcome.PASS


def test_no_event_set_at_all_leaves_every_gpu_unknown() -> None:
    node = healthy()
    listen(node, make_fake_pynvml(node, missing_functions={"nvmlEventSetCreate"}), after=0.0)
    verdicts = [xid.xid(context(node), index) for index in range(8)]
    assert {v.outcome for v in verdicts} == {Outcome.UNKNOWN}
    assert "cannot create an NVML event set (NVML: Function Not Found)" in verdicts[0].message


def test_an_empty_wait_raises_timeout_like_nvml() -> None:
    fake = make_fake_pynvml(healthy())
    fake.nvmlInit()
    events = fake.nvmlEventSetCreate()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.nvmlDeviceRegisterEvents(handle, fake.nvmlEventTypeXidCriticalError, events)
    with pytest.raises(fake.NVMLError_Timeout):
        fake.nvmlEventSetWait_v2(events, 1)
    fake.queue_xid(0, 48)
    data = fake.nvmlEventSetWait_v2(events, 1)
    assert isinstance(data, fake.c_nvmlEventData_t)
    assert (data.eventType, data.eventData) == (fake.nvmlEventTypeXidCriticalError, 48)
    assert xid_device_is(data, handle)
    fake.nvmlEventSetFree(events)
    with pytest.raises(fake.NVMLError_InvalidArgument):
        fake.nvmlEventSetWait_v2(events, 1)


def xid_device_is(data: Any, handle: Any) -> bool:
    """The event names the device of the handle registered: both point at one device struct."""
    return bool(ctypes.cast(data.device, ctypes.c_void_p).value == ctypes.cast(handle, ctypes.c_void_p).value)


def test_an_xid_is_placed_relative_to_the_campaigns() -> None:
    window = EventWindow("NVML Xid events", "2026-11-20T09:54:41.20Z", 100.0, list(range(8)))
    window.campaigns = [CampaignSpan("p2p", 10.0, 50.0), CampaignSpan("collectives", 50.0, 90.0)]
    during = XidEvent(gpu=0, xid=74, at_s=30.0, text="NVML: Xid 74 on GPU 0")
    after = dataclasses.replace(during, at_s=95.5)
    assert xid.when(during, window) == "30.0 s into the run, during the p2p campaign (20.0 s in)"
    assert xid.when(after, window) == "95.5 s into the run, 5.5 s after the collectives campaign ended"


def test_an_application_xid_is_recorded_but_does_not_fail() -> None:
    node = healthy()
    assert node.xid_events is not None
    node.xid_events.append(XidEvent(gpu=6, xid=13, at_s=20.0, text="NVML: Xid 13 on GPU 6"))
    verdict = xid.xid(context(node), 6)
    assert verdict.outcome is Outcome.PASS
    assert "seen but not in nvswitch-common.toml:xid.fail: Xid 13 (Graphics Engine Exception)" in verdict.message


def test_a_snapshot_without_an_event_window_is_unknown_and_still_reads() -> None:
    document = snapshot_document(healthy())
    del document["node"]["xid_events"], document["node"]["event_window"]
    node = node_from_document(document, "old.json")
    assert node.xid_events is None and node.event_window is None
    verdict = xid.xid(context(node), 0)
    assert verdict.outcome is Outcome.UNKNOWN
    assert "watched for no driver events" in verdict.message


def test_shipped_snapshots_replay_an_xid_free_window() -> None:
    for name in ("h100-8gpu-healthy", "h100-8gpu-degraded", "h100-8gpu-vm-pcie"):
        node = load_snapshot(SNAPSHOTS / f"{name}.json")
        assert node.xid_events == [] and node.event_window is not None, name
        assert xid.xid(context(node), 2).outcome is Outcome.PASS, name


# --- kernel logs as evidence ----------------------------------------------------------------------


def stage(tmp_path: Path, *relatives: str) -> Path:
    root = tmp_path / "evidence"
    root.mkdir()
    for relative in relatives:
        (root / Path(relative).name).write_text(sample(relative), encoding="utf-8")
    return root


def test_module_load_lines_are_not_events() -> None:
    log = kernel_log.parse(sample(DMESG_CLEAN))
    assert log.events == ()
    assert (log.first_stamp, log.last_stamp, log.length_s) == ("Jul  6 09:58:01 2026", "Jul  6 10:12:45 2026", 884.0)
    xid74 = kernel_log.parse(sample(DMESG_XID74))
    assert [(e.kind, e.number, e.pci_bus_id) for e in xid74.events] == [("xid", 74, "0000:3a:00.0")]


def test_kernel_log_with_xid_74_on_gpu2_bus_id_fails_gpu2(tmp_path: Path) -> None:
    node = load_evidence([stage(tmp_path, SMI_Q, DMESG_XID74)])
    ctx = context(node)
    verdict = xid.xid(ctx, 2)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.message.startswith("GPU 2: Xid 74 (NVLink Error) at [8123.456801], 8117.5 s after the window began")
    assert "at [5.912345]" in verdict.message and "fatal error detected on link 8" in verdict.message
    assert {xid.xid(ctx, i).outcome for i in range(8) if i != 2} == {Outcome.PASS}
    assert "xid_events" in node.provenance


def test_kernel_log_xid_fails_the_gpu_in_an_evidence_run(pytester: pytest.Pytester, tmp_path: Path) -> None:
    root = stage(tmp_path, SMI_Q, DMESG_XID74)
    result = pytester.runpytest(
        "--nvlink-suite=h100-8gpu", f"--nvlink-evidence={root}", "-k", "test_xid", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(["FAILED nvlink/test_xid.py::test_xid[[]gpu2]*"])
    result.stdout.fnmatch_lines(["GPU 2: Xid 74 (NVLink Error) at [[]8123.456801], *"])


def test_a_window_with_no_xid_passes_and_names_its_timestamps(tmp_path: Path) -> None:
    node = load_evidence([stage(tmp_path, SMI_Q, DMESG_CLEAN)])
    verdict = xid.xid(context(node), 0)
    assert verdict.outcome is Outcome.PASS
    assert "884 s of kernel log" in verdict.message
    assert "from Jul  6 09:58:01 2026 to Jul  6 10:12:45 2026" in verdict.message


def test_an_xid_on_an_unknown_bus_id_leaves_gpus_without_one_unknown(tmp_path: Path) -> None:
    node = load_evidence([stage(tmp_path, DMESG_XID74, "topo/h100-sxm-8gpu-baremetal-supermicro-nccl1264-partial.txt")])
    verdict = xid.xid(context(node), 2)
    assert verdict.outcome is Outcome.UNKNOWN
    assert "name PCI bus id(s) 0000:3a:00.0" in verdict.message


def test_a_gpu_fallen_off_the_bus_without_an_xid_line_is_xid_79(tmp_path: Path) -> None:
    node = load_evidence([stage(tmp_path, SMI_Q, KERN_FALLEN)])
    verdict = xid.xid(context(node), 4)
    assert verdict.outcome is Outcome.FAIL
    assert "GPU 4: Xid 79 (GPU has fallen off the bus) at Jul  6 10:16:31" in verdict.message


def test_sxid_and_fabric_manager_lines_fail_the_fabric_check(tmp_path: Path) -> None:
    node = load_evidence([stage(tmp_path, SMI_Q, JOURNAL_SXID)])
    assert node.xid_events is not None
    assert [e.kind for e in node.xid_events] == ["sxid", "fabric_manager"]
    verdict = platform.fabric(context(node), 0)
    assert verdict.outcome is Outcome.FAIL
    assert "SXid 20034 on NVSwitch 0000:07:00.0" in verdict.message
    assert "NVLink training failed" in verdict.message
    assert xid.xid(context(node), 0).outcome is Outcome.PASS  # an SXid names no GPU


def test_without_a_kernel_log_an_evidence_run_has_no_evidence_for_xids(tmp_path: Path) -> None:
    node = load_evidence([stage(tmp_path, SMI_Q)])
    verdict = resolved(xid.xid(context(node), 0), Outcome.NO_EVIDENCE)
    assert verdict.outcome is Outcome.NO_EVIDENCE
    assert "give dmesg, journalctl -k or /var/log/kern.log" in verdict.message


# --- thresholds ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[]", "an empty list fails no Xid"),
        ("[74, 74]", "Xid 74 is listed twice"),
        ('["74"]', "'74': expected an integer"),
        ("74", "expected a list of Xid numbers"),
    ],
)
def test_xid_fail_list_is_validated(tmp_path: Path, value: str, problem: str) -> None:
    site = tmp_path / "site.toml"
    site.write_text(f"[xid]\nfail = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"site.toml:xid.fail: {problem}"):
        load_thresholds("h100-sxm", site)


def test_xid_fail_is_required_and_may_be_waived(tmp_path: Path) -> None:
    from pytest_nvlink.config.required_keys import check_required_keys, required_keys

    suite = load_suite("h100-8gpu")
    assert "xid.fail" in required_keys(suite) and "xid.fail" in required_keys(load_suite("l40s-4gpu"))
    site = tmp_path / "site.toml"
    site.write_text('[waive]\n"xid.fail" = "this fleet reads Xids in its own monitoring"\n', encoding="utf-8")
    waived = load_thresholds("h100-sxm", site)
    check_required_keys(suite, waived)
    verdict = xid.xid(Context(healthy(), suite, waived), 0)
    assert verdict.outcome is Outcome.NOT_APPLICABLE and "own monitoring" in verdict.message
    blackwell = load_thresholds("b200-sxm").value("xid.fail")
    assert {74, 79, 144, 149, 150} <= set(blackwell) and 144 not in load_thresholds("h100-sxm").value("xid.fail")
