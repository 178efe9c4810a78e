"""The CUDA <-> NVML join, asked of a spawned child so the pytest process never touches CUDA.

Creating a CUDA context in the pytest process (``torch.cuda.get_device_properties`` initializes
CUDA) would hold every GPU: on GPUs in EXCLUSIVE_PROCESS compute mode the measuring children could
then not open them. The child imports torch, lists ``(cuda_index, uuid, pci_bus_id)`` and exits.
"""

from __future__ import annotations

import time
from multiprocessing.connection import Connection

from pytest_nvlink.measure import _proc

CudaDevice = tuple[int, str | None, str | None]


def _join_child(conn: Connection) -> None:
    from pytest_nvlink.sources.live.probe import torch_cuda_devices  # torch, in the child only

    try:
        conn.send(("devices", torch_cuda_devices()))
    except BaseException as exc:
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        conn.close()


def cuda_devices_in_child(timeout_s: float = 120.0) -> list[CudaDevice] | str:
    """What CUDA sees, from a spawned child; a sentence when the child could not say."""
    process, conn = _proc.start_child(_join_child, (), name="pytest-nvlink-cuda-join")
    try:
        deadline = time.monotonic() + timeout_s
        while not conn.poll(0.2):
            if time.monotonic() > deadline:
                return f"listing CUDA devices timed out after {timeout_s:g} s"
            if not process.is_alive() and not conn.poll(0):
                return f"listing CUDA devices died with {_proc.describe_exit(process.exitcode)}"
        message = _proc.receive(conn)
    finally:
        _proc.stop_all([process])
        conn.close()
    if message is None or message[0] != "devices":
        return f"listing CUDA devices failed: {message[1] if message else 'no answer'}"
    devices: list[CudaDevice] = message[1]
    return devices
