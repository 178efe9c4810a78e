"""Check the plugin's own assumptions on a machine with NVIDIA GPUs (a script, not a test).

    python benchmarks/device_check.py --out device-check/        # on a GPU machine, <= 5 minutes
    python benchmarks/device_check.py --out /tmp/dc --dry-run    # wiring only: nothing touches NVML/CUDA

Every section records what it found, or ``could not run: <reason>``; the script never stops at a
failing section. It writes ``device-check.json`` (everything) and ``device-check.txt`` (the summary
printed at the end). CUDA work runs in spawned children, so the section that checks whether the
parent holds a CUDA context can answer truthfully. Nothing is imported from torch at module level:
spawned children re-import this file as ``__mp_main__``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_nvlink.measure import _proc  # noqa: E402
from pytest_nvlink.sources.live import fields as nvml_fields  # noqa: E402

Result = dict[str, Any]
CHILD_TIMEOUT_S = 150.0
GIB = 1 << 30
MIB = 1 << 20
# Every (fieldId, scopeId) the probe and the traffic counters read; link 0 stands for the scoped ones.
PROBE_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("NVLINK_LINK_COUNT", nvml_fields.FI_NVLINK_LINK_COUNT, 0),
    ("NVLINK_SPEED_MBPS_COMMON", nvml_fields.FI_NVLINK_SPEED_MBPS_COMMON, 0),
    ("NVLINK_SPEED_MBPS_L0", nvml_fields.FI_NVLINK_SPEED_MBPS_PER_LINK[0], 0),
    ("NVLINK_GET_SPEED link 0", nvml_fields.FI_NVLINK_GET_SPEED, 0),
    ("NVLINK_THROUGHPUT_DATA_TX all links", nvml_fields.FI_NVLINK_THROUGHPUT_DATA_TX, nvml_fields.SCOPE_ALL_LINKS),
    ("NVLINK_THROUGHPUT_DATA_RX all links", nvml_fields.FI_NVLINK_THROUGHPUT_DATA_RX, nvml_fields.SCOPE_ALL_LINKS),
    ("NVLINK_THROUGHPUT_DATA_TX link 0", nvml_fields.FI_NVLINK_THROUGHPUT_DATA_TX, 0),
    ("PCIE_COUNT_TX_BYTES", nvml_fields.FI_PCIE_COUNT_TX_BYTES, 0),
    ("PCIE_COUNT_RX_BYTES", nvml_fields.FI_PCIE_COUNT_RX_BYTES, 0),
)


class CouldNotRun(Exception):
    """A section's precondition is missing; the message is the reason."""


def could_not_run(reason: str) -> Result:
    return {"status": "could not run", "reason": reason}


# --- helpers ---------------------------------------------------------------------------------


def _nvml() -> Any:
    try:
        nvml = nvml_fields.import_pynvml()
    except ImportError as exc:
        raise CouldNotRun(f"nvidia-ml-py is not installed ({exc})") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise CouldNotRun(f"NVML could not be initialized: {exc}") from None
    return nvml


def _child_main(conn: Connection, name: str) -> None:
    try:
        conn.send(("ok", CHILD_SECTIONS[name]()))
    except CouldNotRun as exc:
        conn.send(("could not run", str(exc)))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    finally:
        conn.close()


def _in_child(name: str, timeout_s: float = CHILD_TIMEOUT_S) -> Result:
    """Run ``CHILD_SECTIONS[name]`` in a spawned process with a watchdog."""
    process, conn = _proc.start_child(_child_main, (name,), name=f"device-check-{name}")
    try:
        deadline = time.monotonic() + timeout_s
        while not conn.poll(0.2):
            if time.monotonic() > deadline:
                return {"status": "failed", "reason": f"timed out after {timeout_s:g} s"}
            if not process.is_alive() and not conn.poll(0):
                return {"status": "failed", "reason": f"child died with {_proc.describe_exit(process.exitcode)}"}
        message = _proc.receive(conn)
    finally:
        _proc.stop_all([process])
        conn.close()
    if message is None:
        return {"status": "failed", "reason": "child closed its pipe without an answer"}
    if message[0] == "ok":
        return {"status": "ok", "result": message[1]}
    if message[0] == "could not run":
        return could_not_run(message[1])
    return {"status": "failed", "reason": message[1], "traceback": message[2]}


