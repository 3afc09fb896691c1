"""A lost PostgreSQL connection is the machine's fault, never a candidate's: the tuning
loop reconnects when the server comes back and goes on, and a server that stays down
is one InfrastructureError line with nothing half-written."""
from __future__ import annotations

import threading

import pytest
from support import faults
from support.pgserver import SUPERUSER_PASSWORD
from support.records import make_rec

from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.errors import InfrastructureError
from autosched.measure import MeasureSettings
from autosched.tuner import Callback, tune_tasks

FAST = MeasureSettings(number=2, repeat=3, min_repeat_ms=0, build_timeout=60,
                       run_timeout=20, build_workers=2)


class RestartServerOnce(Callback):
    """After the first batch, the server goes down and comes back `after` seconds later."""

    def __init__(self, server, after: float):
        self.server, self.after, self.timer = server, after, None

    def on_batch(self, states, done, budget) -> None:
        if self.timer is None:
            self.server.halt()
            self.timer = threading.Timer(self.after, self.server.resume)
            self.timer.start()


@pytest.mark.postgres
@pytest.mark.slow
def test_a_server_restart_mid_run_is_retried_and_the_run_goes_on(pg_server, tmp_path,
                                                                examples_dir, caplog):
    from autosched.workload import load_tasks

    task = load_tasks(str(examples_dir / "matmul.py"), None, ["M=64", "N=64", "K=64"])[0]
    url = pg_server.url(dbname=pg_server.create_database())
    config = TuneConfig(trials=4, db_url=url, work_dir=str(tmp_path / "logs"), batch_size=2,
                        strategy="random", transfer=False, measure=FAST)
    restart = RestartServerOnce(pg_server, after=3.0)
    measurer = faults.local_measurer(FAST, config.work_dir)
    try:
        result = tune_tasks([task], config, [restart], measurer=measurer)
    finally:
        measurer.close()
        restart.timer.join()
    assert result.stopped is None and result.trials == 4
    assert "connection lost" in caplog.text  # the write did meet the fault, and retried
    with open_database(url) as db:
        records = db.records()
    assert len(records) == 4 and len({r.candidate_key for r in records}) == 4
    assert all(r.ok for r in records)
    assert [r.candidate_key for r in records] == sum(measurer.asked, [])


@pytest.mark.postgres
def test_a_server_that_stays_down_is_one_infrastructure_line(pg_server):
    from autosched.db.postgres import PostgresDatabase

    url = pg_server.url(dbname=pg_server.create_database())
    db = PostgresDatabase(url, reconnect_timeout=2.0, connect_timeout=2)
    try:
        db.add_records([make_rec(cand=1)])
        pg_server.halt()
        try:
            with pytest.raises(InfrastructureError) as e:
                db.add_records([make_rec(cand=2)])
        finally:
            pg_server.resume()
        text = str(e.value)
        assert "\n" not in text and SUPERUSER_PASSWORD not in text
        assert text.startswith("lost the connection to the database server ")
        assert text.endswith("could not reconnect within 2 s; check that the server is "
                             "running and reachable, then rerun: committed records are kept")
        assert db.count() == 1  # the server is back: nothing of the failed write landed
    finally:
        db.close()
