"""Check the plugin's own assumptions on a machine with NVIDIA GPUs (a script, not a test).

    timeout 480 python benchmarks/device_check.py --json device-check.json   # one GPU is enough, < 6 minutes
    python benchmarks/device_check.py --simulate --json out.json             # CPU stand-ins (CI), < 3 minutes
    python benchmarks/device_check.py --dry-run --json out.json              # wiring only

Every section runs in its own spawned, non-daemonic child (so it may start rank processes of its
own), in its own process group (so a hung section is killed with everything it started), with its
own budget, under one global deadline. The JSON report is rewritten after every section, so a run
that is killed leaves what it measured; ``complete`` says whether the run reached its end. A
section reports ``ok`` with what it found, ``could not run: <reason>``, or ``failed: <reason>``;
the script never stops at a failing section.

``--simulate`` runs every section on CPU stand-ins: the fake NVML of ``tests/`` (when importable),
gloo for NCCL, the simulated copy engine and a simulated CUDA timeline for the copy machinery. It
checks the structure (processes, budgets, the report), not the hardware.

Nothing is imported from torch at module level: spawned children re-import this file as ``__mp_main__``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO, REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import device_check_sections as sections_module  # noqa: E402
from device_check_sections import BUDGETS_S, SECTIONS, CouldNotRun, Result, could_not_run  # noqa: E402

__all__ = ["BUDGETS_S", "SECTIONS", "CouldNotRun", "main", "run_in_child", "summary"]

from pytest_nvlink.core.atomic import write_text_atomically  # noqa: E402
from pytest_nvlink.measure import _proc  # noqa: E402

DEADLINE_S = 330.0  # the whole run; `timeout 480` outside leaves room for start-up and the last write
RESERVE_S = 5.0  # kept back at the deadline for killing the last child and writing the report
MIN_SECTION_S = 5.0  # a section with less time than this left is not started
KILL_GRACE_S = 2.0

# re-exported for tests and older callers
nccl_line_shapes = sections_module.nccl_line_shapes


class Interrupted(Exception):
    """SIGTERM/SIGINT reached the parent: stop the running section and write what there is."""


# --- the child side --------------------------------------------------------------------------


def _watch_parent(parent: int) -> None:
    """A section child whose parent is gone kills its own process group: no orphaned ranks."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            try:
                os.killpg(os.getpgid(0), signal.SIGKILL)
            finally:
                os._exit(1)


def _child_main(conn: Connection, name: str, simulate: bool, parent: int) -> None:
    os.setsid()  # its own process group: the parent kills the section with everything it started
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    try:
        if simulate:
            sections_module.install_stand_ins()
        conn.send(("ok", SECTIONS[name](simulate)))
    except CouldNotRun as exc:
        conn.send(("could not run", str(exc)))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    finally:
        conn.close()


# --- the parent side -------------------------------------------------------------------------


def _kill_group(process: Any) -> None:
    if process.pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _answer(message: tuple[Any, ...] | None) -> Result:
    if message is None:
        return {"status": "failed", "reason": "child closed its pipe without an answer"}
    if message[0] == "ok":
        return {"status": "ok", "result": message[1]}
    if message[0] == "could not run":
        return could_not_run(message[1])
    return {"status": "failed", "reason": message[1], "traceback": message[2]}


def run_in_child(name: str, simulate: bool, budget_s: float) -> Result:
    """``SECTIONS[name]`` in a spawned non-daemonic child of its own process group, killed at ``budget_s``."""
    process, conn = _proc.start_child(
        _child_main, (name, simulate, os.getpid()), name=f"device-check-{name}", daemon=False
    )
    try:
        deadline = time.monotonic() + budget_s
        while not conn.poll(0.2):
            if time.monotonic() > deadline:
                return {"status": "failed", "reason": f"timed out after its budget of {budget_s:.0f} s"}
            if not process.is_alive() and not conn.poll(0):
                return {"status": "failed", "reason": f"child died with {_proc.describe_exit(process.exitcode)}"}
        return _answer(_proc.receive(conn))
    finally:
        _kill_group(process)
        _proc.stop_all([process], grace_s=KILL_GRACE_S)
        conn.close()


