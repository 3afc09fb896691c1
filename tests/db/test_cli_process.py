"""`autosched db ...` as a user runs it: exit codes and one-line errors."""
from __future__ import annotations

import pytest
from support.records import make_rec


def test_corrupt_import_exit_2_one_line(cli, tmp_path):
    good = make_rec(cand=1).dumps()
    (tmp_path / "in.jsonl").write_text(good + "\n" + good[:-5] + "\n")
    url = f"sqlite:///{tmp_path}/t.db"
    proc = cli("db", "import", "--db", url, str(tmp_path / "in.jsonl"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "in.jsonl:2: invalid JSON" in proc.stderr
    assert not (tmp_path / "t.db").exists()
    (tmp_path / "in.jsonl").write_text(good + "\n")
    assert cli("db", "import", "--db", url, str(tmp_path / "in.jsonl")).returncode == 0
    proc = cli("db", "stats", "--db", url)
    assert proc.returncode == 0 and "records   1 (1 correct, 0 failed)" in proc.stdout


def test_newer_schema_exit_2(cli, tmp_path):
    import sqlite3

    url = f"sqlite:///{tmp_path}/t.db"
    assert cli("db", "upgrade", "--db", url).returncode == 0
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute("UPDATE autosched_schema SET version = 3")
    conn.commit()
    conn.close()
    proc = cli("db", "stats", "--db", url)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "schema version 3, newer than this autosched understands" in proc.stderr


@pytest.mark.postgres
def test_wrong_password_exit_2_masked(cli, pg_server):
    proc = cli("db", "stats", "--db", pg_server.url(password="hunter2-wrong"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "password authentication failed" in proc.stderr
    assert "hunter2-wrong" not in proc.stderr and ":***@" in proc.stderr


@pytest.mark.postgres
def test_stats_output_masks_password(cli, pg_server):
    from support.pgserver import SUPERUSER_PASSWORD

    url = pg_server.url(dbname=pg_server.create_database())
    assert cli("db", "upgrade", "--db", url).returncode == 0
    proc = cli("--debug", "db", "stats", "--db", url)
    assert proc.returncode == 0
    assert SUPERUSER_PASSWORD not in proc.stdout + proc.stderr
    assert "postgres:***@127.0.0.1" in proc.stdout
