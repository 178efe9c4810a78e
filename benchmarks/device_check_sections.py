"""The sections of ``device_check.py``; each runs in its own spawned child and takes ``simulate``.

A section returns what it found (plain JSON), raises :class:`CouldNotRun` with the reason a
precondition is missing, or raises anything else (a failure). With ``simulate`` it runs on CPU
stand-ins: the fake NVML of ``tests/`` (installed by :func:`install_stand_ins`), gloo for NCCL,
the simulated copy engine, and ``measure/cuda_simulated.py``'s CUDA timeline.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SIMULATED_NODE = REPO / "snapshots" / "h100-8gpu-healthy.json"

from pytest_nvlink.sources.live import fields as nvml_fields  # noqa: E402

Result = dict[str, Any]
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
# Per-link error counters, nvml.h field ids: the DL set ("unsupported for Blackwell+") and NVLink5's.
LINK_ERROR_FIELDS: tuple[tuple[str, int], ...] = (
    ("DL_REPLAY", 161),
    ("DL_RECOVERY", 162),
    ("DL_CRC", 163),
    ("NVLINK5_MALFORMED_PACKET_ERRORS", 206),
    ("NVLINK5_BUFFER_OVERRUN_ERRORS", 207),
    ("NVLINK5_RCV_ERRORS", 208),
    ("NVLINK5_LOCAL_LINK_INTEGRITY_ERRORS", 211),
    ("NVLINK5_LINK_RECOVERY_FAILED_EVENTS", 214),
    ("NVLINK5_LINK_RECOVERY_EVENTS", 215),
    ("NVLINK5_EFFECTIVE_ERRORS", 219),
    ("NVLINK5_EFFECTIVE_BER", 220),
    ("NVLINK5_SYMBOL_ERRORS", 221),
)
MAX_LINKS_CHECKED = 18


class CouldNotRun(Exception):
    """A section's precondition is missing; the message is the reason."""


def could_not_run(reason: str) -> Result:
    return {"status": "could not run", "reason": reason}


# --- stand-ins -------------------------------------------------------------------------------


def install_stand_ins() -> str:
    """The fake NVML of ``tests/`` as ``pynvml`` (a simulated H100 node); says what was installed."""
    tests = REPO / "tests"
    if str(tests) not in sys.path:
        sys.path.insert(0, str(tests))
    try:
        from fake_pynvml import make_fake_pynvml

        from pytest_nvlink.sources.snapshot.file import load_snapshot
    except ImportError as exc:
        return f"no fake NVML ({exc})"
    sys.modules["pynvml"] = make_fake_pynvml(load_snapshot(SIMULATED_NODE))
    return f"fake NVML of {SIMULATED_NODE.name}"


def _nvml() -> Any:
    try:
        nvml = nvml_fields.import_pynvml()
    except ImportError as exc:
        raise CouldNotRun(f"nvidia-ml-py is not installed ({exc})") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise CouldNotRun(f"NVML could not be initialized: {exc}") from None
    if int(nvml.nvmlDeviceGetCount()) == 0:
        raise CouldNotRun("NVML reports no GPU")
    return nvml


def _cuda() -> Any:
    try:
        import torch  # children only
    except ImportError as exc:
        raise CouldNotRun(f"torch is not importable: {exc}") from None
    if not torch.cuda.is_available():
        raise CouldNotRun("CUDA is not available to torch (no GPU, no driver, or a CPU build of torch)")
    return torch


def _error_name(nvml: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    return nvml_fields.nvml_error_name(nvml, int(code)) if code is not None else type(exc).__name__


# --- probe and raw NVML ----------------------------------------------------------------------


def probe(simulate: bool) -> Result:
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


def _link_errors(nvml: Any, handle: Any, links: int) -> dict[str, dict[str, list[int]]]:
    """For every per-link error counter: which links answer what (Success, NotSupported, ...)."""
    table: dict[str, dict[str, list[int]]] = {}
    for name, field_id in LINK_ERROR_FIELDS:
        for link in range(links):
            answer = _field_answer(nvml, handle, field_id, link)["return"]
            table.setdefault(name, {}).setdefault(answer, []).append(link)
    for counter in range(5):  # nvmlDeviceGetNvLinkErrorCounter, NVML_NVLINK_ERROR_DL_*
        for link in range(links):
            try:
                nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter)
                answer = "Success"
            except nvml.NVMLError as exc:
                answer = _error_name(nvml, exc)
            table.setdefault(f"ErrorCounter({counter})", {}).setdefault(answer, []).append(link)
    return table


