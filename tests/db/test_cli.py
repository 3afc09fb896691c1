"""`autosched db ...`: stats, best, import, export, prune, upgrade."""
from __future__ import annotations

import argparse
import json

import pytest
from support.records import hardware_key, make_rec, target_key, task_json, task_key, versions

from autosched.cli import db as cli_db
from autosched.db import open_database
from autosched.errors import UserError

SCOPE = (task_key("mm"), target_key("llvm-a"), hardware_key("hw1"), versions())


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="autosched")
    parser.add_argument("--debug", action="store_true")
    cli_db.add_parser(parser.add_subparsers(dest="command"))
    return cli_db.run(parser.parse_args(["db", *argv]))


def _fill(db):
    db.register_task(task_json("mm", flops=2e9))
    recs = ([make_rec(cand=i, latency=(i + 1) * 1e-3) for i in range(5)]
            + [make_rec(cand=10 + i, error="build_error") for i in range(2)]
            + [make_rec(cand=20, latency=1e-4, tvm="0.26.0"),
               make_rec("conv", cand=1, latency=3e-3, target="cuda", hw="gpu")])
    db.add_records(recs)
    return recs


def _write(path, recs):
    path.write_text("".join(r.dumps() + "\n" for r in recs))


def test_export_import_round_trip_across_backends(db, tmp_path, capsys):
    recs = _fill(db)
    out = tmp_path / "all.jsonl"
    assert cli("export", "--db", db_url_of(db), "-o", str(out)) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == len(recs)
    assert [json.loads(line)["candidate_key"] for line in lines] == [r.candidate_key
                                                                     for r in recs]
    other = f"sqlite:///{tmp_path}/other.db"
    assert cli("import", "--db", other, str(out)) == 0
    assert f"imported {len(recs)} records" in capsys.readouterr().out
    assert cli("import", "--db", other, str(out)) == 0  # idempotent
    assert f"imported 0 records into {other} ({len(recs)} already present)" in (
        capsys.readouterr().out)
    with open_database(other) as copy:
        assert [r.with_id(None) for r in copy.records()] == [
            r.with_id(None) for r in db.records()]
        assert copy.best(*SCOPE) == copy.records()[0]


def test_export_filters(db, tmp_path):
    _fill(db)
    out = tmp_path / "x.jsonl"
    cli("export", "--db", db_url_of(db), "-o", str(out), "--workload", "conv")
    assert [json.loads(x)["workload"] for x in out.read_text().splitlines()] == ["conv"]
    cli("export", "--db", db_url_of(db), "-o", str(out), "--task-key",
        task_key("mm")[:10], "--ok-only")
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(got) == 6 and all(g["result"]["error_kind"] is None for g in got)


def test_corrupt_line_imports_nothing(db, tmp_path):
    _fill(db)
    before = db.count()
    good = [make_rec(cand=100 + i) for i in range(4)]
    for bad, why in [("{not json", "invalid JSON"),
                     ('["a list"]', "must be a JSON object"),
                     ('{"task_key": "x"}', "not a record"),
                     (json.dumps({**good[0].to_json(), "versions": {"tvm": "0.27.0"}}),
                      "versions need"),
                     (json.dumps({**good[0].to_json(), "result": {"error_kind": "oops"}}),
                      "unknown failure kind")]:
        path = tmp_path / "in.jsonl"
        lines = [r.dumps() for r in good]
        lines.insert(2, bad)
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(UserError, match=rf"in.jsonl:3: .*{why}.*nothing was imported"):
            cli("import", "--db", db_url_of(db), str(path))
        assert db.count() == before


def test_corrupt_import_does_not_create_a_database(tmp_path):
    (tmp_path / "in.jsonl").write_bytes(b"\xff\xfe garbage\n")
    with pytest.raises(UserError, match=r"in.jsonl:1: not UTF-8"):
        cli("import", "--db", f"sqlite:///{tmp_path}/new.db", str(tmp_path / "in.jsonl"))
    assert not (tmp_path / "new.db").exists()


def test_import_missing_file(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        cli("import", "--db", f"sqlite:///{tmp_path}/x.db", str(tmp_path / "nope.jsonl"))


def test_export_is_atomic(db, tmp_path):
    """What `db export` writes with: a stream that breaks midway leaves nothing behind."""
    from autosched.db.jsonl import write_records

    _fill(db)
    out = tmp_path / "keep.jsonl"
    out.write_text("previous export\n")

    def broken():
        yield db.records()[0]
        raise RuntimeError("connection dropped mid-export")

    with pytest.raises(RuntimeError):
        write_records(broken(), str(out))
    assert out.read_text() == "previous export\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".export-")]


def test_stats_table(db, capsys):
    _fill(db)
    assert cli("stats", "--db", db_url_of(db)) == 0
    out = capsys.readouterr().out
    assert "records   9 (7 correct, 2 failed: build_error 2), 2 workloads" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("mm(")]
    # One row per version scope: 0.27.0 (7 records, best 1 ms = 2 TFLOP/s... of 2 GFLOP)
    main = next(r for r in rows if "0.27.0/1" in r)
    assert main[-5:] == ["7", "5", "2", "1.0000", "2000.0"]
    assert any("0.26.0/1" in r for r in rows)
    cli("stats", "--db", db_url_of(db), "--json")
    assert json.loads(capsys.readouterr().out)["records"] == 9