def _cuda() -> Any:
    try:
        import torch  # children only
    except ImportError as exc:
        raise CouldNotRun(f"torch is not importable: {exc}") from None
    if not torch.cuda.is_available():
        raise CouldNotRun("CUDA is not available to torch (no GPU, no driver, or a CPU build of torch)")
    return torch


# --- sections in the parent (NVML only) ------------------------------------------------------


def section_probe() -> Result:
    """probe_node() end to end: which facts are known, which unknown and why."""
    from pytest_nvlink.sources.live.probe import probe_node

    node = probe_node()
    if not node.gpus:
        raise CouldNotRun("; ".join(node.probe_errors) or "NVML reports no GPU")
    return {
        "gpus": [{"index": g.index, "name": g.name, "bus": g.pci_bus_id, "problem": g.problem} for g in node.gpus],
        "driver": node.driver_version,
        "paths": sorted({p.path for p in node.paths or []}),
        "nvlink_speeds_gbps": sorted({link.speed_gbps for g in node.gpus for link in g.nvlinks or []} - {None}),
        "cpu_numa_nodes": [g.numa_node for g in node.gpus],
        "gpu_memory_numa_nodes": [g.gpu_memory_numa_node for g in node.gpus],
        "probe_errors": node.probe_errors,
        "unknown_reasons": node.unknown_reasons,
    }


def _field_answer(nvml: Any, handle: Any, field_id: int, scope: int) -> dict[str, Any]:
    entry = nvml.nvmlDeviceGetFieldValues(handle, [(field_id, scope)])[0]
    code = int(entry.nvmlReturn)
    return {
        "return": nvml_fields.nvml_error_name(nvml, code),
        "value_type": int(entry.valueType),
        "value": nvml_fields.decode_field_value(entry) if code == 0 else None,
        "timestamp_us": int(entry.timestamp),
        "latency_us": int(entry.latencyUsec),
    }


def section_nvml_fields() -> Result:
    """The raw answer behind every field id the probe uses, and aggregate vs per-link throughput."""
    nvml = _nvml()
    try:
        if int(nvml.nvmlDeviceGetCount()) == 0:
            raise CouldNotRun("NVML reports no GPU")
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        answers = {label: _field_answer(nvml, handle, fid, scope) for label, fid, scope in PROBE_FIELDS}
        count = answers["NVLINK_LINK_COUNT"]["value"] or 0
        per_link = [
            _field_answer(nvml, handle, nvml_fields.FI_NVLINK_THROUGHPUT_DATA_TX, link) for link in range(count)
        ]
        values = [answer["value"] for answer in per_link]
        link_sum = sum(values) if values and None not in values else None
        aggregate = _field_answer(nvml, handle, nvml_fields.FI_NVLINK_THROUGHPUT_DATA_TX, nvml_fields.SCOPE_ALL_LINKS)
        return {
            "gpu0_fields": answers,
            "throughput_tx_aggregate_kib": aggregate["value"],
            "throughput_tx_link_sum_kib": link_sum,
            "aggregate_equals_link_sum": None if link_sum is None else aggregate["value"] == link_sum,
        }
    finally:
        nvml.nvmlShutdown()


def section_cuda_join() -> Result:
    """The CUDA<->NVML join (listed by a child) and whether this parent holds a CUDA context."""
    from pytest_nvlink.measure.cuda_join import cuda_devices_in_child
    from pytest_nvlink.sources.live.probe import join_cuda_indices, probe_node

    node = probe_node()
    if not node.gpus:
        raise CouldNotRun("; ".join(node.probe_errors) or "NVML reports no GPU")
    devices = cuda_devices_in_child()
    if isinstance(devices, str) or not devices:
        raise CouldNotRun(devices if isinstance(devices, str) else "CUDA lists no device (CPU build of torch?)")
    join_cuda_indices(node, devices)
    return {
        "cuda_of_nvml": {g.index: g.cuda_index for g in node.gpus},
        "unjoined": {k: v for k, v in node.unknown_reasons.items() if "cuda" in k},
        "parent_has_cuda_context": _parent_has_context(),
        "parent_imported_torch": "torch" in sys.modules,
    }