def _fabric(nvml: Any, handle: Any) -> dict[str, Any]:
    """Fabric info as the driver answers it: the v1 call, and the V call with a v2 and a v3 struct."""
    answers: dict[str, Any] = {"structs_in_bindings": sorted(n for n in dir(nvml) if "FabricInfo" in n)}
    v2 = getattr(nvml, "c_nvmlGpuFabricInfo_v2_t", None) or getattr(nvml, "c_nvmlGpuFabricInfoV_t", None)
    structs: dict[str, tuple[int, Any]] = {}
    if v2 is not None:
        structs["v2"] = (2, v2)
        v3 = type("c_nvmlGpuFabricInfo_v3_t", (v2,), {"_fields_": [("healthSummary", ctypes.c_uint8)]})
        structs["v3"] = (3, v3)
    for label, (version, struct_type) in structs.items():
        info = struct_type()
        info.version = (version << 24) | ctypes.sizeof(struct_type)
        try:
            nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        except (nvml.NVMLError, AttributeError) as exc:
            answers[label] = {"return": _error_name(nvml, exc) if isinstance(exc, nvml.NVMLError) else str(exc)}
            continue
        names = [f[0] for f in struct_type._fields_] + [f[0] for f in getattr(v2, "_fields_", [])]
        answers[label] = {name: repr(getattr(info, name)) for name in dict.fromkeys(names)}
    return answers


def nvml_raw(simulate: bool) -> Result:
    """Raw NVML answers: probe fields, error counters per link, per-link vs all-links throughput, fabric."""
    nvml = _nvml()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        answers = {label: _field_answer(nvml, handle, fid, scope) for label, fid, scope in PROBE_FIELDS}
        count = min(int(answers["NVLINK_LINK_COUNT"]["value"] or 0), MAX_LINKS_CHECKED)
        tx = nvml_fields.FI_NVLINK_THROUGHPUT_DATA_TX
        values = [_field_answer(nvml, handle, tx, link)["value"] for link in range(count)]
        link_sum = sum(values) if values and None not in values else None
        aggregate = _field_answer(nvml, handle, tx, nvml_fields.SCOPE_ALL_LINKS)["value"]
        return {
            "gpu0_fields": answers,
            "link_count": count,
            "link_error_counters": _link_errors(nvml, handle, count),
            "throughput_tx_all_links_kib": aggregate,
            "throughput_tx_link_sum_kib": link_sum,
            "all_links_equals_link_sum": None if link_sum is None else aggregate == link_sum,
            "fabric": _fabric(nvml, handle),
        }
    finally:
        nvml.nvmlShutdown()


# --- the CUDA <-> NVML join and the pytest process's context ----------------------------------


