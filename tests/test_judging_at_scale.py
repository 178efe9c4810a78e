"""Judging at scale: later-written passes read and rank as before; frozen objects go back at the end."""

from __future__ import annotations

import copy
import dataclasses
import gc
import math
import pickle
import subprocess
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest
from synthetic_node import synthetic_node, write_synthetic

from pytest_nvlink.judges import bandwidth, topology
from pytest_nvlink.judges.context import Context
from pytest_nvlink.judges.groups import PairSet, _figure, combine, pair_records
from pytest_nvlink.model.figures import RecordedMeasurements
from pytest_nvlink.plugin.run import build_run
from pytest_nvlink.record.run import Run, RunOptions
from pytest_nvlink.verdict import Outcome, PassedLater, Verdict, passed

PROPS = [("measured", "373"), ("expected", ">= 335.0"), ("unit", "GB/s")]


def test_words_are_written_once_and_only_when_read() -> None:
    calls: list[int] = []

    def words() -> tuple[str, list[tuple[str, str]]]:
        calls.append(1)
        return "GPU 0 -> GPU 1: unidirectional 373.0 GB/s", list(PROPS)

    verdict = PassedLater(words, 373.0)
    assert verdict.ok and verdict.outcome is Outcome.PASS and calls == []
    assert verdict.message == "GPU 0 -> GPU 1: unidirectional 373.0 GB/s"
    verdict.properties.append(("worst_pair", "gpu0-gpu1"))
    assert verdict.properties[-1] == ("worst_pair", "gpu0-gpu1") and calls == [1]


def test_a_later_pass_equals_the_same_pass_written_at_once() -> None:
    later = PassedLater(lambda: ("ok", list(PROPS)))
    assert later == passed("ok", list(PROPS)) and passed("ok", list(PROPS)) == later
    assert later != passed("other", list(PROPS))
    later.message = "changed"
    assert later.message == "changed" and later.properties == PROPS


def test_a_later_pass_copies_pickles_and_replaces_as_the_verdict_it_reads_as() -> None:
    later = PassedLater(lambda: ("GPU 0 -> GPU 1: P2P read/write/nvlink ok", list(PROPS)))
    for copied in (copy.copy(later), copy.deepcopy(later), pickle.loads(pickle.dumps(later))):
        assert type(copied) is Verdict and copied == later
    replaced = dataclasses.replace(later, message="changed")
    assert replaced.message == "changed" and replaced.properties == PROPS and replaced.ok


@pytest.fixture(scope="module")
def run_8(tmp_path_factory: pytest.TempPathFactory) -> Run:
    files = write_synthetic(tmp_path_factory.mktemp("eight"), 8, node=synthetic_node(8))
    return build_run(RunOptions(suite=str(files.suite), replay=files.snapshot), lambda: pytest.fail("no probe"))


def _pair_judges(run: Run) -> dict[str, Callable[[Context, int, int], Verdict]]:
    provider = RecordedMeasurements(run.node)

    def figure(kind: str) -> Callable[[Context, int, int], Verdict]:
        return lambda ctx, s, d: bandwidth.p2p_figure(ctx, s, d, kind, provider.p2p(s, d, kind))

    return {
        "path": topology.pair_path,
        "p2p_status": topology.p2p_status,
        "unidirectional": figure("unidirectional"),
        "bidirectional": figure("bidirectional"),
        "latency": figure("latency"),
        "path_proof": lambda ctx, s, d: bandwidth.path_proof(ctx, s, d, provider.p2p(s, d, "unidirectional")),
    }


@pytest.mark.parametrize("check", ["path", "p2p_status", "unidirectional", "bidirectional", "latency", "path_proof"])
def test_every_passing_pair_ranks_by_the_figure_its_words_state(run_8: Run, check: str) -> None:
    judge = _pair_judges(run_8)[check]
    for src in range(8):
        for dst in (d for d in range(8) if d != src):
            verdict = judge(run_8.context, src, dst)
            assert isinstance(verdict, PassedLater), verdict
            measured, expected, unit = _figure(verdict)
            assert measured and expected and unit and verdict.message.startswith(f"GPU {src} ")
            names = {name for name, _ in verdict.properties}
            assert {"gpu_src", "gpu_dst", "gpu_src_uuid", "gpu_dst_uuid"} <= names
            assert names & {"threshold_key", "suite_key"}
            if verdict.badness is None:
                with pytest.raises(ValueError, match="could not convert"):
                    float(measured)
                continue
            sign = 1.0 if expected.startswith(">=") else -1.0
            assert math.isclose(verdict.badness, sign * float(measured), rel_tol=1e-5)


