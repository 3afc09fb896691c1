"""The evolutionary strategy and the task scheduler inside the real tuning loop, with
the synthetic measurer and space given to the loop instead of builds and runs."""
from __future__ import annotations

from autosched.components import make_strategy
from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.tuner import tune_tasks
from cost_model import XGBRanker


def test_tuning_loop_with_evolutionary_search(tmp_path, synthetic):
    model = XGBRanker(rounds=20)

    def strategies():  # a small, fast search; the run's strategies share one model
        return make_strategy("evolutionary", cost_model=model, population=16, generations=1)

    tasks = [synthetic.matmul_task(256, 256, 256), synthetic.matmul_task(128, 256, 64)]
    url = f"sqlite:///{tmp_path}/t.db"
    config = TuneConfig(trials=32, batch_size=8, db_url=url, strategy="evolutionary",
                        work_dir=str(tmp_path))
    measurer = synthetic.SyntheticMeasurer()
    result = tune_tasks(tasks, config, measurer=measurer, space_factory=synthetic.make_space,
                        strategy_factory=strategies)
    assert result.trials == 32 and len(measurer.measured) == 32
    assert all(len(s.history) >= 1 for s in result.tasks)
    assert model.summary["tasks"] == 2  # both tasks taught the shared model
    db = open_database(url)
    try:
        for task in tasks:
            keys = [r.candidate_key for r in db.records(task_key=task.key)]
            assert len(keys) == len(set(keys))  # nothing measured twice
        assert sum(len(db.records(task_key=t.key)) for t in tasks) == 32
    finally:
        db.close()
    # a second run continues from the database and still never repeats a candidate
    again = synthetic.SyntheticMeasurer()
    result = tune_tasks(tasks, config, measurer=again, space_factory=synthetic.make_space,
                        strategy_factory=strategies)
    assert result.trials == 32 and not set(again.measured) & set(measurer.measured)
    db = open_database(url)
    try:
        for task in tasks:
            keys = [r.candidate_key for r in db.records(task_key=task.key)]
            assert len(keys) == len(set(keys))
        assert sum(len(db.records(task_key=t.key)) for t in tasks) == 64
    finally:
        db.close()
