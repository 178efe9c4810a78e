"""Show that a change leaves what users see untouched: the same runs give the same outputs.

    python benchmarks/same_outputs.py capture DIR     # run every scenario, keep its outputs in DIR
    python benchmarks/same_outputs.py compare A B     # exit 1 and print a diff when A and B differ

Each scenario is a whole pytest run of the installed plugin (three demo replays, a rack replay,
an evidence run, a baseline run) writing JUnit (``--junitxml``), the results JSON and the HTML
report; the terminal output is kept too. What differs between two checkouts or two moments is
masked first: the checkout's and the temporary folder's paths, times, dates and durations. Run it
on the commit before a refactoring and after; the layout change of issue 23 was shown with it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCENARIOS: dict[str, list[str]] = {
    "healthy": ["--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-healthy"],
    "degraded": ["--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-degraded"],
    "vm-pcie": ["--nvlink-suite=h100-8gpu", "--nvlink-replay=h100-8gpu-vm-pcie"],
    "rack-faulty": ["--nvlink-suite=gb200-nvl72", "--nvlink-replay=gb200-nvl72-faulty"],
    "evidence": [
        "--nvlink-suite=a100-8gpu",
        "--nvlink-evidence-missing=skip",
        "--nvlink-evidence={work}/topo.txt",
        "--nvlink-evidence={work}/p2p.txt",
    ],
    "baseline": [
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-degraded",
        "--nvlink-baseline={work}/baseline.json",
    ],
}
# Inputs copied into the run's folder first, so that no message's length depends on the checkout's path
# (the terminal cuts long messages).
COPIED: dict[str, str] = {
    "topo.txt": "tests/data/evidence/topo/a100-sxm4-80gb-8gpu-distserve3.txt",
    "p2p.txt": "tests/data/evidence/p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt",
    "baseline.json": "snapshots/h100-8gpu-healthy.json",
}

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r'\b(time|timestamp)="[^"]*"'), r'\1="<t>"'),
    (re.compile(r"\bin \d+(\.\d+)?s( \(\d+:\d\d:\d\d\))?"), "in <s>"),
    (re.compile(r"\b20\d{6}\b"), "<date>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?( UTC)?"), "<time>"),
    (re.compile(r"\bplatform linux -- .*"), "platform <masked>"),
    (re.compile(r"^(rootdir|plugins|configfile|cachedir): .*$", re.M), r"\1: <masked>"),
    (re.compile(r'"plugin_version": "[^"]*"'), '"plugin_version": "<v>"'),
    (re.compile(r'hostname="[^"]*"'), 'hostname="<h>"'),
    # pytest pads its closing line with "=" to the terminal's width, so its length follows the duration's.
    (re.compile(r"^=+ (.*?) =+$", re.M), r"== \1 =="),
    # pytest names the source line of a skip call: where the plugin's code sits, not what it says.
    (re.compile(r"\S*pytest_nvlink/[\w/]+\.py:\d+"), "<plugin source line>"),
)


def _mask(text: str, work: Path) -> str:
    text = text.replace(str(REPO), "<repo>").replace(str(work), "<work>")
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def capture(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, args in SCENARIOS.items():
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            for name_there, source in COPIED.items():
                shutil.copyfile(REPO / source, work / name_there)
            argv = [a.format(work=work) for a in args]
            argv += [
                f"--junitxml={work / 'junit.xml'}",
                f"--nvlink-json={work / 'results.json'}",
                f"--nvlink-report={work / 'report.html'}",
            ]
            env = {**os.environ, "COLUMNS": "200", "PYTHONHASHSEED": "0"}
            cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-rfEs", *argv]
            done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)
            terminal = _mask(done.stdout + done.stderr, work) + f"\nexit {done.returncode}\n"
            (out / f"{name}.terminal.txt").write_text(terminal)
            for produced in ("junit.xml", "results.json", "report.html"):
                path = work / produced
                text = _mask(path.read_text(), work) if path.exists() else "<not written>\n"
                (out / f"{name}.{produced}").write_text(text)
        print(f"{name}: exit {done.returncode}")


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    differing = 0
    for name in names:
        a = (before / name).read_text().splitlines() if (before / name).exists() else ["<missing>"]
        b = (after / name).read_text().splitlines() if (after / name).exists() else ["<missing>"]
        if a != b:
            differing += 1
            diff = difflib.unified_diff(a, b, str(before / name), str(after / name), n=1)
            sys.stdout.writelines(line[:400] + "\n" for line in diff)
    print(f"{len(names) - differing} of {len(names)} outputs identical")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("capture").add_argument("dir", type=Path)
    both = sub.add_parser("compare")
    both.add_argument("before", type=Path)
    both.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "capture":
        capture(args.dir)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    raise SystemExit(main())
