"""The demo snapshots' results JSON, HTML report and JUnit XML, written by a real pytest run each."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEMOS: dict[str, tuple[str, int]] = {  # snapshot -> (verdict, failed items), as README's demo shows
    "h100-8gpu-healthy": ("PASS", 0),
    "h100-8gpu-degraded": ("FAIL", 30),
    "h100-8gpu-vm-pcie": ("FAIL", 354),
}


@dataclass(frozen=True)
class Outputs:
    json: Path
    html: Path
    junit: Path
    stdout: str


def write_outputs(snapshot: str, folder: Path, *extra: str) -> Outputs:
    """Replay ``snapshot`` in a child pytest (from ``folder``, so no project config applies)."""
    outputs = Outputs(folder / f"{snapshot}.json", folder / f"{snapshot}.html", folder / f"{snapshot}.xml", "")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--nvlink-suite=h100-8gpu",
        f"--nvlink-replay={snapshot}",
        f"--nvlink-json={outputs.json}",
        f"--nvlink-report={outputs.html}",
        f"--junitxml={outputs.junit}",
        *extra,
    ]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == (0 if DEMOS[snapshot][1] == 0 else 1), done.stdout + done.stderr
    return Outputs(outputs.json, outputs.html, outputs.junit, done.stdout)
