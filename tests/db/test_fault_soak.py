"""The short fault soak (tests/support/soak.py; bench/fault_soak.py is the long one):
4 tuners on one SQLite file and 4 on one PostgreSQL database, all from one working
directory, with tuners SIGKILLed, the server restarted and the work dir's filesystem
filled once. After the reruns every task has exactly its trials, nothing is recorded
twice, no failure is recorded that a healthy machine does not reproduce, both databases
pass their integrity checks and every task exports."""
from __future__ import annotations

import os
import random

import pytest
from support.pgserver import PgServer, PgUnavailable
from support.soak import Job, Soak, small_filesystem

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

TRIALS = 6
SHAPES = [("M=24", "N=32", "K=16"), ("M=32", "N=24", "K=16"), ("M=16", "N=32", "K=24"),
          ("M=32", "N=16", "K=24")]


@pytest.fixture
def own_server():
    """A server of this test's own: the soak restarts it."""
    try:
        server = PgServer(fsync=False).start()
    except PgUnavailable as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI needs PostgreSQL: {e}")
        pytest.skip(str(e))
    try:
        yield server
    finally:
        server.stop()


def test_tuners_survive_kills_a_server_restart_and_a_full_disk(tmp_path, own_server):
    if os.geteuid() != 0:
        pytest.skip("filling a filesystem needs a tmpfs mount (root)")
    sqlite = f"sqlite:///{tmp_path}/shared.db"  # outside the filled work dir
    pg = own_server.url(dbname=own_server.create_database())
    jobs = [Job(url, shape, TRIALS) for url in (sqlite, pg) for shape in SHAPES]
    cwd = tmp_path / "team"
    with small_filesystem(cwd / "logs", megabytes=96) as logs:
        soak = Soak(jobs, cwd, random.Random(3), kills=3, pg=own_server, fill_dir=logs)
        soak.run()
        figures = soak.verify(tmp_path / "exports")
    assert (figures.kills, figures.restarts, figures.fills) == (3, 1, 1), figures
    assert figures.bad_exits == [], figures.bad_exits
    assert figures.found == figures.expected == len(jobs) * TRIALS, figures
    assert figures.duplicates == 0 and figures.poisoned == 0, figures
    assert figures.integrity == {"sqlite": "ok", "postgresql": "ok"}, figures
    assert figures.exported == len(jobs), figures
