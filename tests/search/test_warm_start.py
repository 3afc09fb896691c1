"""Transfer without --model: a run's cost model learns from the database's records of
other shapes of the same workload before its first batch (synthetic measurer, no builds)."""
from __future__ import annotations

import sqlite3

import pytest

from autosched.components import make_strategy
from autosched.config import RecordBudget, TuneConfig
from autosched.db import open_database
from autosched.tuner import tune_tasks
from cost_model.xgb_ranker import TRANSFER_PARAMS, TRANSFER_ROUNDS, XGBRanker


@pytest.fixture
def loop(tmp_path, synthetic):
    """tune(tasks, **config) with the synthetic device; returns (result, shared model)."""
    url = f"sqlite:///{tmp_path}/t.db"

    def tune(tasks, **overrides):
        config = TuneConfig(**{"trials": 16, "batch_size": 8, "db_url": url,
                               "work_dir": str(tmp_path), **overrides})
        model = XGBRanker(rounds=20, seed=config.seed)
        result = tune_tasks(
            tasks, config, measurer=synthetic.SyntheticMeasurer(),
            space_factory=synthetic.make_space,
            strategy_factory=lambda: make_strategy("evolutionary", cost_model=model,
                                                   population=16, generations=1))
        return result, model

    tune.url = url
    return tune


def test_a_new_shape_starts_from_the_records_of_the_others(loop, synthetic):
    loop([synthetic.matmul_task(256, 256, 256)], trials=24)
    loop([synthetic.matmul_task(128, 256, 64)], trials=16)
    result, model = loop([synthetic.matmul_task(64, 128, 256)], trials=8)
    warm = result.warm_start
    assert warm.records == 24 + 16
    assert sorted(warm.tasks) == ["matmul(M=128,N=256,K=64)", "matmul(M=256,N=256,K=256)"]
    assert "40 records of 2 other shape(s)" in warm.describe()
    # the others' records stay training groups beside the run's own 8 measurements,
    # learned with the settings for many tasks' data, not frozen underneath
    assert model.summary["tasks"] == 3 and model.summary["rows"] == 24 + 16 + 8
    assert not model.boosts_saved_model and model.rounds == TRANSFER_ROUNDS
    assert model.boosted_rounds == TRANSFER_ROUNDS
    assert all(model.params[k] == v for k, v in TRANSFER_PARAMS.items())


def test_the_record_budget_is_shared_evenly_by_the_other_shapes(loop, synthetic):
    for shape in ((256, 256, 256), (128, 256, 64), (64, 64, 128)):
        loop([synthetic.matmul_task(*shape)], trials=16)
    budget = RecordBudget(max_records=30, min_per_task=4)
    result, model = loop([synthetic.matmul_task(64, 128, 256)], trials=8,
                         transfer_records=budget)
    assert result.warm_start.records == 30 and len(result.warm_start.tasks) == 3  # 10 each
    budget = RecordBudget(max_records=30, min_per_task=12)  # 12, 12, then the 6 left
    result, model = loop([synthetic.matmul_task(32, 128, 256)], trials=8,
                         transfer_records=budget)
    assert result.warm_start.records == 30 and len(result.warm_start.tasks) == 3


def test_no_warm_start_from_other_workloads_the_tuned_task_or_when_disabled(loop, synthetic):
    first, model = loop([synthetic.matmul_task(256, 256, 256, name="other_matmul")])
    assert first.warm_start is None and model.summary["tasks"] == 1  # empty database
    again, _ = loop([synthetic.matmul_task(256, 256, 256, name="other_matmul")])
    assert again.warm_start is None                          # its own records: not "other"
    result, model = loop([synthetic.matmul_task(128, 128, 128)])
    assert result.warm_start is None and model.summary["tasks"] == 1  # other workload's
    loop([synthetic.matmul_task(64, 64, 64)])
    off, model = loop([synthetic.matmul_task(128, 64, 64)], transfer=False)
    assert off.warm_start is None and model.summary["tasks"] == 1


def test_records_of_another_space_version_are_not_learned_from(loop, synthetic):
    loop([synthetic.matmul_task(256, 256, 256)])
    path = loop.url[len("sqlite:///"):]
    with sqlite3.connect(path) as conn:  # as if written under an older search space
        conn.execute("UPDATE autosched_records SET space_version = 'old', "
                     "versions = json_set(versions, '$.space', 'old')")
    db = open_database(loop.url)
    try:
        assert {r.versions["space"] for r in db.records()} == {"old"}
    finally:
        db.close()
    result, model = loop([synthetic.matmul_task(128, 256, 64)])
    assert result.warm_start is None and model.summary["tasks"] == 1