# --- the report ------------------------------------------------------------------------------


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_report(names: list[str], mode: str, deadline_s: float) -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "mode": mode,
        "started_utc": _utc_now(),
        "deadline_s": deadline_s,
        "complete": False,
        "seconds": 0.0,
        "sections": {name: {"status": "pending"} for name in names},
    }


def write_report(report: dict[str, Any], json_path: Path | None, out_dir: Path | None) -> None:
    text = json.dumps(report, indent=2, default=str) + "\n"
    if json_path is not None:
        write_text_atomically(json_path, text)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomically(out_dir / "device-check.json", text)
        write_text_atomically(out_dir / "device-check.txt", summary(report) + "\n")


def summary(report: dict[str, Any]) -> str:
    state = "complete" if report["complete"] else "INCOMPLETE"
    lines = [f"device check on {report['host']} ({report['mode']}, {report['seconds']:.0f} s, {state})"]
    for name, section in report["sections"].items():
        seconds = f" ({section['seconds']:.1f} s)" if "seconds" in section else ""
        if section["status"] == "ok":
            lines.append(f"  {name}: ok{seconds}")
            result = section["result"] if isinstance(section["result"], dict) else {"": section["result"]}
            lines += [f"      {key}: {json.dumps(value, default=str)[:160]}" for key, value in result.items()]
        elif section["status"] == "pending":
            lines.append(f"  {name}: pending")
        else:
            lines.append(f"  {name}: {section['status']}: {section['reason']}{seconds}")
    return "\n".join(lines)


def _on_signal(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def run_sections(names: list[str], report: dict[str, Any], args: argparse.Namespace, started: float) -> None:
    deadline = started + args.deadline_s
    for name in names:
        left = deadline - RESERVE_S - time.monotonic()
        began = time.monotonic()
        if args.dry_run:
            section = could_not_run("dry run: NVML and CUDA were not touched")
        elif left < MIN_SECTION_S:
            section = could_not_run(f"the global deadline of {args.deadline_s:.0f} s was reached first")
        else:
            report["sections"][name] = {"status": "running", "started_s": began - started}
            write_report(report, args.json, args.out)
            section = run_in_child(name, args.simulate, min(BUDGETS_S[name], left))
        section["seconds"] = time.monotonic() - began
        report["sections"][name] = section
        report["seconds"] = time.monotonic() - started
        write_report(report, args.json, args.out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", type=Path, help="the report, rewritten after every section")
    parser.add_argument("--out", type=Path, help="a folder for device-check.json and device-check.txt")
    parser.add_argument("--simulate", action="store_true", help="CPU stand-ins for NVML, CUDA and NCCL (CI)")
    parser.add_argument("--dry-run", action="store_true", help="check the wiring; touch neither NVML nor CUDA")
    parser.add_argument("--only", action="append", choices=list(SECTIONS), help="run only these sections")
    parser.add_argument("--deadline-s", type=float, default=DEADLINE_S, help="the whole run's time limit")
    args = parser.parse_args(argv)
    if args.json is None and args.out is None:
        args.json = Path("device-check.json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    names = [name for name in SECTIONS if not args.only or name in args.only]
    mode = "dry run" if args.dry_run else "simulate" if args.simulate else "device"
    report = new_report(list(SECTIONS), mode, args.deadline_s)
    for name in SECTIONS:
        if name not in names:
            report["sections"][name] = could_not_run("not selected with --only")
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        run_sections(names, report, args, started)
        report["complete"] = True
    except Interrupted as exc:
        report["interrupted"] = f"stopped by {exc}"
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        report["seconds"] = time.monotonic() - started
        write_report(report, args.json, args.out)
    print(summary(report))
    return 0 if report["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
