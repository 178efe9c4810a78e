"""Who this process is in a launched job: rank, world size, local rank and the rendezvous address.

Read from torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``) or else Slurm's (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``; the master
is the first host of ``SLURM_STEP_NODELIST``/``SLURM_JOB_NODELIST`` on a port derived from
``SLURM_JOB_ID``; ``MASTER_ADDR``/``MASTER_PORT`` override both). torchrun wins when both are set,
because ``srun torchrun ...`` gives each torchrun its own Slurm task id.

A missing or contradictory variable is a :class:`RankEnvError` with one sentence naming it; the
rendezvous itself is ``torch.distributed.init_process_group(init_method="env://")``, which reads
``MASTER_ADDR``/``MASTER_PORT`` from the environment that :func:`rendezvous_env` returns.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_nvlink.core.hostlist import HostlistError
from pytest_nvlink.core.hostlist import first_host as hostlist_first_host

# Derived ports stay in 12000..31999: unprivileged, and below Linux's default ephemeral range
# (net.ipv4.ip_local_port_range starts at 32768), so the kernel does not hand them to outgoing sockets.
PORT_BASE = 12000
PORT_SPAN = 20000
HOST_ENV = "PYTEST_NVLINK_HOST"  # this rank's host name, for pretend trays on one machine


class RankEnvError(Exception):
    """The launcher's environment does not say who this rank is; the message is one sentence."""


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    launcher: str  # "torchrun" | "slurm"
    host: str  # this rank's host name

    def rendezvous_env(self) -> dict[str, str]:
        """The variables ``init_method="env://"`` reads."""
        return {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
        }


def _integer(env: Mapping[str, str], name: str, minimum: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        raise RankEnvError(f"{name} is not set")
    try:
        value = int(raw.strip())
    except ValueError:
        raise RankEnvError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise RankEnvError(f"{name}={value} must be at least {minimum}")
    return value


def derived_port(job_id: str) -> int:
    """A port for the job's rendezvous that every task of the job computes alike."""
    if not job_id.strip().isdigit():
        raise RankEnvError(f"SLURM_JOB_ID={job_id!r} is not a job number; set MASTER_PORT")
    return PORT_BASE + int(job_id) % PORT_SPAN


def first_host(hostlist: str) -> str:
    """The first host of a Slurm hostlist (``gpu[007-009,012],login1`` -> ``gpu007``), the rest not expanded."""
    try:
        return hostlist_first_host(hostlist)
    except HostlistError as exc:
        raise RankEnvError(f"cannot read a first host from the hostlist {hostlist!r}: {exc}") from None


def _port(env: Mapping[str, str], derived: int | None, source: str) -> int:
    if "MASTER_PORT" in env:
        port = _integer(env, "MASTER_PORT", 1)
        if port > 65535:
            raise RankEnvError(f"MASTER_PORT={port} is not a TCP port (1..65535)")
        return port
    if derived is None:
        raise RankEnvError(f"MASTER_PORT is not set ({source})")
    return derived


def this_host(env: Mapping[str, str]) -> str:
    """``PYTEST_NVLINK_HOST``, else Slurm's node name, else the machine's host name."""
    return env.get(HOST_ENV) or env.get("SLURMD_NODENAME") or socket.gethostname()


def rank_info(env: Mapping[str, str]) -> RankInfo:
    """This process's place in the job, from torchrun's variables or else Slurm's."""
    if "RANK" in env or "WORLD_SIZE" in env:
        info = _torchrun(env)
    elif "SLURM_PROCID" in env:
        info = _slurm(env)
    else:
        raise RankEnvError(
            "no launcher environment: run under torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) "
            "or srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_NODELIST, SLURM_JOB_ID)"
        )
    if info.rank >= info.world_size:
        names = ("RANK", "WORLD_SIZE") if info.launcher == "torchrun" else ("SLURM_PROCID", "SLURM_NTASKS")
        raise RankEnvError(
            f"{names[0]}={info.rank} is not below {names[1]}={info.world_size}; the variables contradict each other"
        )
    return info


def _torchrun(env: Mapping[str, str]) -> RankInfo:
    if not env.get("MASTER_ADDR", "").strip():
        raise RankEnvError("MASTER_ADDR is not set (torchrun environment: RANK/WORLD_SIZE are set)")
    return RankInfo(
        rank=_integer(env, "RANK", 0),
        world_size=_integer(env, "WORLD_SIZE", 1),
        local_rank=_integer(env, "LOCAL_RANK", 0),
        master_addr=env["MASTER_ADDR"].strip(),
        master_port=_port(env, None, "torchrun environment"),
        launcher="torchrun",
        host=this_host(env),
    )


def _slurm(env: Mapping[str, str]) -> RankInfo:
    master = env.get("MASTER_ADDR", "").strip()
    if not master:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        if not nodelist:
            raise RankEnvError("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set, and MASTER_ADDR is not set")
        master = first_host(nodelist)
    job_id = env.get("SLURM_JOB_ID")
    derived = derived_port(job_id) if job_id is not None and "MASTER_PORT" not in env else None
    return RankInfo(
        rank=_integer(env, "SLURM_PROCID", 0),
        world_size=_integer(env, "SLURM_NTASKS", 1),
        local_rank=_integer(env, "SLURM_LOCALID", 0),
        master_addr=master,
        master_port=_port(env, derived, "and SLURM_JOB_ID is not set to derive it from"),
        launcher="slurm",
        host=this_host(env),
    )
