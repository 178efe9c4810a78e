"""Child-process plumbing shared by the P2P and collective campaigns (spawn, pipes, killing)."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

Progress = Callable[[str], None]


def spawn_context() -> SpawnContext:
    """Always spawn: CUDA cannot survive fork, and a fresh interpreter keeps the parent clean."""
    return multiprocessing.get_context("spawn")


def start_child(
    target: Callable[..., object], args: tuple[Any, ...], name: str, *, daemon: bool = True
) -> tuple[SpawnProcess, Connection]:
    """Start ``target(send_end, *args)`` in a spawned process; return it and the read end.

    A daemonic child may not start processes of its own ("daemonic processes are not allowed to
    have children"): a child that starts ranks (the device check's NCCL section) needs
    ``daemon=False``, and then the caller must stop it (``stop_all``) on every path.
    """
    ctx = spawn_context()
    reader, writer = ctx.Pipe(duplex=False)
    process = ctx.Process(target=target, args=(writer, *args), name=name, daemon=daemon)
    process.start()
    writer.close()  # the child holds the only write end, so its death reads as EOF
    return process, reader


def stop_all(processes: Sequence[SpawnProcess], grace_s: float = 2.0) -> None:
    """Terminate, wait, then kill whatever is left, and join every process (no orphans)."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(5.0)


def receive(conn: Connection) -> tuple[Any, ...] | None:
    """One message, or None when the writer is gone (closed pipe)."""
    try:
        message: tuple[Any, ...] = conn.recv()
    except (EOFError, OSError):
        return None
    return message


def next_message(conn: Connection, process: SpawnProcess, until: float) -> tuple[Any, ...] | str:
    """The child's next message before ``until`` (``time.monotonic()``), or "timeout", or "died" (it exited or
    closed its pipe with nothing left to read)."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return "timeout"
        if conn.poll(min(left, 0.2)):
            return receive(conn) or "died"
        if not process.is_alive() and not conn.poll(0):
            return "died"


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        return f"exit code {exitcode} (signal {-exitcode})"
    return f"exit code {exitcode}"
