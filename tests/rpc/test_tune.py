"""The real tuning loop measuring through a real tracker and two real servers."""
from __future__ import annotations

import numpy as np

from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.measure.factory import make_measurer
from autosched.tuner import tune_tasks

TRIALS = 32
# failures a healthy farm may still record: the candidate's own, found before running it
BUILD_SIDE = ("build_error", "build_timeout", "invalid")


def _config(farm, key, farm_settings, tmp_path, **kw) -> TuneConfig:
    return TuneConfig(target="llvm", trials=TRIALS, db_url=f"sqlite:///{tmp_path}/tune.db",
                      runner=farm.url(key), work_dir=str(tmp_path / "work"), batch_size=16,
                      measure=farm_settings, **kw)


def _replay_matches_numpy(task, target, record) -> bool:
    """Rebuild a recorded candidate here and compare its output with numpy's A @ B."""
    import tvm
    from search_space import Candidate, generate_space

    mod = generate_space(task, target).apply(Candidate.from_json(record.candidate))
    exe = tvm.compile(mod, target=target.tvm())
    rng = np.random.default_rng(7)
    a, b = (rng.uniform(-1, 1, (64, 64)).astype("float32") for _ in range(2))
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.full((64, 64), np.nan, "float32"), dev)
    exe["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
    return np.allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_32_trials_through_two_servers_are_all_recorded_and_correct(
        farm, pool, farm_settings, matmul64, tmp_path):
    key, servers = pool
    config = _config(farm, key, farm_settings, tmp_path)
    with make_measurer(farm_settings, config.runner, config.work_dir) as measurer:
        result = tune_tasks([matmul64], config, measurer=measurer)
    runner = measurer.runner
    assert result.stopped is None
    assert result.trials == TRIALS
    with open_database(config.database_url) as db:
        records = db.records(task_key=matmul64.key)
    assert len(records) == TRIALS
    assert len({r.candidate_key for r in records}) == TRIALS
    ok = [r for r in records if r.ok]
    for r in records:
        assert r.ok or (r.result.error_kind in BUILD_SIDE and r.result.error_msg), r.result
    assert all(len(r.latencies) == farm_settings.repeat for r in (x.result for x in ok))
    assert runner.concurrency == 2
    assert runner.stats == {"measured": len(ok)}  # nothing lost, nothing retried
    assert sorted(runner.servers_used) == sorted(s.address for s in servers)  # both worked
    assert sum(runner.servers_used.values()) == len(ok) >= TRIALS // 2
    # the runner's check passed them; an independent rebuild agrees for a sample
    for record in ok[::4]:
        assert _replay_matches_numpy(matmul64, result.target, record), record.candidate
