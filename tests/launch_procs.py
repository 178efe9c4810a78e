"""Start ``python -m pytest_nvlink.launch`` as several local processes standing in for srun or torchrun tasks."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from pytest_nvlink.measure.ranks import PORT_BASE, PORT_SPAN
from pytest_nvlink.model import Node
from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.sources.snapshot.file import load_snapshot

REPO = Path(__file__).resolve().parents[1]
HEALTHY = REPO / "snapshots" / "h100-8gpu-healthy.json"


@dataclass
class Finished:
    rank: int
    returncode: int | None  # None: still running when the test gave up on it (then killed)
    stdout: str
    stderr: str


def _binds(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nobody listens on now (the launched ranks bind it moments later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def slurm_port() -> tuple[int, str]:
    """A free port in the derived range and a SLURM_JOB_ID that derives it."""
    ports = list(range(PORT_BASE, PORT_BASE + PORT_SPAN))
    random.Random(os.getpid()).shuffle(ports)
    port = next(p for p in ports if _binds(p))
    return port, str(port - PORT_BASE + 4 * PORT_SPAN)


def base_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
    env = {key: os.environ[key] for key in keep if key in os.environ}
    env["OMP_NUM_THREADS"] = "1"
    return env


def launch(
    args: list[str], envs: list[dict[str, str]], cwd: Path, timeout_s: float = 90.0, waits_for: int | None = None
) -> list[Finished]:
    """Start one process per env; wait for all (or for rank ``waits_for`` only, then kill the rest)."""
    command = [sys.executable, "-m", "pytest_nvlink.launch", *args]
    processes = [
        subprocess.Popen(command, env={**base_env(), **env}, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for env in envs
    ]
    results = []
    try:
        if waits_for is not None:
            processes[waits_for].wait(timeout_s)
        for rank, process in enumerate(processes):
            try:
                out, err = process.communicate(timeout=timeout_s if waits_for is None else 1.0)
                results.append(Finished(rank, process.returncode, out.decode(), err.decode()))
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
                results.append(Finished(rank, None, out.decode(), err.decode()))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


def torchrun_envs(world: int, port: int, hosts: list[str]) -> list[dict[str, str]]:
    """torchrun's variables for ``world`` ranks; rank r on ``hosts[r]`` with local ranks counted per host."""
    envs = []
    for rank in range(world):
        local = hosts[:rank].count(hosts[rank])
        envs.append(
            {
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(local),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "PYTEST_NVLINK_HOST": hosts[rank],
            }
        )
    return envs


def slurm_envs(world: int, job_id: str, hosts: list[str], nodelist: str = "localhost") -> list[dict[str, str]]:
    """srun's variables for ``world`` tasks (no MASTER_*: the launcher derives them)."""
    envs = []
    for rank in range(world):
        envs.append(
            {
                "SLURM_PROCID": str(rank),
                "SLURM_NTASKS": str(world),
                "SLURM_LOCALID": str(hosts[:rank].count(hosts[rank])),
                "SLURM_STEP_NODELIST": nodelist,
                "SLURM_JOB_ID": job_id,
                "PYTEST_NVLINK_HOST": hosts[rank],
            }
        )
    return envs


def tray_node(host: str, gpus: int = 2, source: Path = HEALTHY) -> Node:
    """The shipped healthy H100 snapshot cut down to ``gpus`` GPUs on ``host``, without measurements."""
    node = load_snapshot(source)
    node.host = host
    node.gpus = node.gpus[:gpus]
    for gpu in node.gpus:
        # Each tray its own GPUs: a UUID or serial number seen on two trays is one GPU counted twice.
        own = uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}.gpu{gpu.index}")
        gpu.uuid, gpu.serial = f"GPU-{own}", str(own.int)[:13]
    node.paths = [p for p in node.paths or [] if p.b < gpus]
    node.p2p = [s for s in node.p2p or [] if s.src < gpus and s.dst < gpus]
    node.unknown_reasons = {
        key: reason
        for key, reason in node.unknown_reasons.items()
        if not key.startswith("gpu") or int(key[3:].split(".")[0]) < gpus
    }
    node.measurements.p2p, node.measurements.collectives, node.measurements.nccl = [], [], None
    node.environment = None
    return node


def write_trays(folder: Path, hosts: list[str], gpus: int = 2) -> Path:
    """One tray snapshot per host as ``folder/<host>.json``; returns the ``{host}`` pattern."""
    for host in hosts:
        save_snapshot(tray_node(host, gpus), folder / f"{host}.json")
    return folder / "{host}.json"


SUITE = """\
[suite]
description = "pretend rack for the launch tests"
thresholds = "h100-sxm"
gpu_count = {gpus}
gpu_models = ["NVIDIA H100 80GB HBM3"]
nvswitch = true

[topology]
default = "NV18"

[measure]
timeout_s = 60
p2p_size_mib = 1
p2p_iterations = 2
p2p_warmup = 1
collective_iterations = 2
collective_warmup = 1
collectives = ["all_reduce", "all_gather"]
"""

THRESHOLDS = """\
schema = 1

[collectives.all_reduce]
# Source: tests only: gloo on a loaded CPU, the size the harness is exercised with.
size_mib = 1
# Source: tests only: any figure the CPU harness produces passes.
busbw_min_gbps = 0.0001

[collectives.all_gather]
# Source: tests only: gloo on a loaded CPU, the size the harness is exercised with.
size_mib = 1
# Source: tests only: any figure the CPU harness produces passes.
busbw_min_gbps = 0.0001
"""


def write_suite(folder: Path, gpus: int) -> tuple[Path, Path]:
    """A suite of ``gpus`` H100s measuring tiny collectives, and the site thresholds that make them tiny."""
    thresholds = folder / "tiny-thresholds.toml"
    thresholds.write_text(THRESHOLDS)
    suite = folder / "tiny-suite.toml"
    suite.write_text(SUITE.format(gpus=gpus))
    return suite, thresholds
