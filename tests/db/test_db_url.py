"""Database URLs in the SQLAlchemy / Optuna form: a `+driver` in the scheme is accepted
and dropped (autosched talks to each dialect through one driver of its own), so a URL
copied from another tool's configuration opens the same database."""
from __future__ import annotations

import pytest

from support.records import make_rec

from autosched.db import normalize_url, open_database
from autosched.errors import UserError


@pytest.mark.parametrize("url, want", [
    ("postgresql+psycopg://u:pw@h:5432/d", ("postgresql", "postgresql://u:pw@h:5432/d")),
    ("postgresql+psycopg2://u@h/d?sslmode=require",
     ("postgresql", "postgresql://u@h/d?sslmode=require")),
    ("postgresql+asyncpg://h/d", ("postgresql", "postgresql://h/d")),  # unknown: dropped
    ("postgres+pg8000://h/d", ("postgresql", "postgres://h/d")),
    ("PostgreSQL+Psycopg://h/d", ("postgresql", "postgresql://h/d")),
    ("postgresql://u@h/d", ("postgresql", "postgresql://u@h/d")),
    ("sqlite+pysqlite:///logs/autosched.db", ("sqlite", "sqlite:///logs/autosched.db")),
    ("sqlite+pysqlite:////abs/tuning.db?mode=ro", ("sqlite", "sqlite:////abs/tuning.db?mode=ro")),
    ("sqlite:///logs/autosched.db", ("sqlite", "sqlite:///logs/autosched.db")),
])
def test_the_driver_is_dropped_and_the_dialect_named(url, want):
    assert normalize_url(url) == want


@pytest.mark.parametrize("url, source, message", [
    ("mysql+pymysql://u:secret@h/d", "--db",
     "--db: unsupported URL 'mysql+pymysql://u:***@h/d'; use sqlite:///PATH or "
     "postgresql://USER@HOST:PORT/DB"),
    ("logs/autosched.db", "AUTOSCHED_DB",
     "AUTOSCHED_DB: unsupported URL 'logs/autosched.db'; use sqlite:///PATH or "
     "postgresql://USER@HOST:PORT/DB"),
])
def test_an_unknown_dialect_is_one_line_naming_its_source(url, source, message):
    with pytest.raises(UserError) as e:
        normalize_url(url, source=source)
    assert str(e.value) == message


def test_a_driver_url_opens_the_same_database(db_url):
    """On both backends: records written through `dialect+driver://` are the ones the
    plain URL reads, and the database names itself by the plain URL."""
    dialect, _, rest = db_url.partition(":")
    driver = {"sqlite": "pysqlite", "postgresql": "psycopg2"}[dialect]
    with open_database(f"{dialect}+{driver}:{rest}") as db:
        db.add_records([make_rec(cand=1), make_rec(cand=2, latency=2e-3)])
        assert not db.url.startswith(f"{dialect}+")
    with open_database(db_url) as db:
        assert sorted(r.latency for r in db.records()) == [1e-3, 2e-3]


def test_a_postgres_driver_url_reaches_the_server_as_a_plain_url():
    # No server on port 1: the error shows the URL libpq was given, driver dropped.
    with pytest.raises(UserError) as e:
        open_database("postgresql+psycopg://nobody@127.0.0.1:1/tuning")
    assert str(e.value).startswith("cannot connect to postgresql://nobody@127.0.0.1:1/tuning: ")
    assert "\n" not in str(e.value)
