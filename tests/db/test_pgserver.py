"""The throwaway PostgreSQL server used by tests and benchmarks."""
from __future__ import annotations

from support import pgserver
import pytest


def test_missing_binaries_are_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("PG_BINDIR", str(tmp_path))
    monkeypatch.setattr(pgserver.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(pgserver.shutil, "which", lambda name: None)
    with pytest.raises(pgserver.PgUnavailable, match="postgresql-15"):
        pgserver.find_bindir()


def test_pg_bindir_override(monkeypatch, tmp_path):
    for tool in ("initdb", "pg_ctl"):
        (tmp_path / tool).write_text("")
    monkeypatch.setenv("PG_BINDIR", str(tmp_path))
    assert pgserver.find_bindir() == tmp_path


@pytest.mark.postgres
def test_server_listens_on_loopback_only(pg_server):
    import psycopg

    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1"
        assert int(conn.execute("SHOW port").fetchone()[0]) == pg_server.port
        assert int(conn.execute("SHOW server_version_num").fetchone()[0]) >= 120000
