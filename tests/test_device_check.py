"""benchmarks/device_check.py: the structure on CPU (--simulate, --dry-run, a CPU box), and its deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from pytest_nvlink.measure import _proc

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import device_check  # noqa: E402
import device_check_sections  # noqa: E402


def _sections(path: Path) -> dict[str, dict[str, object]]:
    sections: dict[str, dict[str, object]] = json.loads(path.read_text())["sections"]
    assert list(sections) == list(device_check.SECTIONS)
    return sections


def _command(out: Path, *extra: str) -> list[str]:
    return [sys.executable, str(BENCHMARKS / "device_check.py"), "--json", str(out), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_dry_run_reports_every_section_as_not_run(tmp_path: Path) -> None:
    assert device_check.main(["--out", str(tmp_path), "--dry-run"]) == 0
    for name, section in _sections(tmp_path / "device-check.json").items():
        assert section["status"] == "could not run", name
        assert section["reason"] == "dry run: NVML and CUDA were not touched", name
    text = (tmp_path / "device-check.txt").read_text()
    assert "  nccl: could not run: dry run: NVML and CUDA were not touched" in text


def _grandchild(conn: Connection) -> None:
    conn.send(("ok",))
    conn.close()


def _starts_a_child(conn: Connection) -> None:
    try:
        process, reader = _proc.start_child(_grandchild, (), name="grandchild")
        conn.send(("started", _proc.receive(reader)))
        _proc.stop_all([process])
    except AssertionError as exc:  # multiprocessing's "daemonic processes are not allowed to have children"
        conn.send(("refused", str(exc)))
    conn.close()


@pytest.mark.parametrize("daemon", [True, False])
def test_only_a_non_daemonic_child_may_start_ranks(daemon: bool) -> None:
    process, conn = _proc.start_child(_starts_a_child, (), name="section", daemon=daemon)
    try:
        answer = _proc.receive(conn)
    finally:
        _proc.stop_all([process])
    if daemon:
        assert answer == ("refused", "daemonic processes are not allowed to have children")
    else:
        assert answer == ("started", ("ok",))


def test_the_nccl_section_starts_its_ranks_from_its_section_child() -> None:
    # The section child starts gloo ranks of its own: a daemonic section child could not.
    section = device_check.run_in_child("nccl", simulate=True, budget_s=120)
    assert section["status"] == "ok", section
    result = section["result"]
    assert isinstance(result, dict)
    assert result["world 2"]["errors"] == []
    assert all(entry["correct"] for entry in result["world 2"]["collectives"])


def test_simulate_runs_every_section_within_three_minutes(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    started = time.monotonic()
    done = subprocess.run(
        _command(out, "--simulate"), env=_env(), capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - started < 180
    report = json.loads(out.read_text())
    assert report["complete"] is True and report["mode"] == "simulate"
    for name, section in _sections(out).items():
        assert section["status"] == "ok", (name, section)
    machinery = report["sections"]["p2p_machinery"]["result"]
    assert machinery["cudart"] == "could not run: cuda-python has no CPU stand-in"
    torch_route = machinery["torch"]
    assert torch_route["calibration"]["warm_over_idle"] > 3
    assert torch_route["proof"]["largest_chunk"] <= 16
    assert torch_route["queue_depth_256mib"][-1]["host_blocked_past_the_spin"] is True
    nccl = report["sections"]["nccl"]["result"]
    assert "INIT" in nccl["subsys_given_to_ranks"].split(",")
    host = report["sections"]["host_link"]["result"]  # the campaign's own code on the simulated timeline
    assert [f["direction"] for f in host["figures"]] == ["h2d", "d2h", "bidir_h2d", "bidir_d2h"]
    assert all(f["value"] > 0 and f["method"] == "ce" and "error" not in f for f in host["figures"])
    assert all(f["conditions"]["numa_binding"] for f in host["figures"])
    assert host["xid_events"]["nvmlDeviceRegisterEvents"] == "ok"
    assert host["xid_events"]["nvmlEventSetWait_v2"] == "timeout"  # nothing happened: the wait's normal answer


def test_a_killed_run_leaves_the_sections_it_finished(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    process = subprocess.Popen(
        _command(out, "--simulate"), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # kill it mid-run: some sections done, some not (at most 20 s in)
        time.sleep(0.2)
        statuses = [s["status"] for s in json.loads(out.read_text())["sections"].values()] if out.exists() else []
        if "ok" in statuses and "pending" in statuses and statuses.index("pending") >= 3:
            break
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    report = json.loads(out.read_text())
    assert report["complete"] is False
    statuses = [section["status"] for section in report["sections"].values()]
    assert statuses[0] == "ok"  # the probe is done within 20 s
    finished = [status for status in statuses if status not in ("pending", "running")]
    assert finished and all(status == "ok" for status in finished)
    assert statuses.index("pending") > len(finished) if "pending" in statuses else True


def test_the_global_deadline_stops_starting_sections(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert device_check.main(["--json", str(out), "--simulate", "--deadline-s", "1"]) == 0
    for section in _sections(out).values():
        assert section["status"] == "could not run"
        assert section["reason"] == "the global deadline of 1 s was reached first"


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia"), reason="an NVIDIA driver is present: it would run")
def test_cpu_machine_gives_a_reason_per_section_instead_of_crashing(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert device_check.main(["--json", str(out)]) == 0
    sections = _sections(out)
    for name, section in sections.items():
        assert section["status"] == "could not run", (name, section)
        assert section["reason"], name
    assert str(sections["nvml_raw"]["reason"]).startswith("NVML could not be initialized")
    for name in ("p2p_machinery", "nccl"):
        assert "CUDA is not available to torch" in str(sections[name]["reason"]), name


def test_nccl_line_shapes_mask_numbers_and_count_what_the_parser_misses() -> None:
    text = (
        "node1:11:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
        "node1:11:12 [0] paths.cc:396 (ncclTopoCheckP2p) NCCL WARN P2P is disabled\n"
        "[0] weird NCCL INFO no host prefix\n"
    )
    shapes = device_check_sections.nccl_line_shapes([text])
    assert shapes["shapes"]["nodeN:N:N [N] paths.cc:N (ncclTopoCheckPNp) NCCL WARN"] == 1
    assert shapes["lines_our_regex_misses"] == 1
