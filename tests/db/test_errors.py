"""Everything a user can get wrong ends in one clear UserError line, password masked,
with nothing written."""
from __future__ import annotations

import os
import sqlite3

import pytest
from support.records import make_rec

from autosched.db import mask_password, open_database
from autosched.errors import UserError


def _one_line(e: pytest.ExceptionInfo, *absent: str) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg.strip() == msg
    for text in absent:
        assert text not in msg, msg
    return msg


@pytest.mark.parametrize("url, match", [
    ("mysql://u@h/db", "unsupported URL"),
    ("logs/autosched.db", "unsupported URL"),
    ("sqlite://relative.db", "malformed SQLite URL"),
    ("sqlite:///", "names no file"),
    ("sqlite:///x.db?cache=shared", r"only one is \?mode=ro"),
    ("postgresql://u:hunter2@127.0.0.1:notaport/db", "malformed PostgreSQL URL"),
    ("postgresql://u:hunter2@127.0.0.1:5432/db?sslmode=nonsense", "invalid sslmode value"),
    ("postgresql://u:hunter2@127.0.0.1:5432/db?bogus=1", "malformed PostgreSQL URL"),
])
def test_malformed_urls(url, match, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=match) as e:
        open_database(url)
    _one_line(e, "hunter2")
    assert os.listdir(tmp_path) == []


def test_unreachable_server_masks_password():
    from support.pgserver import free_port

    url = f"postgresql://alice:hunter2@127.0.0.1:{free_port()}/team"
    with pytest.raises(UserError, match="cannot connect to postgresql://alice:\\*\\*\\*@") as e:
        open_database(url)
    assert "Connection refused" in _one_line(e, "hunter2")


@pytest.mark.postgres
def test_wrong_credentials_and_missing_database(pg_server):
    with pytest.raises(UserError, match="password authentication failed") as e:
        open_database(pg_server.url(password="hunter2"))
    _one_line(e, "hunter2")
    with pytest.raises(UserError, match='database "nowhere" does not exist') as e:
        open_database(pg_server.url(dbname="nowhere"))
    _one_line(e, pg_server.url().split(":")[2].split("@")[0])


def test_mask_password_forms():
    assert mask_password("postgresql://a:s3cr@t@h:5/d") == "postgresql://a:***@h:5/d"
    assert mask_password("postgresql://a@h/d") == "postgresql://a@h/d"
    assert (mask_password("postgresql://h/d?user=a&password=s3&sslmode=require")
            == "postgresql://h/d?user=a&password=***&sslmode=require")
    assert mask_password("sqlite:///logs/x.db") == "sqlite:///logs/x.db"


def test_sqlite_creates_parent_directories(tmp_path):
    url = f"sqlite:///{tmp_path}/a/b/c/tuning.db"
    with open_database(url) as db:
        db.add_records([make_rec()])
    assert (tmp_path / "a/b/c/tuning.db").exists()


def test_sqlite_relative_default_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open_database() as db:
        db.add_records([make_rec()])
        assert db.url == "sqlite:///logs/autosched.db"
    assert (tmp_path / "logs" / "autosched.db").exists()


def test_not_a_database_file(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not SQLite" * 100)
    with pytest.raises(UserError, match="is not a usable SQLite database") as e:
        open_database(f"sqlite:///{path}")
    _one_line(e)
    assert path.read_bytes() == b"these are my notes, not SQLite" * 100


def test_sqlite_path_is_a_directory(tmp_path):
    with pytest.raises(UserError, match="cannot") as e:
        open_database(f"sqlite:///{tmp_path}")
    _one_line(e)


def test_sqlite_read_only_mode(tmp_path):
    url = f"sqlite:///{tmp_path}/x.db"
    with open_database(url) as db:
        db.add_records([make_rec(cand=1)])
    with open_database(url + "?mode=ro") as ro:
        assert ro.best(*_scope()).candidate_key == make_rec(cand=1).candidate_key
        with pytest.raises(UserError, match="read-only") as e:
            ro.add_records([make_rec(cand=2)])
        _one_line(e)
        assert ro.count() == 1
    with pytest.raises(UserError, match="no database at"):
        open_database(f"sqlite:///{tmp_path}/missing.db?mode=ro")


def test_sqlite_lock_held_too_long_is_a_clear_error(tmp_path):
    """A transaction left open elsewhere: we wait, then say so (never a raw 'locked')."""
    from autosched.db.sqlite import SqliteDatabase

    path = tmp_path / "x.db"
    open_database(f"sqlite:///{path}").close()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        db = SqliteDatabase(f"sqlite:///{path}", lock_timeout=1.0)
        with pytest.raises(UserError, match="stayed locked by another process") as e:
            db.add_records([make_rec()])
        _one_line(e)
        assert db.best(*_scope()) is None  # readers are not blocked by the writer (WAL)
    finally:
        other.execute("ROLLBACK")
        other.close()
    db.add_records([make_rec()])  # and once the lock is gone, the write goes through
    assert db.count() == 1
    db.close()


def _scope():
    from support.records import hardware_key, target_key, task_key, versions

    return task_key("mm"), target_key("llvm-a"), hardware_key("hw1"), versions()


@pytest.mark.postgres
def test_postgres_survives_dropped_connections(pg_server):
    """The server drops every autosched connection (a restart, a failover): the next
    read and write reconnect instead of failing the tuning run."""
    import psycopg

    url = pg_server.url(dbname=pg_server.create_database())
    with open_database(url) as db:
        db.add_records([make_rec(cand=1)])
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'autosched'").fetchone()[0]
        assert killed >= 1
        assert db.best(*_scope()).candidate_key == make_rec(cand=1).candidate_key
        assert db.add_records([make_rec(cand=2)])[0] is not None
        assert db.count() == 2
