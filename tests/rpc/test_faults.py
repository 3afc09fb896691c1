"""Servers dying under a tuning run: one of two (the run finishes, every trial is
accounted for once) and all of them (the run stops cleanly and a rerun resumes)."""
from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest

from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.measure import MeasureSettings
from autosched.measure.factory import make_measurer
from autosched.tuner import tune_tasks

TRIALS = 32
# failures a farm may record whatever its servers do: the candidate's own, found before
# running it; a lost server never shows in a record here
BUILD_SIDE = ("build_error", "build_timeout", "invalid")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Killer(threading.Thread):
    """Kills `victims` as soon as one of them starts a session, once `after` sessions
    have started on `counted` servers: mid-run and mid-session. `killed_at` is when."""

    def __init__(self, farm, victims, counted, after: int):
        super().__init__(daemon=True)
        self.farm, self.victims, self.counted, self.after = farm, victims, counted, after
        self.killed_at: float | None = None
        self.start()

    def run(self):
        def sessions(servers):
            return sum(s.sessions_started() for s in servers)

        _wait_for(lambda: sessions(self.counted) >= self.after, 600, f"{self.after} sessions")
        seen = sessions(self.victims)
        _wait_for(lambda: sessions(self.victims) > seen, 600, "a session on the victims")
        for v in self.victims:
            self.farm.kill(v)
        self.killed_at = time.monotonic()


def _records(url, task):
    with open_database(url) as db:
        return db.records(task_key=task.key)


@pytest.mark.slow
def test_killing_one_server_mid_run_loses_nothing(farm, key, farm_settings, matmul64, tmp_path):
    victim, survivor = farm.add_servers(key, 2)
    # every timing takes >= 0.3 s a repeat, so a session lasts long enough to be cut
    slow = dataclasses.replace(farm_settings, min_repeat_ms=300)
    config = TuneConfig(target="llvm", trials=TRIALS, db_url=f"sqlite:///{tmp_path}/t.db",
                        runner=farm.url(key), work_dir=str(tmp_path / "work"),
                        batch_size=16, measure=slow)
    killer = Killer(farm, [victim], [victim, survivor], after=6)
    with make_measurer(slow, config.runner, config.work_dir) as measurer:
        result = tune_tasks([matmul64], config, measurer=measurer)
    killer.join(timeout=5)
    assert killer.killed_at is not None
    assert result.stopped is None and result.trials == TRIALS
    records = _records(config.database_url, matmul64)
    assert len(records) == TRIALS
    assert len({r.candidate_key for r in records}) == TRIALS
    # the candidate cut off with its server was measured again on the survivor
    assert all(r.ok or r.result.error_kind in BUILD_SIDE for r in records)
    runner = measurer.runner
    assert runner.stats["lost"] == 1 and runner.stats["retried"] == 1
    assert runner.stats["measured"] == sum(r.ok for r in records)
    assert "crashed" not in runner.stats
    assert runner.lost_servers == {victim.address}
    assert runner.servers_used[survivor.address] > runner.servers_used[victim.address]
    assert farm.registered(key) == [survivor.address]


def _tune_cli(farm, key, tmp_path, trials, min_repeat_ms=MeasureSettings.min_repeat_ms):
    """`autosched tune` in its own process, as a user runs it."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=ROOT)
    args = [sys.executable, "-m", "autosched", "tune", "--min-repeat-ms", str(min_repeat_ms),
            os.path.join(ROOT, "examples", "matmul.py"), "--arg", "M=64", "--arg", "N=64",
            "--arg", "K=64", "--target", "llvm", "--trials", str(trials), "--batch-size", "16",
            "--db", f"sqlite:///{tmp_path}/t.db", "--work-dir", str(tmp_path / "work"),
            "--runner", farm.url(key), "--run-timeout", "8", "--build-timeout", "60"]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=str(tmp_path))


@pytest.mark.slow
def test_killing_every_server_stops_cleanly_and_a_rerun_resumes(farm, key, matmul64,
                                                                 tmp_path):
    servers = farm.add_servers(key, 2)
    url = f"sqlite:///{tmp_path}/t.db"
    # timing repeats of >= 0.3 s: the servers die in the middle of a session
    proc = _tune_cli(farm, key, tmp_path, TRIALS, min_repeat_ms=300)
    try:
        killer = Killer(farm, servers, servers, after=8)
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped_at = time.monotonic()
    assert killer.killed_at is not None
    assert proc.returncode == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("autosched:")]
    assert len(lines) == 1, err
    assert lines[0].startswith("autosched: stopped after ")
    assert f"no RPC server of key '{key}' is left at tracker {farm.address}" in lines[0]
    assert "the records so far are saved, rerun to continue" in lines[0]
    assert "Traceback" not in err
    assert stopped_at - killer.killed_at < 8.0  # within one session timeout (--run-timeout)
    first = _records(url, matmul64)
    assert 0 < len(first) < TRIALS
    assert len({r.candidate_key for r in first}) == len(first)
    done = int(lines[0].split("stopped after ")[1].split(" of ")[0])
    assert done == len(first)  # everything the run reported is committed

    farm.add_servers(key, 1)
    proc = _tune_cli(farm, key, tmp_path, TRIALS - len(first))
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    records = _records(url, matmul64)
    assert len(records) == TRIALS
    assert len({r.candidate_key for r in records}) == TRIALS
    assert {r.candidate_key for r in first} <= {r.candidate_key for r in records}
    assert all(r.ok or r.result.error_kind in BUILD_SIDE for r in records)
