"""Database fixtures: every `db` test runs against SQLite and a real PostgreSQL server.

The PostgreSQL server (tests/db/pgserver.py) is started once per session on a loopback
port. Without server binaries the PostgreSQL cases are skipped, except in CI (CI=true)
where that is a failure.
"""
from __future__ import annotations

import itertools
import os

import pytest

from support.pgserver import PgServer, PgUnavailable

from autosched.db import open_database  # noqa: E402

_names = itertools.count()


@pytest.fixture(scope="session")
def pg_server():
    """A running PostgreSQL server for the whole session (stopped at the end)."""
    try:
        # fsync off: these tests kill clients, never the server, and CREATE DATABASE
        # per test is much faster without it (the benchmark keeps fsync on).
        server = PgServer(fsync=False).start()
    except PgUnavailable as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI needs PostgreSQL: {e}")
        pytest.skip(str(e))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_tests_db(pg_server):
    """One database holding a fresh schema per test (CREATE DATABASE costs ~1 s)."""
    return pg_server.create_database()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """The URL of an empty database on each backend. On PostgreSQL it is a fresh schema
    that the URL puts first on the search path, which is how a team could also host
    autosched beside other applications in one database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/logs/autosched.db"
        return
    pg = request.getfixturevalue("pg_server")
    dbname = request.getfixturevalue("pg_tests_db")
    schema = f"s{next(_names)}"
    pg.execute(f"CREATE SCHEMA {schema}", dbname=dbname)
    yield pg.url(dbname=dbname) + f"?options=-csearch_path%3D{schema}"
    pg.execute(f"DROP SCHEMA {schema} CASCADE", dbname=dbname)


@pytest.fixture
def db(db_url):
    database = open_database(db_url)
    yield database
    database.close()
