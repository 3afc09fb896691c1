"""The team flow with real processes: tuners write, a read-only user exports the same
kernels without measuring anything; several tuners share one database."""
from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from autosched.db import open_database
from autosched.db.roles import grant_statements

ROOT = Path(__file__).resolve().parents[2]
MATMUL = str(ROOT / "examples" / "matmul.py")
SMALL = ["--arg", "M=32", "--arg", "N=32", "--arg", "K=32"]


def _autosched(*argv, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "autosched.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def team_urls(pg_server):
    pg_server.execute("CREATE ROLE flow_owner LOGIN PASSWORD 'owner-pw'",
                      "CREATE ROLE flow_reader LOGIN PASSWORD 'reader-pw'")
    name = pg_server.create_database(owner="flow_owner")
    owner = pg_server.url("flow_owner", "owner-pw", name)
    reader = pg_server.url("flow_reader", "reader-pw", name)
    with open_database(owner):
        pass  # the owner creates the tables
    with psycopg.connect(owner, autocommit=True) as conn:
        for sql in grant_statements("flow_reader", write=False):
            conn.execute(sql)
    return owner, reader


@pytest.mark.postgres
@pytest.mark.slow
def test_reader_exports_the_tuned_kernels_without_measuring(team_urls, tmp_path):
    owner, reader = team_urls
    tuned = _autosched("tune", MATMUL, *SMALL, "--trials", "6", "--db", owner,
                       "--work-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    assert "owner-pw" not in tuned.stdout + tuned.stderr
    with open_database(owner) as db:
        before = db.count()
    mine = _autosched("export", MATMUL, *SMALL, "--db", owner, "-o", str(tmp_path / "a"),
                      cwd=tmp_path)
    theirs = _autosched("export", MATMUL, *SMALL, "--db", reader, "-o", str(tmp_path / "b"),
                        cwd=tmp_path)
    assert mine.returncode == 0 and theirs.returncode == 0, theirs.stderr
    with open_database(owner) as db:
        assert db.count() == before  # exporting measured and recorded nothing
    a = json.loads((tmp_path / "a" / "manifest.json").read_text())
    b = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert [k["record_id"] for k in a["kernels"]] == [k["record_id"] for k in b["kernels"]]
    assert a["kernels"][0]["candidate"] == b["kernels"][0]["candidate"]
    assert filecmp.cmp(tmp_path / "a" / "kernels.so", tmp_path / "b" / "kernels.so",
                       shallow=False)
    denied = _autosched("tune", MATMUL, *SMALL, "--trials", "1", "--db", reader,
                        "--work-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert denied.returncode == 2 and len(denied.stderr.strip().splitlines()) == 1
    assert "reader-pw" not in denied.stderr


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.slow
def test_four_concurrent_tuning_runs_all_finish_with_all_records(backend, tmp_path, request):
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/shared.db"
    else:
        pg = request.getfixturevalue("pg_server")
        url = pg.url(dbname=pg.create_database())
    runs = []
    for seed in range(4):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        argv = [sys.executable, "-m", "autosched.cli", "tune", MATMUL, *SMALL, "--trials", "4",
                "--strategy", "random", "--seed", str(seed), "--db", url,
                "--work-dir", str(tmp_path / f"logs{seed}")]
        runs.append(subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True))
    outcomes = [(p.wait(timeout=900), p.stderr.read()) for p in runs]
    assert all(code == 0 for code, _ in outcomes), outcomes
    assert not any("locked" in err for _, err in outcomes)
    from search_space import Candidate

    measured = set()
    for seed in range(4):
        (log,) = (tmp_path / f"logs{seed}").glob("tune-*.log")
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(lines) == 4  # every run made its 4 trials
        measured |= {Candidate.from_json(x["candidate"]).key for x in lines}
    with open_database(url) as db:
        keys = [r.candidate_key for r in db.records()]
    # two runs may pick the same candidate: the database keeps it once
    assert len(keys) == len(set(keys))
    assert set(keys) == measured
