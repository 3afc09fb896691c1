"""Search on real latencies without building anything: the tuning loop over the tiny
matmul space (tests/support/tiny_space.py) with the simulated measurer replaying the
committed log of every candidate's measurement (tests/data/tiny_matmul.jsonl)."""
from __future__ import annotations

from pathlib import Path

import pytest
from support import tiny_space

from autosched.components import make_strategy
from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.db.jsonl import read_records
from autosched.measure.simulated import NotInLog, SimulatedMeasurer
from autosched.search import RandomSearch
from autosched.tuner import tune_tasks
from cost_model import XGBRanker

LOG = str(Path(__file__).resolve().parents[2] / tiny_space.LOG)


@pytest.fixture(scope="module")
def logged():
    """candidate key -> logged latency."""
    return {r.candidate_key: r.latency for r in read_records(LOG)}


def evolutionary(seed):
    return lambda: make_strategy("evolutionary", cost_model=XGBRanker(seed=seed),
                                 population=32, generations=2)


def tune(tmp_path, tiny_task, name, trials, strategies, seed=0, measurer=None):
    config = TuneConfig(trials=trials, batch_size=8, seed=seed, work_dir=str(tmp_path),
                        db_url=f"sqlite:///{tmp_path}/{name}.db")
    measurer = measurer or SimulatedMeasurer.from_log(LOG)
    result = tune_tasks([tiny_task], config, measurer=measurer,
                        space_factory=tiny_space.make_space, strategy_factory=strategies)
    return result, config.database_url


def test_the_loop_records_exactly_the_logged_measurements(tmp_path, tiny_task, logged):
    result, url = tune(tmp_path, tiny_task, "evo", 32, evolutionary(0))
    state = result.tasks[0]
    assert result.trials == state.trials == 32
    with open_database(url) as db:
        records = db.records(task_key=tiny_task.key)
    assert len(records) == len({r.candidate_key for r in records}) == 32
    assert all(r.latency == logged[r.candidate_key] for r in records)
    assert state.best_latency == min(r.latency for r in records)
    assert records[0].candidate == {"sketch": "default", "decisions": {}}  # the floor first


def test_the_learned_strategy_gets_near_the_best_of_the_space_on_every_seed(
        tmp_path, tiny_task, logged):
    """24 of 197 trials, 8 seeds: evolution guided by the cost model ends within 7% of the
    space's fastest kernel every time; uniform sampling does not."""
    best = min(logged.values())

    def ratios(name, make):
        return [tune(tmp_path, tiny_task, f"{name}{seed}", 24, make(seed), seed)[0]
                .tasks[0].best_latency / best for seed in range(8)]

    evo = ratios("evo", evolutionary)
    rnd = ratios("rnd", lambda seed: RandomSearch)
    assert max(evo) <= 1.07 < max(rnd), (evo, rnd)
    assert sum(r <= 1.07 for r in rnd) < len(rnd)


def test_a_candidate_the_log_lacks_stops_the_run_and_records_nothing_false(tmp_path,
                                                                            tiny_task):
    records = read_records(LOG)
    partial = SimulatedMeasurer(records[:40])  # the default and 39 others
    with pytest.raises(NotInLog):
        tune(tmp_path, tiny_task, "partial", 64, lambda: RandomSearch(), measurer=partial)
    with open_database(f"sqlite:///{tmp_path}/partial.db") as db:
        kept = db.records(task_key=tiny_task.key)
    assert kept and all(r.ok for r in kept)  # a miss is never written down as a failure
    assert {r.candidate_key for r in kept} <= {r.candidate_key for r in records[:40]}
    assert len(kept) == len(partial.measured)
