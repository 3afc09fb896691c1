"""`TuneConfig.time_budget_s` / `--time-budget`: once the budget is spent the loop starts
no batch, keeps what it recorded and says so; and `--build-workers`. The loop's clock is
injected (each batch "takes" ten seconds), and the measurements are the tiny matmul
space's replayed log (tests/data/tiny_matmul.jsonl), so counts are exact."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import tiny_space

from autosched.components import make_strategy
from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.errors import UserError
from autosched.measure import MeasureSettings
from autosched.measure.settings import usable_cores
from autosched.measure.simulated import SimulatedMeasurer
from autosched.tuner import Callback, tune_tasks

LOG = str(Path(__file__).resolve().parents[2] / tiny_space.LOG)
BATCH_SECONDS = 10.0


class TenSecondBatches(Callback):
    """The clock of the run: it moves only when a batch ends, by BATCH_SECONDS."""

    def __init__(self):
        self.now = 1000.0
        self.batches = 0

    def clock(self) -> float:
        return self.now

    def on_batch(self, states, done, budget) -> None:
        self.batches += 1
        self.now += BATCH_SECONDS


def _tune(tmp_path, tiny_task, budget_s, trials=64):
    config = TuneConfig(trials=trials, batch_size=8, seed=0, work_dir=str(tmp_path),
                        db_url=f"sqlite:///{tmp_path}/t.db", time_budget_s=budget_s)
    time = TenSecondBatches()
    result = tune_tasks([tiny_task], config, [time], measurer=SimulatedMeasurer.from_log(LOG),
                        space_factory=tiny_space.make_space,
                        strategy_factory=lambda: make_strategy("random"), clock=time.clock)
    with open_database(config.database_url) as db:
        records = db.records(task_key=tiny_task.key)
    return result, time, records


def test_no_batch_starts_once_the_budget_is_spent(tmp_path, tiny_task):
    # batches start at 0, 10 and 20 s; at 30 s the 25 s budget is spent
    result, time, records = _tune(tmp_path, tiny_task, 25)
    assert time.batches == 3 and result.trials == 24 and len(records) == 24
    assert result.stopped == "time budget of 25 s spent after 24 of 64 trials"
    assert result.out_of_time
    assert len({r.candidate_key for r in records}) == 24  # committed, all kept
    assert result.tasks[0].best_latency == min(r.latency for r in records if r.ok)


def test_a_budget_spent_exactly_at_a_batch_boundary_stops_there(tmp_path, tiny_task):
    result, time, _ = _tune(tmp_path, tiny_task, 30)
    assert time.batches == 3 and result.trials == 24 and result.out_of_time


def test_a_budget_the_run_stays_within_changes_nothing(tmp_path, tiny_task):
    result, time, records = _tune(tmp_path, tiny_task, 1000)
    assert time.batches == 8 and result.trials == len(records) == 64
    assert result.stopped is None and not result.out_of_time
    unlimited, _, _ = _tune(tmp_path / "none", tiny_task, None)
    assert unlimited.trials == 64 and unlimited.stopped is None


@pytest.mark.parametrize("kw, message", [
    (dict(time_budget_s=0), "--time-budget must be > 0 seconds, got 0"),
    (dict(time_budget_s=-5.5), "--time-budget must be > 0 seconds, got -5.5"),
    (dict(measure=MeasureSettings(build_workers=0)), "--build-workers must be >= 1, got 0"),
])
def test_bad_budgets_and_worker_counts_are_user_errors(kw, message):
    with pytest.raises(UserError, match=message):
        TuneConfig(**kw)


def test_build_workers_default_to_the_cpus_this_process_may_use():
    assert MeasureSettings().build_workers == usable_cores() == len(os.sched_getaffinity(0))


def test_the_cli_says_when_the_time_budget_ended_the_run(cli, tmp_path, examples_dir):
    # a budget spent before the first batch: nothing is built, and the run ends normally
    out = cli("tune", str(examples_dir / "matmul.py"), "--arg", "M=16", "--arg", "N=16",
              "--arg", "K=16", "--trials", "4", "--time-budget", "1e-9",
              "--work-dir", str(tmp_path / "logs"), "--strategy", "random", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert ("autosched: time budget of 1e-09 s spent after 0 of 4 trials; the records so "
            "far are saved, rerun to continue") in out.stdout.splitlines()


@pytest.mark.parametrize("option, value, message", [
    ("--build-workers", "0", "--build-workers must be >= 1, got 0"),
    ("--time-budget", "-1", "--time-budget must be > 0 seconds, got -1"),
])
def test_bad_options_are_one_line_and_exit_2(cli, tmp_path, examples_dir, option, value,
                                            message):
    out = cli("tune", str(examples_dir / "matmul.py"), option, value,
              "--work-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"autosched: error: {message}"]


def test_the_help_shows_the_build_workers_default(cli):
    out = cli("tune", "--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert f"(default: {usable_cores()}, the CPUs this process may use)" in text
    assert "--time-budget S" in text
