"""The progress line's estimate of the time left: the rate of trials so far applied to
the trials left, no line before the first batch, never more than what is left of a
time budget, and none once the budget of trials is spent. The clock is injected."""
from __future__ import annotations

import io
from collections import Counter
from types import SimpleNamespace

import pytest

from autosched.cli.progress import ProgressBar, duration


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _states(gflops=12.5, failures=2):
    return [SimpleNamespace(best_gflops=gflops, failures=Counter(build_error=failures))]


def _bar(clock, stream=None, **kw):
    return ProgressBar(stream=stream or io.StringIO(), width=8, clock=clock, **kw)


@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (0.4, "0s"), (41.2, "41s"), (59.6, "1m00s"), (80, "1m20s"),
    (3599.4, "59m59s"), (3600, "1h00m"), (7530, "2h05m"),
])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert duration(seconds) == text


def test_no_line_before_the_first_batch_then_the_rate_so_far():
    clock = Clock()
    bar = _bar(clock)
    bar.on_start(_states(0.0, 0), 64)
    clock.now += 41
    bar.on_batch(_states(), 16, 64)   # 16 trials in 41 s: 48 more take 123 s
    clock.now += 41
    bar.on_batch(_states(), 32, 64)   # 32 in 82 s: 32 more take 82 s
    assert bar.stream.getvalue().splitlines() == [
        "[##......] 16/64 trials | best 12.5 GFLOP/s | failures 2 | 41s, ~2m03s left",
        "[####....] 32/64 trials | best 12.5 GFLOP/s | failures 2 | 1m22s, ~1m22s left",
    ]


def test_the_last_batch_shows_the_time_spent_only():
    clock = Clock()
    bar = _bar(clock)
    bar.on_start(_states(), 8)
    clock.now += 30
    bar.on_batch(_states(), 8, 8)
    assert bar.stream.getvalue().splitlines()[-1] == (
        "[########] 8/8 trials | best 12.5 GFLOP/s | failures 2 | 30s")


def test_a_time_budget_caps_the_estimate_and_counts_from_before_the_start():
    clock = Clock()
    bar = _bar(clock, time_budget_s=100)  # made when the run begins
    clock.now += 10                       # opening the database, the warm start
    bar.on_start(_states(), 64)
    clock.now += 20
    bar.on_batch(_states(), 16, 64)  # the rate says 60 s; 70 s of the budget are left
    clock.now += 50
    bar.on_batch(_states(), 32, 64)  # the rate says 70 s; 20 s are left
    clock.now += 30
    bar.on_batch(_states(), 48, 64)  # spent: no batch starts after this one
    assert bar.stream.getvalue().splitlines() == [
        "[##......] 16/64 trials | best 12.5 GFLOP/s | failures 2 | 20s, ~1m00s left",
        "[####....] 32/64 trials | best 12.5 GFLOP/s | failures 2 | 1m10s, "
        "~20s left (time budget)",
        "[######..] 48/64 trials | best 12.5 GFLOP/s | failures 2 | 1m40s, "
        "~0s left (time budget)",
    ]


def test_a_run_with_nothing_to_measure_shows_no_line():
    bar = _bar(Clock(), stream=Tty())
    bar.on_start(_states(), 0)
    bar.on_end(None)
    assert bar.stream.getvalue() == ""


def test_on_a_terminal_the_line_rewrites_itself_and_blanks_what_a_shorter_one_leaves():
    clock = Clock()
    bar = _bar(clock, stream=Tty())
    bar.on_start(_states(), 20)
    clock.now += 5
    bar.on_batch(_states(), 10, 20)
    clock.now += 1
    bar.on_batch(_states(), 20, 20)
    bar.on_end(None)
    first = "[####....] 10/20 trials | best 12.5 GFLOP/s | failures 2 | 5s, ~5s left"
    second = "[########] 20/20 trials | best 12.5 GFLOP/s | failures 2 | 6s"
    assert len(second) < len(first)
    assert bar.stream.getvalue() == f"\r{first}\r{second.ljust(len(first))}\n"
