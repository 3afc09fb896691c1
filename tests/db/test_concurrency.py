"""Several processes writing one database at once, and a writer killed mid-burst."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from support.records import make_rec

from autosched.db import open_database

TESTS = str(Path(__file__).resolve().parents[1])


def _spawn(url: str, worker: str, n: int, batch: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "support.db_writer", url, worker, str(n),
                             str(batch)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_four_processes_thousand_commits_each(db_url):
    """4 x 1000 single-record transactions, started together on a database that does
    not exist yet (so they also race to create the schema): exactly 4000 records."""
    procs = [_spawn(db_url, str(w), 1000, 1) for w in range(4)]
    results = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert "locked" not in err.lower() and "busy" not in err.lower(), err
        assert out.splitlines()[-1] == "done 1000"
    with open_database(db_url) as db:
        assert db.count() == 4000
        keys = {r.candidate_key for r in db.iter_records()}
        assert len(keys) == 4000
        if db_url.startswith("sqlite"):
            assert db.integrity_check() == "ok"


def test_overlapping_writers_under_serializable_isolation(db_url):
    """4 processes commit the same 200 candidates at once. On PostgreSQL the server
    defaults to SERIALIZABLE here, where concurrent inserts of one key fail with
    serialization errors that must be retried, never reach the caller, never duplicate."""
    if db_url.startswith("postgres"):
        db_url += "%20-cdefault_transaction_isolation%3Dserializable"
    open_database(db_url).close()
    procs = [_spawn(db_url, f"shared{w}", 200, 1) for w in range(4)]
    results = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert out.splitlines()[-1] == "done 200"
    retries = sum(err.count("retrying after SerializationFailure") for _, err in results)
    print(f"serialization failures retried: {retries}")
    with open_database(db_url) as db:
        assert db.count() == 200
        assert len({r.candidate_key for r in db.iter_records()}) == 200


def _kill_during_burst(url: str, batch: int, after: int) -> int:
    """Start a writer committing `batch` records per transaction; SIGKILL it once it
    has reported `after` committed. Returns the last count it reported."""
    proc = _spawn(url, "k", 100_000, batch)
    reported = 0
    for line in proc.stdout:
        if line.startswith("committed "):
            reported = int(line.split()[1])
        if reported >= after:
            os.kill(proc.pid, signal.SIGKILL)
            break
    rest, _ = proc.communicate(timeout=60)
    for line in rest.splitlines():  # lines already in the pipe when it died
        if line.startswith("committed "):
            reported = int(line.split()[1])
    assert proc.returncode == -signal.SIGKILL
    return reported


def test_kill_9_loses_at_most_the_batch_in_flight(db_url):
    batch = 10
    open_database(db_url).close()
    reported = _kill_during_burst(db_url, batch, after=300)
    with open_database(db_url) as db:
        if db_url.startswith("sqlite"):
            assert db.integrity_check() == "ok"
        stored = db.count()
        # Everything reported committed is there; at most the batch in flight beyond it
        # (committed, killed before it could say so), and never a partial batch.
        assert reported <= stored <= reported + batch, (reported, stored)
        assert stored % batch == 0
        print(f"reported committed before kill -9: {reported}; stored: {stored}")
        assert len({r.candidate_key for r in db.iter_records()}) == stored
        # The database still takes writes, and the survivors are not duplicated.
        assert db.add_records([make_rec("mm", "wk-0"), make_rec("mm", "after")])[0] is None
        assert db.count() == stored + 1


def test_racing_first_opens_create_the_schema_once(db_url):
    """Processes opening a fresh database at the same moment: one creates the tables,
    the others wait for it and use them (repeated: the race is timing-dependent)."""
    code = ("import sys; from autosched.db import open_database; "
            "open_database(sys.argv[1]).close()")
    for round_ in range(3):
        url = db_url if round_ == 0 else _fresh_like(db_url, round_)
        procs = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE,
                                  text=True) for _ in range(4)]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
        with open_database(url) as db:
            assert db.schema_version == 2 and db.count() == 0


def _fresh_like(url: str, n: int) -> str:
    """Another empty database beside `url` (a new file, or a new schema)."""
    if url.startswith("sqlite"):
        return url.replace("autosched.db", f"race{n}.db")
    import psycopg

    schema = url.rsplit("%3D", 1)[1] + f"r{n}"
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return url.rsplit("%3D", 1)[0] + "%3D" + schema