def _parent_has_context() -> bool | None:
    nvml = _nvml()
    try:
        pids = set()
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            pids |= {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        return os.getpid() in pids
    except nvml.NVMLError:
        return None  # containers often hide the process list
    finally:
        nvml.nvmlShutdown()


# --- sections in children (CUDA) -------------------------------------------------------------


def child_counter_freshness() -> Result:
    """PCIe counter unit and freshness: a 1 GiB host->device copy, counters read at 0, 10 ms, 100 ms, 1 s."""
    torch = _cuda()
    from pytest_nvlink.sources.live import counters as nvml_counters

    nvml = _nvml()
    try:
        uuid = str(torch.cuda.get_device_properties(0).uuid)
        handle = nvml_counters.handle_for(nvml, uuid)
        host = torch.ones(GIB, dtype=torch.uint8).pin_memory()
        before = nvml_counters.read_traffic(nvml, handle)
        host.to("cuda:0", non_blocking=True)
        torch.cuda.synchronize(0)
        reads, started = {}, time.perf_counter()
        for delay in (0.0, 0.01, 0.1, 1.0):
            time.sleep(max(0.0, delay - (time.perf_counter() - started)))
            after = nvml_counters.read_traffic(nvml, handle)
            reads[f"{delay * 1e3:g} ms"] = nvml_counters.traffic_delta(before, after).pcie_rx_bytes
        return {"copied_bytes": GIB, "pcie_rx_delta_bytes_by_delay": reads, "note": after.note}
    finally:
        nvml.nvmlShutdown()


def child_timing_floors() -> Result:
    """D2D on one device: blocker method vs the naive event loop, latency (16 B) and bandwidth (256 MiB)."""
    _cuda()
    from pytest_nvlink.measure.cuda_engine import LATENCY_BYTES, CudaCopyEngine

    engine = CudaCopyEngine()
    engine.copy(0, 0, LATENCY_BYTES, 10)
    blocked = engine.run_blocked([(0, 0)], LATENCY_BYTES, 100)
    naive = engine.run_naive(0, 0, LATENCY_BYTES, 100)
    engine.copy(0, 0, 256 * MIB, 2)
    bw_blocked = engine.copy(0, 0, 256 * MIB, 20)
    bw_naive = engine.run_naive(0, 0, 256 * MIB, 20)
    return {
        "engine": engine.name,
        "cycles_per_second": engine.cycles_per_second(0),
        "latency_us_blocked": blocked.gpu_s / 100 * 1e6,
        "latency_us_naive": naive / 100 * 1e6,
        "enqueue_ms_vs_blocker_ms": [blocked.enqueue_s * 1e3, blocked.block_s * 1e3],
        "d2d_gbps_blocked": 2 * 20 * 256 * MIB / bw_blocked / 1e9,  # read + write, as nvbandwidth counts D2D
        "d2d_gbps_naive": 2 * 20 * 256 * MIB / bw_naive / 1e9,
    }


def child_p2p_pair() -> Result:
    """One pair through the real campaign code: engine, figures, counters and path proof."""
    torch = _cuda()
    if torch.cuda.device_count() < 2:
        raise CouldNotRun(f"P2P needs 2 GPUs; CUDA sees {torch.cuda.device_count()}")
    from pytest_nvlink.measure.cuda_engine import CudaCopyEngine
    from pytest_nvlink.measure.p2p import P2PPlan, run_campaign
    from pytest_nvlink.measure.runner import NvmlCounterFactory

    engine = CudaCopyEngine()
    plan = P2PPlan(gpus=(0, 1), nbytes=256 * MIB, iterations=20, warmup=3, latency_iterations=100)
    results = run_campaign(plan, engine, NvmlCounterFactory()())
    return {
        "engine": engine.name,
        "peer_access": [engine.can_access_peer(0, 1), engine.can_access_peer(1, 0)],
        "measurements": [{k: v for k, v in vars(m).items() if v is not None} for m in results],
    }


def child_nccl() -> Result:
    """NCCL with one rank and with every local GPU: the five collectives, verified, with their logs."""
    torch = _cuda()
    from pytest_nvlink.config.suites import Measure
    from pytest_nvlink.measure.runner import MeasurementSession

    worlds = sorted({1, torch.cuda.device_count()})
    runs = {}
    for world in worlds:
        measure = Measure(collective_iterations=5, collective_warmup=2, timeout_s=120)
        sizes = dict.fromkeys(measure.collectives, 64 * MIB)  # small: this checks the harness, not the node
        session = MeasurementSession(measure, backend="nccl", gpus=list(range(world)), collective_sizes=sizes)
        run = session.collective_run()
        runs[f"world {world}"] = {
            "collectives": [{k: v for k, v in vars(m).items() if v is not None} for m in run.measurements],
            "debug_files": len(run.logs),
            "line_shapes": nccl_line_shapes(run.logs.values()),
            "audit_channels": len(run.nccl.channels) if run.nccl else None,
        }
    return runs


def nccl_line_shapes(texts: Any) -> dict[str, Any]:
    """The WARN/INFO prefixes this NCCL writes, with digits masked, and how many our parser reads."""
    from pytest_nvlink.sources.evidence.parsers import nccl_log

    shapes: dict[str, int] = {}
    unparsed = 0
    for text in texts:
        for line in text.splitlines():
            if " NCCL " not in line:
                continue
            prefix = line.split(" NCCL ", 1)[0] + " NCCL " + line.split(" NCCL ", 1)[1].split(" ", 1)[0]
            shape = re.sub(r"\d+", "N", prefix.replace(socket.gethostname(), "HOST"))
            shapes[shape] = shapes.get(shape, 0) + 1
            unparsed += not nccl_log.reads_prefix(line)
    return {"shapes": dict(sorted(shapes.items(), key=lambda kv: -kv[1])[:12]), "lines_our_regex_misses": unparsed}


CHILD_SECTIONS: dict[str, Callable[[], Result]] = {
    "counter_freshness": child_counter_freshness,
    "timing_floors": child_timing_floors,
    "p2p_pair": child_p2p_pair,
    "nccl": child_nccl,
}
PARENT_SECTIONS: dict[str, Callable[[], Result]] = {
    "probe": section_probe,
    "nvml_fields": section_nvml_fields,
    "cuda_join": section_cuda_join,
}
SECTIONS: tuple[str, ...] = ("probe", "nvml_fields", "cuda_join", *CHILD_SECTIONS)


def run_section(name: str, dry_run: bool) -> Result:
    if dry_run:
        return could_not_run("dry run: NVML and CUDA were not touched")
    if name in CHILD_SECTIONS:
        return _in_child(name)
    try:
        return {"status": "ok", "result": PARENT_SECTIONS[name]()}
    except CouldNotRun as exc:
        return could_not_run(str(exc))
    except Exception as exc:  # a broken section must not stop the others
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def summary(report: dict[str, Any]) -> str:
    lines = [f"device check on {report['host']} ({report['seconds']:.0f} s)"]
    for name in SECTIONS:
        section = report["sections"][name]
        if section["status"] == "ok":
            lines.append(f"  {name}: ok")
            lines += [
                f"      {key}: {json.dumps(value, default=str)[:160]}" for key, value in section["result"].items()
            ]
        else:
            lines.append(f"  {name}: {section['status']}: {section['reason']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "pytest-nvlink-device-check")
    parser.add_argument("--dry-run", action="store_true", help="check the wiring; touch neither NVML nor CUDA")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only these sections")
    args = parser.parse_args(argv)
    started = time.monotonic()
    sections = {name: run_section(name, args.dry_run) for name in SECTIONS if not args.only or name in args.only}
    for name in SECTIONS:
        sections.setdefault(name, could_not_run("not selected with --only"))
    report = {"host": socket.gethostname(), "seconds": time.monotonic() - started, "sections": sections}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "device-check.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    text = summary(report)
    (args.out / "device-check.txt").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
