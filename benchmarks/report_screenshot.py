"""Regenerate docs/degraded-report.png, the README's picture of the HTML report.

Replays the degraded demo snapshot with ``--nvlink-report`` and photographs the page in headless
Chromium (Debian's ``chromium``)::

    python benchmarks/report_screenshot.py            # writes docs/degraded-report.png
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "docs" / "degraded-report.png"
# CSS pixels photographed (banner, failures, topology, first heatmap) and the scale of the PNG.
WINDOW = (1100, 2760)
SCALE = 0.75


def write_report(folder: Path) -> Path:
    page = folder / "degraded.html"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-degraded",
        f"--nvlink-report={page}",
    ]
    subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False, timeout=300)
    if not page.is_file():
        raise SystemExit(f"the replay wrote no report at {page}")
    return page


def photograph(page: Path, out: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium is not installed (Debian: apt-get install chromium)")
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={page.parent / 'profile'}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--force-device-scale-factor={SCALE}",
        f"--screenshot={out}",
        page.as_uri(),
    ]
    subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        photograph(write_report(Path(folder)), args.out.resolve())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
