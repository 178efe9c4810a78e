"""How much time the measurement harness and the inert plugin cost (a script, not a test).

    python benchmarks/overhead.py                # gloo session on CPU, simulated P2P, replay timing, inert A/B
    python benchmarks/overhead.py --no-replay    # skip the pytest subprocess timings
    python benchmarks/overhead.py --inert-only   # only the inert-plugin A/B and its import time

The inert A/B runs a generated file of 3,000 trivial tests with the plugin installed but not asked
for (no ``--nvlink-suite``) and with ``-p no:nvlink``, alternating the two so drift hits both
alike, and prints the medians and their ratio; then the import time of ``pytest_nvlink.plugin``.

On a machine where torch sees CUDA the same script measures real P2P copies and NCCL collectives
(one rank per GPU) instead of the gloo/simulated stand-ins. Nothing is imported from torch at
module level: spawned ranks re-import this file as ``__mp_main__``.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_nvlink.config.shipped import COLLECTIVE_OPS  # noqa: E402
from pytest_nvlink.config.suites import Measure  # noqa: E402
from pytest_nvlink.measure.busbw import format_size  # noqa: E402
from pytest_nvlink.measure.p2p_simulated import SimulatedCopyEngine  # noqa: E402
from pytest_nvlink.measure.runner import MeasurementSession, cuda_devices  # noqa: E402

Row = tuple[str, str, str]


def _table(title: str, header: Row, rows: Sequence[Row]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def _timed(action: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def bench_collectives(ranks: int, size: int, iterations: int, gpu: bool) -> None:
    measure = Measure(collective_iterations=iterations, collective_warmup=1, timeout_s=300, collectives=COLLECTIVE_OPS)
    session = MeasurementSession(
        measure,
        backend=None if gpu else "gloo",
        world_size=None if gpu else ranks,
        collective_sizes=dict.fromkeys(COLLECTIVE_OPS, size),
    )
    seconds, _ = _timed(session.collective_run)
    rows = []
    for m in session.collective_run().measurements:
        figure = f"{m.busbw_gbps:.3f}" if m.busbw_gbps is not None else (m.error or "?")[:60]
        rows.append((m.op, f"{m.time_us:.1f}" if m.time_us else "-", figure))
    title = f"collectives ({session.backend}, {format_size(size)}): whole session {seconds:.2f} s"
    _table(title, ("op", "time/op (us)", "busbw GB/s"), rows)


def bench_p2p(size_mib: int, iterations: int, gpu: bool) -> None:
    measure = Measure(p2p_size_mib=size_mib, p2p_iterations=iterations, p2p_warmup=1, timeout_s=300)
    if gpu:
        session = MeasurementSession(measure, progress=print)
    else:
        session = MeasurementSession(measure, gpus=list(range(8)), engine_factory=SimulatedCopyEngine())
    seconds, _ = _timed(session.p2p_measurements)
    results = session.p2p_measurements()
    errors = sum(m.error is not None for m in results)
    rows = [(kind, str(sum(m.kind == kind for m in results)), "") for kind in ("unidirectional", "bidirectional")]
    _table(
        f"p2p ({'torch' if gpu else 'simulated'}): campaign {seconds:.2f} s, {errors} errors", ("kind", "n", ""), rows
    )


def _pytest(args: list[str], cwd: Path) -> tuple[float, int, str]:
    command = [sys.executable, "-m", "pytest", *args]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    tail = (done.stdout + done.stderr).strip().splitlines()
    return time.perf_counter() - started, done.returncode, tail[-1] if tail else ""


def bench_replay(repeats: int = 3) -> None:
    """A replayed H100 session vs bare pytest runs, plugin loaded and not (median of ``repeats``)."""
    quiet = ["-q", "-p", "no:cacheprovider"]
    replay = ["--nvlink-suite=h100-8gpu", f"--nvlink-replay={REPO / 'snapshots' / 'h100-8gpu-healthy.json'}", *quiet]
    runs = (
        ("bare --co, plugin not loaded", ["--co", "-p", "no:nvlink", *quiet]),
        ("bare --co, plugin inert", ["--co", *quiet]),
        ("h100-8gpu replay, 372 checks", replay),
        ("h100-8gpu replay, topology only", [*replay, "-k", "not bandwidth and not collectives"]),
    )
    with tempfile.TemporaryDirectory() as empty:
        rows = []
        for name, args in runs:
            timings = [_pytest(args, Path(empty)) for _ in range(repeats)]
            seconds = sorted(t[0] for t in timings)[repeats // 2]
            code, last = timings[-1][1], timings[-1][2]
            rows.append((name, f"{seconds:.2f} s (exit {code})", last[:60]))
    _table(f"pytest wall time, median of {repeats}", ("run", "time", "last line"), rows)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def bench_inert(tests: int, repeats: int, collect_only: bool = False) -> None:
    """Plugin installed but inert (A) against ``-p no:nvlink`` (B), alternated, ``repeats`` runs each."""
    quiet = ["-q", "-p", "no:cacheprovider", *(["--co"] if collect_only else [])]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        body = "".join(f"def test_{i}():\n    pass\n\n\n" for i in range(tests))
        (root / "test_trivial.py").write_text(body, encoding="utf-8")
        _pytest(quiet, root)  # warm the file cache and write the .pyc before timing
        inert: list[tuple[float, float]] = []
        absent: list[tuple[float, float]] = []
        for _ in range(repeats):
            inert.append(_timed_cpu(quiet, root))
            absent.append(_timed_cpu([*quiet, "-p", "no:nvlink"], root))
    what = f"{tests} trivial tests{' (--co)' if collect_only else ''}"
    print(f"\ninert plugin, {what}, {repeats} alternated runs each")
    for label, column in (("wall", 0), ("CPU (user+sys)", 1)):
        a, b = _median([t[column] for t in inert]), _median([t[column] for t in absent])
        print(f"  {label}: inert (no --nvlink-suite) median {a:.3f} s, -p no:nvlink median {b:.3f} s")
        print(f"    ratio inert / absent: {a / b:.3f}  ({(a / b - 1) * 100:+.1f} %, {(a - b) * 1000:+.0f} ms)")


def _timed_cpu(args: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and the child's CPU seconds; CPU time is what other load on the machine disturbs least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = _pytest(args, cwd)[0]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


IMPORT_PROBE = (
    "import time, pytest; t = time.perf_counter(); import pytest_nvlink.plugin; "
    "print(time.perf_counter() - t); import sys; "
    "print(' '.join(sorted(m for m in sys.modules if m.startswith('pytest_nvlink'))))"
)


def bench_import(repeats: int) -> None:
    """Import time of the plugin module after pytest itself (what the inert plugin adds at start-up)."""
    seconds, modules = [], ""
    for _ in range(repeats):
        # Run outside the checkout so the installed package (or PYTHONPATH) is what gets imported.
        with tempfile.TemporaryDirectory() as elsewhere:
            done = subprocess.run(
                [sys.executable, "-c", IMPORT_PROBE],
                cwd=elsewhere,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
        first, modules = done.stdout.splitlines()[:2]
        seconds.append(float(first))
    print(f"\nimport pytest_nvlink.plugin after pytest: median {_median(seconds) * 1000:.1f} ms over {repeats} runs")
    print(f"  modules of the package loaded: {modules}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4, help="gloo ranks on CPU (default 4)")
    parser.add_argument("--size-kib", type=int, default=64, help="collective S in KiB on CPU (default 64)")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--no-replay", action="store_true", help="skip the pytest subprocess timings")
    parser.add_argument("--inert-only", action="store_true", help="only the inert-plugin A/B and import time")
    parser.add_argument("--inert-tests", type=int, default=3000, help="trivial tests in the A/B file (default 3000)")
    parser.add_argument("--inert-repeats", type=int, default=11, help="alternated runs per side (default 11)")
    options = parser.parse_args(argv)
    if options.inert_only or not options.no_replay:
        bench_inert(options.inert_tests, options.inert_repeats)
        bench_inert(options.inert_tests, options.inert_repeats, collect_only=True)
        bench_inert(300, options.inert_repeats)
        bench_import(options.inert_repeats)
    if options.inert_only:
        return 0
    gpu = not isinstance(cuda_devices(), str)
    size = 256 << 20 if gpu else options.size_kib << 10
    bench_collectives(options.ranks, size, options.iterations if not gpu else 20, gpu)
    bench_p2p(256 if gpu else 64, 20 if gpu else options.iterations, gpu)
    if not options.no_replay:
        bench_replay()
    return 0


if __name__ == "__main__":
    sys.exit(main())