def test_a_group_of_later_passes_names_the_worst_and_records_every_pair(run_8: Run) -> None:
    judge = _pair_judges(run_8)["unidirectional"]
    group = PairSet(tuple((3, d) for d in range(8) if d != 3), ordered=True, grouped=True)
    verdicts = [(pair, judge(run_8.context, *pair)) for pair in group.pairs]
    slow = next(i for i, (pair, _) in enumerate(verdicts) if pair == (3, 6))
    verdicts[slow] = ((3, 6), PassedLater(lambda: ("GPU 3 -> GPU 6: unidirectional 340.0 GB/s", PROPS), 340.0))
    result = combine(group, verdicts)
    assert result.outcome is Outcome.PASS and "worst GPU 3 -> GPU 6: unidirectional 340.0 GB/s" in result.message
    assert dict(result.properties)["worst_pair"] == "gpu3-gpu6"
    records = pair_records(result)
    assert records is not None and len(records) == 7
    assert all(r["outcome"] == "pass" and r["message"] and r["measured"] for r in records)


def _replay_24(folder: Path) -> list[str]:
    """The arguments of a replay of a healthy synthetic 24-GPU node written into ``folder``."""
    files = write_synthetic(folder, 24, node=synthetic_node(24))
    return [f"--nvlink-suite={files.suite}", f"--nvlink-replay={files.snapshot}", "-p", "no:cacheprovider"]


class _FrozenAtEnd:
    def __init__(self) -> None:
        self.counts: list[int] = []

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self) -> None:
        self.counts.append(gc.get_freeze_count())


def test_a_run_leaves_nothing_frozen_out_of_the_collector(pytester: pytest.Pytester, tmp_path: Path) -> None:
    seen = _FrozenAtEnd()
    result = pytester.runpytest_inprocess(*_replay_24(tmp_path), "-q", plugins=[seen])
    assert result.ret == 0
    # The node, the items and their reports are out of the collector's passes while the session ends ...
    assert seen.counts and seen.counts[0] > 10_000
    assert gc.get_freeze_count() == 0  # ... and put back when the run is over


CYCLE_WITH_A_FILE = """
import tempfile


class Holder:
    def __init__(self):
        self.me = self  # a reference cycle: only the garbage collector frees it, at the latest at exit
        self.file = tempfile.NamedTemporaryFile(dir=".", prefix="held-", delete=True)


HOLDER = Holder()
"""


