"""The rank's own step watch: publishes each step, and ends the rank when a step outlives its deadline."""

from __future__ import annotations

import threading
import time

import pytest

from pytest_nvlink.measure import step_watch
from pytest_nvlink.measure.launched_progress import RankProgress
from pytest_nvlink.measure.step_watch import HUNG_EXIT, Step, StepWatch


class Recorder:
    def __init__(self) -> None:
        self.published: list[str] = []
        self.hung: list[Step] = []
        self.exited = threading.Event()
        self.code: int | None = None

    def exit(self, code: int) -> None:
        self.code = code
        self.exited.set()


def _watch(recorder: Recorder, on_hung: step_watch.OnHung | None = None) -> StepWatch:
    return StepWatch(
        lambda step: recorder.published.append(step.text),
        on_hung or recorder.hung.append,
        exit_process=recorder.exit,
    )


def test_a_step_past_its_deadline_is_reported_and_ends_the_rank() -> None:
    recorder = Recorder()
    watch = _watch(recorder)
    watch.begin(Step("all_reduce at 1 MiB", "warmup", 2, 30.0))
    watch.settle()
    hung = Step("all_reduce at 1 MiB", "data check", 3, 0.2)
    started = time.monotonic()
    watch.begin(hung)
    assert recorder.exited.wait(5.0)
    assert time.monotonic() - started >= 0.2
    assert recorder.code == HUNG_EXIT
    assert recorder.hung == [hung]
    assert recorder.published[0] == "all_reduce at 1 MiB (warmup)"


def test_steps_that_end_in_time_and_a_closed_watch_never_fire() -> None:
    recorder = Recorder()
    watch = _watch(recorder)
    deadline = watch.deadline_in(0.3)
    for what in ("warmup", "timed iterations"):  # one deadline shared by the steps of an op
        watch.begin(Step("broadcast at 1 MiB", what, 1, 0.3), deadline)
    watch.begin(Step("destroying the process group", "", 9, 0.3))
    watch.close()
    assert not recorder.exited.wait(0.6)
    assert recorder.hung == []


def test_a_report_that_hangs_too_is_cut_short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_watch, "REPORT_S", 0.2)
    recorder = Recorder()

    def never_returns(step: Step) -> None:
        threading.Event().wait()

    watch = _watch(recorder, on_hung=never_returns)
    watch.begin(Step("process-group init", "", 0, 0.05))
    assert recorder.exited.wait(5.0)
    assert recorder.code == HUNG_EXIT


def test_an_inactive_watch_only_remembers_the_step() -> None:
    recorder = Recorder()
    watch = StepWatch(
        lambda step: recorder.published.append(step.text),
        recorder.hung.append,
        active=False,
        exit_process=recorder.exit,
    )
    watch.begin(Step("process-group init", "", 0, 0.0))
    watch.settle(0.1)
    assert not recorder.exited.wait(0.2)
    assert watch.step is not None and watch.step.text == "process-group init"
    assert recorder.published == []


def test_hung_text_names_the_rank_the_step_and_the_limit() -> None:
    assert step_watch.hung_text("rank 1 (b, GPU GPU-x (cuda:1))", "all_gather at 1 MiB (data check)", 3.0) == (
        "rank 1 (b, GPU GPU-x (cuda:1)) hung in all_gather at 1 MiB (data check) for over 3 s "
        f"(its step watchdog ended it, exit code {HUNG_EXIT})"
    )


class FakeStore:
    """The rendezvous store's set/check/get, in a dict."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        return all(key in self.values for key in keys)

    def get(self, key: str) -> bytes:
        return self.values[key]


def test_rank0_names_the_dead_then_the_hung_from_the_one_behind() -> None:
    store = FakeStore()
    ranks = [RankProgress(None, rank, 4) for rank in range(4)]
    for progress in ranks:
        progress.store = store  # no heartbeat threads: the test says who is alive
    ranks[1].mark("all_gather at 1 MiB (timed iterations)")
    store.set("pytest-nvlink/alive/1", "7")  # rank 1 died: its heartbeat stays put
    ranks[2].hung(Step("all_gather at 1 MiB", "data check", 10, 3.0))
    ranks[3].hung(Step("all_gather at 1 MiB", "warmup", 9, 3.0))

    def later(seconds: float) -> None:
        store.set("pytest-nvlink/alive/2", "2")
        store.set("pytest-nvlink/alive/3", "2")

    text = ranks[0].culprits(lambda rank: f"rank {rank}", later, own=Step("all_gather at 1 MiB", "barrier", 11, 3.0))
    ended = f"(its step watchdog ended it, exit code {HUNG_EXIT})"
    assert text == (
        "rank 1 stopped answering (died or froze; its last step: all_gather at 1 MiB (timed iterations)); "
        f"rank 3 hung in all_gather at 1 MiB (warmup) for over 3 s {ended}; "
        f"rank 2 hung in all_gather at 1 MiB (data check) for over 3 s {ended}; "
        f"rank 0 hung in all_gather at 1 MiB (barrier) for over 3 s {ended}"
    )