def test_best_table_and_filters(db, capsys):
    _fill(db)
    with pytest.raises(UserError, match="needs --task-key or --workload"):
        cli("best", "--db", db_url_of(db))
    with pytest.raises(UserError, match="no such workload"):
        cli("best", "--db", db_url_of(db), "--workload", "nope")
    cli("best", "--db", db_url_of(db), "--workload", "mm", "-k", "2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["WORKLOAD", "TASK"]
    # two per scope: 0.26.0 has one, 0.27.0 has two
    assert len(lines) == 1 + 3
    cli("best", "--db", db_url_of(db), "--task-key", task_key("mm")[:8], "--json",
        "--hardware-key", hardware_key("hw1"))
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert sorted(g["versions"]["tvm"] for g in got) == ["0.26.0", "0.27.0"]
    fastest = [g for g in got if g["versions"]["tvm"] == "0.27.0"][0]
    assert fastest["candidate_key"] == make_rec(cand=0).candidate_key
    cli("best", "--db", db_url_of(db), "--workload", "mm", "--target-key",
        target_key("cuda"))
    assert capsys.readouterr().out.strip() == "no correct record matches"


def test_best_for_this_machine_uses_only_usable_records(db, capsys):
    """--target llvm: exactly what tune/export would pick here (other machines hidden)."""
    from search_space import SPACE_VERSION

    from autosched.target import resolve_target
    from autosched.versions import current_versions

    spec = resolve_target("llvm")
    here = current_versions(SPACE_VERSION)
    mine = make_rec(cand=1, latency=2e-3, tvm=here["tvm"], space=here["space"])
    mine = mine.__class__(**{**mine.__dict__, "target_key": spec.key,
                             "hardware_key": spec.hardware_key, "hardware": spec.fingerprint})
    db.add_records([mine, make_rec(cand=2, latency=1e-6, tvm=here["tvm"])])
    cli("best", "--db", db_url_of(db), "--workload", "mm", "--target", "llvm", "--json")
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["candidate_key"] == mine.candidate_key


def test_prune_keeps_the_best(db, capsys):
    recs = _fill(db)
    url = db_url_of(db)
    best_before = db.best(*SCOPE)
    assert cli("prune", "--db", url, "--keep", "2", "--dry-run") == 0
    assert "would delete 3 records" in capsys.readouterr().out and db.count() == 9
    assert cli("prune", "--db", url, "--keep", "2") == 0
    assert "deleted 3 records" in capsys.readouterr().out
    assert db.best(*SCOPE) == best_before
    assert [r.candidate_key for r in db.top_k(*SCOPE, 5)] == [
        recs[0].candidate_key, recs[1].candidate_key]
    assert db.stats()["failures"] == {"build_error": 2}  # failures kept by default
    cli("prune", "--db", url, "--keep", "1", "--drop-failures")
    assert "(1 correct beyond the 1 fastest" in capsys.readouterr().out
    assert db.stats()["failures"] == {} and db.count() == 3  # one per scope
    assert db.best(*SCOPE) == best_before


def test_upgrade_command(db_url, capsys):
    assert cli("upgrade", "--db", db_url) == 0
    assert "created" in capsys.readouterr().out
    assert cli("upgrade", "--db", db_url) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_read_commands_on_missing_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["stats"], ["best", "--workload", "mm"], ["export"], ["prune", "--keep",
                                                                       "1"]):
        with pytest.raises(UserError, match="no database at"):
            cli(*argv)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_stats_masks_password(pg_server, capsys):
    name = pg_server.create_database()
    url = pg_server.url(dbname=name)
    open_database(url).close()
    cli("stats", "--db", url)
    cli("stats", "--db", url, "--json")
    out = capsys.readouterr().out
    assert pg_server.url().split(":")[2].split("@")[0] not in out
    assert "postgres:***@127.0.0.1" in out


def db_url_of(db) -> str:
    """The URL a test database was opened with (sqlite URLs carry no password; for the
    test server the superuser password is known)."""
    if db.url.startswith("sqlite"):
        return db.url
    from support.pgserver import SUPERUSER_PASSWORD

    return db.url.replace(":***@", f":{SUPERUSER_PASSWORD}@", 1)
