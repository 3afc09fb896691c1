"""`--total-trials N`: a run stops once the database holds N records of its tasks on this
target and machine, earlier runs' included, so a run stopped early (by --time-budget or a
small --trials) and rerun with --total-trials ends with exactly N records; with --trials
both limits apply. The loop's counts are exact on the tiny matmul space's replayed log
(tests/data/tiny_matmul.jsonl, as in tests/core/test_time_budget.py); the command line is
checked on a real 32^3 matmul."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import tiny_space
from support.bundles import measure

from autosched.cli.main import build_parser
from autosched.cli.tune import tune_config
from autosched.components import make_strategy
from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.errors import UserError
from autosched.measure.simulated import SimulatedMeasurer
from autosched.trial_budget import records_held, run_budget, total_line
from autosched.tuner import Callback, tune_tasks

LOG = str(Path(__file__).resolve().parents[2] / tiny_space.LOG)


class TenSecondBatches(Callback):
    """The run's clock: it moves only when a batch ends, by ten seconds."""

    def __init__(self):
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def on_batch(self, states, done, budget) -> None:
        self.now += 10.0


def _tune(tmp_path, task, **kw):
    """One run on the replayed log into tmp_path's database; (result, record count)."""
    config = TuneConfig(**{"trials": 64, "batch_size": 8, "seed": 0, "work_dir": str(tmp_path),
                           "db_url": f"sqlite:///{tmp_path}/t.db", **kw})
    time = TenSecondBatches()
    result = tune_tasks([task], config, [time], measurer=SimulatedMeasurer.from_log(LOG),
                        space_factory=tiny_space.make_space,
                        strategy_factory=lambda: make_strategy("random"), clock=time.clock)
    with open_database(config.database_url) as db:
        return result, len(db.records(task_key=task.key))


def test_a_run_stopped_by_its_time_budget_resumes_to_exactly_the_total(tmp_path, tiny_task):
    first, held = _tune(tmp_path, tiny_task, time_budget_s=25)  # three batches of 8
    assert first.out_of_time and first.trials == held == 24
    again, held = _tune(tmp_path, tiny_task, total_trials=37)
    assert again.stopped is None and again.trials == 13 and held == 37
    assert records_held(again.tasks) == 37
    last, held = _tune(tmp_path, tiny_task, total_trials=37)  # reached: nothing to do
    assert last.trials == 0 and held == 37


def test_a_small_trials_run_then_the_total_counts_it(tmp_path, tiny_task):
    assert _tune(tmp_path, tiny_task, trials=5)[1] == 5
    result, held = _tune(tmp_path, tiny_task, trials=0, total_trials=20)
    assert result.trials == 0 and held == 5  # --trials 0 is a limit too
    result, held = _tune(tmp_path, tiny_task, total_trials=20)
    assert result.trials == 15 and held == 20


def test_with_both_limits_the_smaller_one_ends_the_run(tmp_path, tiny_task):
    result, held = _tune(tmp_path, tiny_task, trials=8, total_trials=40)
    assert result.trials == held == 8
    result, held = _tune(tmp_path, tiny_task, trials=64, total_trials=10)
    assert result.trials == 2 and held == 10


def _state(measured, retry=()):
    return SimpleNamespace(measured=set(measured),
                           retry=[SimpleNamespace(key=k) for k in retry])


def test_the_budget_leaves_room_for_failures_measured_again():
    # "c" and "d" failed and are up for --retry-failures: their new results replace their
    # records, so they are measured within the total without adding to it
    states = [_state({"a", "b"}, retry=["c", "d"]), _state({"e"})]
    assert records_held(states) == 5
    assert run_budget(64, None, states) == 64
    assert run_budget(64, 5, states) == 2    # the two retries, nothing new
    assert run_budget(64, 7, states) == 4
    assert run_budget(3, 7, states) == 3     # what the measurer grants (a bundle's rest)
    assert run_budget(64, 2, states) == 0