def cuda_join(simulate: bool) -> Result:
    """The CUDA<->NVML join by UUID (simulate: the fake's GPUs listed in reverse CUDA order)."""
    from pytest_nvlink.sources.live.probe import join_cuda_indices, probe_node, torch_cuda_devices

    node = probe_node()
    if not node.gpus:
        raise CouldNotRun("; ".join(node.probe_errors) or "NVML reports no GPU")
    if simulate:
        devices = [(i, g.uuid, g.pci_bus_id) for i, g in enumerate(reversed(node.gpus))]
    else:
        _cuda()
        devices = torch_cuda_devices()
    if not devices:
        raise CouldNotRun("CUDA lists no device")
    join_cuda_indices(node, devices)
    return {
        "cuda_of_nvml": {g.index: g.cuda_index for g in node.gpus},
        "unjoined": {k: v for k, v in node.unknown_reasons.items() if "cuda" in k},
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


CONTEXT_PROBE = """
import ctypes, json, os, sys

def _contexts():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return "could not run: libcuda.so.1 is not loadable (%s)" % exc
    if lib.cuInit(0) != 0:
        return "could not run: cuInit failed"
    count = ctypes.c_int()
    lib.cuDeviceGetCount(ctypes.byref(count))
    found = {}
    for index in range(count.value):
        device, uuid = ctypes.c_int(), (ctypes.c_ubyte * 16)()
        flags, active = ctypes.c_uint(), ctypes.c_int()
        lib.cuDeviceGet(ctypes.byref(device), index)
        lib.cuDeviceGetUuid(uuid, device)
        lib.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active))
        text = bytes(uuid).hex()
        name = "GPU-%s-%s-%s-%s-%s" % (text[:8], text[8:12], text[12:16], text[16:20], text[20:])
        found[name] = bool(active.value)
    return found

def pytest_unconfigure(config):
    with open(os.environ["DEVICE_CHECK_CONTEXT_OUT"], "w") as out:
        json.dump({"torch_imported": "torch" in sys.modules, "primary_context_by_uuid": _contexts()}, out)
"""


def plugin_context(simulate: bool) -> Result:
    """Start a pytest process that runs the plugin; ask, by GPU UUID, whether it holds a CUDA context.

    PIDs differ inside containers (NVML lists host PIDs), so the pytest process itself asks the
    driver about its primary context on each device (cuDevicePrimaryCtxGetState), keyed by UUID.
    """
    if not simulate:
        _nvml().nvmlShutdown()  # no NVML, no GPU: nothing could hold a context
    folder = Path(tempfile.mkdtemp(prefix="device-check-pytest-"))
    (folder / "device_check_context.py").write_text(CONTEXT_PROBE)
    out = folder / "context.json"
    run = ["--nvlink-suite=auto", "--nvlink-quick"]
    if simulate:  # the plugin on a replayed node: the stand-in for probing one
        run = ["--nvlink-suite=h100-8gpu", f"--nvlink-replay={SIMULATED_NODE}", "--nvlink-quick"]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "device_check_context", "-q", *run]
    path = os.pathsep.join([str(folder), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "DEVICE_CHECK_CONTEXT_OUT": str(out)}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=100, check=False)
    if not out.exists():
        raise RuntimeError(f"the pytest process wrote no answer (exit {done.returncode}): {done.stderr[-400:]}")
    answer = json.loads(out.read_text())
    contexts = answer["primary_context_by_uuid"]
    return {
        "pytest_exit": done.returncode,
        "pytest_tail": done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else [],
        "torch_imported_in_pytest": answer["torch_imported"],
        "primary_context_by_uuid": contexts,
        "pytest_holds_a_context": any(contexts.values()) if isinstance(contexts, dict) else None,
    }


# --- NCCL ------------------------------------------------------------------------------------


def nccl(simulate: bool) -> Result:
    """NCCL with one rank on one GPU (simulate: gloo with 1 and 2 ranks): collectives, debug files, line shapes."""
    from pytest_nvlink.config.suites import Measure
    from pytest_nvlink.measure.collectives import child_env
    from pytest_nvlink.measure.runner import MeasurementSession

    backend, worlds = ("gloo", (1, 2)) if simulate else ("nccl", (1,))
    if not simulate:
        _cuda()
    runs: Result = {}
    for world in worlds:
        measure = Measure(collective_iterations=3, collective_warmup=1, timeout_s=60)
        sizes = dict.fromkeys(measure.collectives, (1 if simulate else 64) * MIB)
        # a user's NCCL_DEBUG_SUBSYS without INIT must not hide the lines the transport audit reads
        env = {"NCCL_DEBUG_SUBSYS": "COLL"}
        session = MeasurementSession(
            measure, backend=backend, gpus=list(range(world)), collective_sizes=sizes, op_timeout_s=45, env=env
        )
        run = session.collective_run()
        runs[f"world {world}"] = {
            "collectives": [{k: v for k, v in asdict(m).items() if v is not None} for m in run.measurements],
            "errors": [m.error for m in run.measurements if m.error and not m.error.startswith("not run: sendrecv")],
            "debug_files": len(run.logs),
            "line_shapes": nccl_line_shapes(run.logs.values()),
            "init_lines": sum(text.count(" NCCL INFO ") for text in run.logs.values()),
            "audit_channels": len(run.nccl.channels) if run.nccl else None,
        }
        if simulate:
            runs[f"world {world}"]["debug_files"] = "could not run: gloo writes no NCCL debug file"
    runs["subsys_given_to_ranks"] = child_env_subsys(child_env)
    return runs


