"""The evolutionary strategy and the task scheduler inside the real tuning loop, with
the replaying measurer of the synthetic test device instead of builds and runs."""
from __future__ import annotations

from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.tuner import tune_tasks


def test_tuning_loop_with_evolutionary_search(tmp_path, synthetic, monkeypatch):
    measurers = []

    def make_measurer(*args, **kwargs):
        measurers.append(synthetic.ReplayingMeasurer())
        return measurers[-1]

    monkeypatch.setattr("search_space.cpu.RULES", synthetic.TilingRules())
    monkeypatch.setattr("autosched.measure.factory.make_measurer", make_measurer)
    monkeypatch.setattr("autosched.tuner._strategy_options",  # a small, fast search
                        lambda config: {"seed": config.seed, "population": 16, "generations": 1})
    tasks = [synthetic.matmul_task(256, 256, 256), synthetic.matmul_task(128, 256, 64)]
    url = f"sqlite:///{tmp_path}/t.db"
    config = TuneConfig(trials=32, batch_size=8, db_url=url, strategy="evolutionary",
                        work_dir=str(tmp_path))
    result = tune_tasks(tasks, config)
    assert result.trials == 32 and len(measurers[0].measured) == 32
    assert all(len(s.history) >= 1 for s in result.tasks)
    db = open_database(url)
    try:
        for task in tasks:
            keys = [r.candidate_key for r in db.records(task_key=task.key)]
            assert len(keys) == len(set(keys))  # nothing measured twice
        assert sum(len(db.records(task_key=t.key)) for t in tasks) == 32
    finally:
        db.close()
    # a second run continues from the database and still never repeats a candidate
    result = tune_tasks(tasks, config)
    db = open_database(url)
    try:
        for task in tasks:
            keys = [r.candidate_key for r in db.records(task_key=task.key)]
            assert len(keys) == len(set(keys))
        assert sum(len(db.records(task_key=t.key)) for t in tasks) == 64
    finally:
        db.close()
