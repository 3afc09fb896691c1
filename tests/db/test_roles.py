"""PostgreSQL roles as docs/database.md sets them up: an owner, a writer, a reader."""
from __future__ import annotations

import argparse
from pathlib import Path

import psycopg
import pytest
from support.records import hardware_key, make_rec, target_key, task_json, task_key, versions

from autosched.cli import db as cli_db
from autosched.db import open_database
from autosched.db.roles import grant_statements
from autosched.errors import UserError

pytestmark = pytest.mark.postgres
SCOPE = (task_key("mm"), target_key("llvm-a"), hardware_key("hw1"), versions())
DOCS = Path(__file__).resolve().parents[2] / "docs" / "database.md"


@pytest.fixture(scope="module")
def team(pg_server):
    """A database owned by `as_owner`, with `as_tuner` (writer) and `as_reader`."""
    pg_server.execute("CREATE ROLE as_owner LOGIN PASSWORD 'owner-pw'",
                      "CREATE ROLE as_tuner LOGIN PASSWORD 'tuner-pw'",
                      "CREATE ROLE as_reader LOGIN PASSWORD 'reader-pw'")
    name = pg_server.create_database(owner="as_owner")
    urls = {role: pg_server.url(f"as_{role}", f"{role}-pw", name)
            for role in ("owner", "tuner", "reader")}
    _cli(["upgrade", "--db", urls["owner"]])  # the owner creates the tables
    with psycopg.connect(urls["owner"], autocommit=True) as conn:
        for sql in grant_statements("as_tuner", write=True) + grant_statements(
                "as_reader", write=False):
            conn.execute(sql)
    with open_database(urls["owner"]) as db:
        db.add_records([make_rec(cand=i, latency=(i + 1) * 1e-3) for i in range(3)])
    return urls


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="autosched")
    cli_db.add_parser(parser.add_subparsers(dest="command"))
    return cli_db.run(parser.parse_args(["db"] + argv))


def test_reader_reads_best_stats_and_export(team, tmp_path, capsys):
    with open_database(team["reader"]) as db:
        assert db.best(*SCOPE).candidate_key == make_rec(cand=0).candidate_key
        assert db.stats()["records"] >= 3
    out = tmp_path / "export.jsonl"
    assert _cli(["export", "--db", team["reader"], "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) >= 3
    assert _cli(["best", "--db", team["reader"], "--workload", "mm"]) == 0
    assert "reader-pw" not in capsys.readouterr().out


def test_reader_cannot_write(team):
    with open_database(team["reader"]) as db:
        before = db.count()
        for attempt in (lambda: db.add_records([make_rec(cand=50)]),
                        lambda: db.register_task(task_json("mm")),
                        lambda: db.prune(1)):
            with pytest.raises(UserError, match="this role may not write") as e:
                attempt()
            assert "\n" not in str(e.value) and "reader-pw" not in str(e.value)
            assert "postgresql://as_reader:***@" in str(e.value)
        assert db.count() == before


def test_reader_cannot_import(team, tmp_path):
    line = make_rec(cand=60).dumps()
    (tmp_path / "in.jsonl").write_text(line + "\n")
    with pytest.raises(UserError, match="permission denied"):
        _cli(["import", "--db", team["reader"], str(tmp_path / "in.jsonl")])
    with open_database(team["owner"]) as db:
        assert make_rec(cand=60).candidate_key not in db.measured_keys(*SCOPE)


def test_writer_adds_and_registers_but_cannot_prune(team):
    with open_database(team["tuner"]) as db:
        ids = db.add_records([make_rec(cand=70, latency=5e-4), make_rec(cand=71,
                                                                         error="run_error")])
        assert None not in ids
        db.register_task(task_json("mm", flops=123.0))
        db.register_task(task_json("mm", flops=456.0))
        assert {t["key"]: t["flops"] for t in db.tasks()}[task_key("mm")] == 456.0
        assert db.best(*SCOPE).candidate_key == make_rec(cand=70).candidate_key
        with pytest.raises(UserError, match="permission denied for table autosched_records"):
            db.prune(1, drop_failures=True)


def test_reader_on_an_empty_database_gets_a_clear_error(pg_server):
    pg_server.execute("CREATE ROLE as_lonely LOGIN PASSWORD 'lonely-pw'")
    name = pg_server.create_database()
    url = pg_server.url("as_lonely", "lonely-pw", name)
    with pytest.raises(UserError, match="no autosched records yet"):
        _cli(["stats", "--db", url])
    with pytest.raises(UserError, match="permission denied for schema public") as e:
        open_database(url)  # creating the tables is the owner's job
    assert "lonely-pw" not in str(e.value)


def test_docs_list_the_grants_the_tests_use():
    text = DOCS.read_text()
    for sql in grant_statements("autosched_tuner", write=True) + grant_statements(
            "autosched_reader", write=False):
        assert sql in text, sql