def test_a_users_objects_in_reference_cycles_are_still_finalized_at_exit(tmp_path: Path) -> None:
    # The session's objects are frozen out of the collector while it runs, and put back at its end: an
    # object of the user's that only the exit's last collection frees (here, a temporary file deleted on
    # close) must still be finalized, as in a pytest run without the plugin.
    files = write_synthetic(tmp_path, 24, node=synthetic_node(24))
    (tmp_path / "conftest.py").write_text(CYCLE_WITH_A_FILE, encoding="utf-8")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--nvlink-suite={files.suite}"]
    done = subprocess.run(
        [*command, f"--nvlink-replay={files.snapshot}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert list(tmp_path.glob("held-*")) == []


def test_a_bidirectional_figure_is_the_pairs_worst_whichever_order_recorded_it() -> None:
    from pytest_nvlink.model import Node, P2PMeasurement

    node = Node(source="evidence", host="h")
    one_way = P2PMeasurement(0, 1, "bidirectional", 700.0, "GB/s", source="a.txt")
    other_way = P2PMeasurement(1, 0, "bidirectional", 510.0, "GB/s", source="b.txt")
    also = P2PMeasurement(0, 1, "bidirectional", 700.0, "GB/s", source="c.txt")
    uni = P2PMeasurement(1, 0, "unidirectional", 370.0, "GB/s", source="a.txt")
    node.measurements.p2p = [other_way, one_way, uni, also]
    provider = RecordedMeasurements(node)
    forward, backward = provider.p2p(0, 1, "bidirectional"), provider.p2p(1, 0, "bidirectional")
    assert forward is backward and forward is not None and forward.value == 510.0
    # Recorded low index first are named first, then the other order, each as listed.
    assert forward.source == "b.txt (worst of 3 figures; also 700 GB/s from a.txt; 700 GB/s from c.txt)"
    assert provider.p2p(1, 0, "unidirectional") is uni and provider.p2p(0, 1, "unidirectional") is None
    assert provider.p2p(0, 2, "latency") is None
    assert other_way.source == "b.txt"  # the node's own record is left as it was read


@pytest.mark.parametrize("named_first", [False, True])
def test_the_comparison_figure_has_the_named_figures_numbers(named_first: bool) -> None:
    """p2p_for_comparison gives the worst figure as recorded; p2p names it with the others, when asked."""
    from pytest_nvlink.model import Node, P2PMeasurement

    node = Node(source="evidence", host="h")
    high_first = P2PMeasurement(1, 0, "bidirectional", 700.0, "GB/s", source="a.txt", nvlink_bytes=9)
    low_first = P2PMeasurement(0, 1, "bidirectional", 700.0, "GB/s", source="b.txt", nvlink_bytes=8)
    worse = P2PMeasurement(0, 2, "latency", 3.5, "us", source="c.txt")
    better = P2PMeasurement(0, 2, "latency", 2.5, "us", source="d.txt")
    node.measurements.p2p = [high_first, low_first, better, worse]
    provider = RecordedMeasurements(node)
    if named_first:
        named = provider.p2p(1, 0, "bidirectional")
    compared = provider.p2p_for_comparison(1, 0, "bidirectional")
    named = provider.p2p(0, 1, "bidirectional")
    assert compared is not None and named is not None
    # Of equal figures the one recorded low index first is the worst, as worst_figure() picks it.
    assert dataclasses.replace(compared, source=None) == dataclasses.replace(named, source=None)
    assert compared.nvlink_bytes == 8 and named.source == "b.txt (worst of 2 figures; also 700 GB/s from a.txt)"
    assert compared is (named if named_first else low_first)
    assert provider.p2p(0, 2, "latency") == dataclasses.replace(
        worse, source="c.txt (worst of 2 figures; also 2.5 us from d.txt)"
    )
    assert provider.p2p_for_comparison(0, 2, "latency") == provider.p2p(0, 2, "latency")
    assert provider.p2p_for_comparison(2, 0, "latency") is None


def test_the_worst_of_several_figures_is_a_copy_of_its_own_class() -> None:
    from pytest_nvlink.model import P2PMeasurement
    from pytest_nvlink.model.figures import worst_figure

    @dataclasses.dataclass(slots=True)
    class Annotated(P2PMeasurement):
        note: str = "kept"

    slow = Annotated(0, 1, "unidirectional", 40.0, "GB/s", conditions={"size_mib": "256"}, source="b.txt")
    fast = P2PMeasurement(0, 1, "unidirectional", 370.0, "GB/s", source="a.txt")
    for worst in (worst_figure([fast, slow]), worst_figure([slow, fast])):
        assert type(worst) is Annotated and worst is not slow and worst.note == "kept"
        assert worst.source == "b.txt (worst of 2 figures; also 370 GB/s from a.txt)"
        assert dataclasses.replace(worst, source="b.txt") == slow
    plain = worst_figure([P2PMeasurement(0, 1, "unidirectional", 30.0, "GB/s", nvlink_bytes=7), fast])
    assert type(plain) is P2PMeasurement and plain.nvlink_bytes == 7 and plain.value == 30.0


class _RunWatcher:
    def __init__(self) -> None:
        self.runs: list[weakref.ref[object]] = []

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from pytest_nvlink.plugin import kit  # the module of this run, however pytester imported it

        run = kit.run_of(session.config)
        assert run is not None
        self.runs.append(weakref.ref(run))


def test_the_run_is_let_go_when_its_session_ends(pytester: pytest.Pytester, tmp_path: Path) -> None:
    # pluggy keeps every registered plugin object as long as its plugin manager: holding the run (and its
    # node, ~400,000 objects at 72 GPUs) there would keep it for the process's life and for its exit to walk.
    watcher = _RunWatcher()
    json_file = tmp_path / "results.json"
    result = pytester.runpytest_inprocess(*_replay_24(tmp_path), f"--nvlink-json={json_file}", plugins=[watcher])
    assert result.ret == 0 and watcher.runs
    gc.collect()
    assert watcher.runs[0]() is None