def test_the_line_says_where_the_run_stands():
    assert total_line(20, 20) == ("--total-trials 20 reached: the database holds 20 "
                                  "records of these tasks on this target and machine")
    assert total_line(20, 12) == ("the database holds 12 of the 20 records --total-trials "
                                  "asks for, of these tasks on this target and machine")


@pytest.mark.parametrize("value", [0, -3])
def test_a_total_below_one_is_refused(value):
    with pytest.raises(UserError, match=f"^--total-trials must be >= 1, got {value}$"):
        TuneConfig(total_trials=value)


@pytest.mark.parametrize("options, trials, total", [
    ([], 64, None), (["--total-trials", "500"], 500, 500),
    (["--total-trials", "500", "--trials", "20"], 20, 500), (["--trials", "0"], 0, None),
])
def test_trials_default_to_64_or_with_only_a_total_to_that_total(options, trials, total):
    args = build_parser().parse_args(["tune", "op.py", *options])
    config = tune_config(args)
    assert (config.trials, config.total_trials) == (trials, total)


@pytest.mark.parametrize("value", ["0", "-3"])
def test_the_cli_refuses_a_total_below_one_in_one_line(cli_here, tmp_path, examples_dir,
                                                       value):
    out = cli_here("tune", str(examples_dir / "matmul.py"), "--total-trials", value,
                   "--work-dir", str(tmp_path / "w"), cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [f"autosched: error: --total-trials must be >= 1, "
                                       f"got {value}"]
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_the_cli_resumes_a_short_run_to_the_total(cli_here, tmp_path, examples_dir):
    base = ("tune", str(examples_dir / "matmul.py"), "--arg", "M=32", "--arg", "N=32",
            "--arg", "K=32", "--strategy", "random", "--batch-size", "2",
            "--min-repeat-ms", "1", "--build-workers", "1", "--work-dir", str(tmp_path / "w"))
    db_url = f"sqlite:///{tmp_path}/w/autosched.db"
    out = cli_here(*base, "--trials", "1", "--total-trials", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == (
        "autosched: the database holds 1 of the 2 records --total-trials asks for, of these "
        "tasks on this target and machine")
    out = cli_here(*base, "--total-trials", "2", cwd=tmp_path)  # --trials is not 64 then
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == (
        "autosched: --total-trials 2 reached: the database holds 2 records of these tasks "
        "on this target and machine")
    assert "] 1/1 trials | " in out.stderr
    with open_database(db_url) as db:
        assert len(db.records()) == 2


@pytest.mark.slow
def test_a_bundle_stops_building_rounds_once_the_database_holds_the_total(
        cli_here, tmp_path, examples_dir):
    directory = tmp_path / "b"
    tune = ("tune", str(examples_dir / "matmul.py"), "--arg", "M=32", "--arg", "N=32",
            "--arg", "K=32", "--strategy", "random", "--batch-size", "4", "--trials", "8",
            "--total-trials", "2", "--min-repeat-ms", "1", "--build-workers", "1",
            "--runner", f"bundle:{directory}", "--work-dir", str(tmp_path / "w"))
    out = cli_here(*tune, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    manifest = json.loads((directory / "manifest.json").read_text())
    assert (manifest["round"], manifest["spent"], len(manifest["candidates"])) == (1, 2, 2)
    assert out.stdout.splitlines()[-2] == (
        "autosched: the database holds 0 of the 2 records --total-trials asks for, of these "
        "tasks on this target and machine")
    assert out.stdout.splitlines()[-1].startswith(f"autosched: round 1 written to {directory}")

    assert measure(directory, tmp_path).returncode == 0
    out = cli_here(*tune, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == (
        "autosched: --total-trials 2 reached: the database holds 2 records of these tasks "
        "on this target and machine")
    assert json.loads((directory / "manifest.json").read_text())["round"] == 1  # no round 2
    with open_database(f"sqlite:///{tmp_path}/w/autosched.db") as db:
        assert len(db.records()) == 2