def child_env_subsys(child_env: Callable[..., dict[str, str]]) -> str:
    from pytest_nvlink.measure.collectives import CollectiveSpec

    spec = CollectiveSpec(backend="nccl", world_size=1, sizes=())
    return child_env(spec, Path(tempfile.gettempdir()), {"NCCL_DEBUG_SUBSYS": "COLL"})["NCCL_DEBUG_SUBSYS"]


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


# --- copies ----------------------------------------------------------------------------------


def counter_freshness(simulate: bool) -> Result:
    """PCIe RX counter after a 1 GiB host->device copy: value and field timestamp at 0, 10, 100, 1000 ms."""
    nvml = _nvml()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        rx = nvml_fields.FI_PCIE_COUNT_RX_BYTES
        before = _field_answer(nvml, handle, rx, 0)
        if simulate:  # the stand-in copy: the fake's counters advance as a copy would
            nvml.add_traffic(str(nvml.nvmlDeviceGetUUID(handle)), pcie_rx_bytes=GIB)
        else:
            torch = _cuda()
            host = torch.ones(GIB, dtype=torch.uint8).pin_memory()
            host.to("cuda:0", non_blocking=True)
            torch.cuda.synchronize(0)
        copies_ended_us = time.time_ns() // 1000
        reads, started = {}, time.perf_counter()
        for delay in (0.0, 0.01, 0.1, 1.0):
            time.sleep(max(0.0, delay - (time.perf_counter() - started)))
            answer = _field_answer(nvml, handle, rx, 0)
            reads[f"{delay * 1e3:g} ms"] = {
                "delta_bytes": None if answer["value"] is None else answer["value"] - (before["value"] or 0),
                "timestamp_after_copies_us": answer["timestamp_us"] - copies_ended_us,
            }
        return {"copied_bytes": GIB, "before": before, "reads": reads}
    finally:
        nvml.nvmlShutdown()


def p2p_pair(simulate: bool) -> Result:
    """One pair through the real campaign code (simulate: the simulated engine and its counters)."""
    from pytest_nvlink.measure.p2p import P2PPlan, run_campaign

    plan = P2PPlan(gpus=(0, 1), nbytes=256 * MIB, iterations=20, warmup=3, latency_iterations=100)
    if simulate:
        from pytest_nvlink.measure.p2p_simulated import SimulatedCopyEngine, SimulatedCounters

        engine: Any = SimulatedCopyEngine()()
        reader = SimulatedCounters()()
    else:
        torch = _cuda()
        if torch.cuda.device_count() < 2:
            raise CouldNotRun(f"P2P needs 2 GPUs; CUDA sees {torch.cuda.device_count()} (see p2p_machinery)")
        from pytest_nvlink.measure.cuda_engine import CudaCopyEngine
        from pytest_nvlink.measure.runner import NvmlCounterFactory

        engine, reader = CudaCopyEngine(), NvmlCounterFactory()()
    results = run_campaign(plan, engine, reader)
    return {
        "engine": engine.name,
        "measurements": [{k: v for k, v in asdict(m).items() if v is not None} for m in results],
    }


def _machinery(simulate: bool) -> Result:
    from device_check_copies import p2p_machinery

    return p2p_machinery(simulate)


def _host_link(simulate: bool) -> Result:
    from device_check_host import host_link

    return host_link(simulate)


SECTIONS: dict[str, Callable[[bool], Result]] = {
    "probe": probe,
    "nvml_raw": nvml_raw,
    "cuda_join": cuda_join,
    "plugin_context": plugin_context,
    "counter_freshness": counter_freshness,
    "p2p_machinery": _machinery,
    "p2p_pair": p2p_pair,
    "host_link": _host_link,
    "nccl": nccl,
}
# seconds per section, spawn and imports included; they sum to under the global deadline
BUDGETS_S: dict[str, float] = {
    "probe": 20,
    "nvml_raw": 25,
    "cuda_join": 25,
    "plugin_context": 55,
    "counter_freshness": 25,
    "p2p_machinery": 60,
    "p2p_pair": 30,
    "host_link": 30,
    "nccl": 60,
}
