"""The HTML reports of the three demo snapshots, rendered by a real headless Chromium (Debian's ``chromium``).

Skipped only where chromium is absent and ``CI`` is unset; ``.ci/run`` installs it, and in CI a
missing browser fails. Each page is rendered with the network namespace cut (``unshare -rn``), so a
report that needed the network would show it; Chromium's console log must hold no JavaScript error.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from report_outputs import DEMOS, Outputs, write_outputs

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed (CI installs it)"
)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outputs]:
    assert CHROMIUM is not None, "CI is set but chromium is not installed: .ci/run must apt-get install chromium"
    folder = tmp_path_factory.mktemp("browser")
    return {snapshot: write_outputs(snapshot, folder) for snapshot in DEMOS}


def chromium(page: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``page`` with no network at all; a fresh profile so runs do not share state."""
    assert CHROMIUM is not None
    command = [
        "unshare",
        "-rn",  # a new user and network namespace: only a loopback device, and it is down
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # root in CI; the page is our own file
        "--disable-gpu",
        f"--user-data-dir={page.parent / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        *arguments,
        page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert not [line for line in console if not _slow_machine_notice(line)], console
    return done


def _slow_machine_notice(line: str) -> bool:
    """Chromium's own info-level intervention when a font loads slowly on a loaded machine
    (https://www.chromestatus.com/feature/5636954674692096): not the page's console. A report that
    fetched a web font over the network still fails, as it names an http(s) URL."""
    font = line.partition("Slow network is detected.")[2]
    loading = font.partition("Fallback font will be used while loading:")[2]
    return bool(font) and not loading.strip().lower().startswith(("http:", "https:"))


NOTICE = (
    '[9:9:1203/073808.1:INFO:CONSOLE(0)] "Slow network is detected. See https://www.chromestatus.com/feature/'
    '5636954674692096 for more details. Fallback font will be used while loading: {font}", source:  (0)'
)


@pytest.mark.parametrize(
    ("line", "tolerated"),
    [
        (NOTICE.format(font="chrome://resources/roboto.woff2"), True),
        (NOTICE.format(font="https://fonts.gstatic.com/s/roboto.woff2"), False),
        ('[9:9:1:INFO:CONSOLE(3)] "Uncaught ReferenceError: x is not defined", source: file:///r.html (3)', False),
        ('[9:9:1:INFO:CONSOLE(7)] "Slow network", source: file:///r.html (7)', False),
    ],
)
def test_only_chromiums_slow_font_notice_is_tolerated(line: str, tolerated: bool) -> None:
    assert _slow_machine_notice(line) is tolerated


@pytest.mark.parametrize("snapshot", list(DEMOS))
def test_dom_holds_the_banner_and_the_failing_pairs(outputs: dict[str, Outputs], snapshot: str) -> None:
    dom = chromium(outputs[snapshot].html, "--dump-dom").stdout
    verdict, failed = DEMOS[snapshot]
    assert f'<header class="banner {verdict}" id="verdict">' in dom
    assert f"<h2>Failures ({failed})</h2>" in dom
    wanted = {
        "h100-8gpu-healthy": ["No check failed.", ">373.0</text>"],
        "h100-8gpu-degraded": ["GPU 2 -&gt; GPU 6: unidirectional bandwidth 37.2 GB/s", ">37.2!</text>", "NV16≠NV18"],
        "h100-8gpu-vm-pcie": ["GPU 0 -&gt; GPU 1: unidirectional bandwidth 26.1 GB/s", "PHB≠NV18", "19.8!"],
    }[snapshot]
    for text in wanted:
        assert text in dom, text


@pytest.mark.parametrize("snapshot", list(DEMOS))
def test_screenshot_is_not_blank(outputs: dict[str, Outputs], snapshot: str) -> None:
    png = outputs[snapshot].html.with_suffix(".png")
    chromium(outputs[snapshot].html, f"--screenshot={png}", "--window-size=1000,1000", "--hide-scrollbars")
    width, height, colours = png_colours(png.read_bytes())
    assert (width, height) == (1000, 1000)
    assert len(colours) > 50, f"{len(colours)} colours: a blank page?"
    banner = {"PASS": (0x1A, 0x7F, 0x37), "FAIL": (0xC6, 0x28, 0x28)}[DEMOS[snapshot][0]]
    assert banner in colours


def png_colours(data: bytes) -> tuple[int, int, set[tuple[int, int, int]]]:
    """Width, height and the set of RGB colours of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, idat, header = 8, b"", b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        offset += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour_type in (2, 6), (depth, colour_type)
    step = 3 if colour_type == 2 else 4
    rows = _unfilter(zlib.decompress(idat), width * step, height, step)
    colours = {tuple(row[i : i + 3]) for row in rows for i in range(0, len(row), step)}
    return width, height, colours  # type: ignore[return-value]


def _unfilter(raw: bytes, stride: int, height: int, step: int) -> list[bytes]:
    """Undo PNG's per-row filters (None, Sub, Up, Average, Paeth; RFC 2083 section 6)."""
    rows, previous = [], bytearray(stride)
    for r in range(height):
        kind, row = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1 : (r + 1) * (stride + 1)])
        for i in range(stride):
            left = row[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                row[i] = (row[i] + left) & 0xFF
            elif kind == 2:
                row[i] = (row[i] + up) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                row[i] = (row[i] + _paeth(left, up, corner)) & 0xFF
        rows.append(bytes(row))
        previous = row
    return rows


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)
