"""Schema versions: creation, upgrade from an older schema, refusal of a newer one,
and the indexes the ranked queries use."""
from __future__ import annotations

import json

import pytest
from support.records import hardware_key, make_rec, target_key, task_key, versions

from autosched.db import open_database
from autosched.db import schema
from autosched.errors import UserError


def _raw(db_url):
    """A DB-API connection and placeholder style to poke at tables directly."""
    if db_url.startswith("sqlite"):
        import sqlite3

        return sqlite3.connect(db_url[len("sqlite:///"):], isolation_level=None), "?"
    import psycopg

    return psycopg.connect(db_url, autocommit=True), "%s"


def _make_v1(db_url, recs):
    """A database at schema version 1 holding `recs` (as an older release wrote it)."""
    from autosched.db.rows import canon

    if db_url.startswith("sqlite"):
        from pathlib import Path

        Path(db_url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    conn, ph = _raw(db_url)
    dialect = schema.SQLITE if ph == "?" else schema.POSTGRES

    class Cur:  # the migration functions speak `?`
        def __init__(self):
            self.c = conn.cursor()

        def execute(self, sql, params=()):
            self.c.execute(sql.replace("?", ph), params)

    cur = Cur()
    schema.migrate(cur, dialect, None, target=1)
    for r in recs:
        cur.execute("INSERT INTO autosched_workloads (task_key, workload, args) VALUES "
                    "(?, ?, ?) ON CONFLICT (task_key) DO NOTHING",
                    (r.task_key, r.workload, canon(r.args)))
        cur.execute("INSERT INTO autosched_records (task_key, target_key, hardware_key, "
                    "hardware, versions, candidate_key, candidate, result, provenance, "
                    "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (r.task_key, r.target_key, r.hardware_key, canon(r.hardware),
                     canon(r.versions), r.candidate_key, canon(r.candidate),
                     canon(r.result.to_json()), canon(r.provenance), 1.0))
    conn.close()


def _version(db_url):
    conn, _ = _raw(db_url)
    (v,) = conn.execute("SELECT version FROM autosched_schema").fetchone()
    conn.close()
    return v


def test_fresh_database_gets_current_schema(db_url):
    with open_database(db_url) as db:
        assert db.schema_version == schema.SCHEMA_VERSION and db.created
    with open_database(db_url) as db:
        assert not db.created and db.upgraded_from is None
    assert _version(db_url) == schema.SCHEMA_VERSION


def test_older_schema_needs_upgrade_then_works(db_url):
    recs = [make_rec(cand=1, latency=4e-3), make_rec(cand=2, latency=2e-3),
            make_rec(cand=3, error="run_error")]
    _make_v1(db_url, recs)
    with pytest.raises(UserError, match=r"schema version 1, older .* `autosched db upgrade --db"):
        open_database(db_url)
    assert _version(db_url) == 1  # refusing did not touch it
    with open_database(db_url, upgrade=True) as db:
        assert db.upgraded_from == 1 and db.schema_version == 2
    with open_database(db_url) as db:
        args = (task_key("mm"), target_key("llvm-a"), hardware_key("hw1"), versions())
        # The backfilled columns rank and filter exactly as freshly written rows do.
        assert db.best(*args).candidate_key == recs[1].candidate_key
        assert db.best(*args).latency == pytest.approx(2e-3)
        assert db.measured_keys(*args) == {r.candidate_key for r in recs}
        assert db.stats()["failures"] == {"run_error": 1}
        assert db.add_records(recs) == [None, None, None]  # the uniqueness rule survived


def test_newer_schema_is_refused(db_url):
    open_database(db_url).close()
    conn, _ = _raw(db_url)
    conn.execute("UPDATE autosched_schema SET version = 99")
    conn.close()
    for upgrade in (False, True):
        with pytest.raises(UserError, match=r"schema version 99, newer than this autosched "
                                            r"understands \(2\); upgrade autosched"):
            open_database(db_url, upgrade=upgrade)


def test_foreign_table_is_not_adopted(db_url):
    if db_url.startswith("sqlite"):
        from pathlib import Path

        Path(db_url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    conn, _ = _raw(db_url)
    conn.execute("CREATE TABLE autosched_records (x INTEGER)")
    conn.close()
    with pytest.raises(UserError, match="autosched_records table but no autosched_schema"):
        open_database(db_url)


def test_read_commands_do_not_create(db_url):
    with pytest.raises(UserError, match="autosched db import"):
        open_database(db_url, create=False)
    if db_url.startswith("sqlite"):
        from pathlib import Path

        assert not Path(db_url[len("sqlite:///"):]).exists()


def test_sqlite_ranked_queries_use_indexes(tmp_path):
    import sqlite3

    path = tmp_path / "x.db"
    open_database(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    scope = "task_key=? AND target_key=? AND hardware_key=? AND tvm_version=? AND space_version=?"
    args = ("t", "g", "h", "v", "s")
    plan = " ".join(r[3] for r in conn.execute(
        f"EXPLAIN QUERY PLAN SELECT id FROM autosched_records WHERE {scope} "
        "AND error_kind IS NULL ORDER BY latency, id LIMIT 5", args))
    # The index delivers rows in (latency, id) order: no sort step.
    assert "USING INDEX autosched_records_rank" in plan and "TEMP B-TREE" not in plan, plan
    plan = " ".join(r[3] for r in conn.execute(
        f"EXPLAIN QUERY PLAN SELECT candidate_key FROM autosched_records WHERE {scope}", args))
    assert "COVERING INDEX autosched_records_measured" in plan, plan


@pytest.mark.postgres
def test_postgres_ranked_queries_use_indexes(pg_server):
    db_url = pg_server.url(dbname=pg_server.create_database())
    open_database(db_url).close()
    conn, _ = _raw(db_url)
    conn.execute("SET enable_seqscan = off")  # tiny tables: force the planner's hand
    scope = ("task_key='t' AND target_key='g' AND hardware_key='h' AND tvm_version='v' "
             "AND space_version='s'")
    plan = json.dumps(conn.execute(
        f"EXPLAIN (FORMAT JSON) SELECT id FROM autosched_records WHERE {scope} "
        "AND error_kind IS NULL ORDER BY latency, id LIMIT 5").fetchone()[0])
    assert "autosched_records_rank" in plan
    assert '"Node Type": "Sort"' not in plan  # the index yields (latency, id) order
    plan = json.dumps(conn.execute(
        f"EXPLAIN (FORMAT JSON) SELECT candidate_key FROM autosched_records WHERE {scope}"
    ).fetchone()[0])
    assert "autosched_records_measured" in plan
    conn.close()
