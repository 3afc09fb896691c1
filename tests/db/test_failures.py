"""Failures by kind: re-admitting them (`tune --retry-failures`), dropping them
(`db prune --drop-failures --kind`), and seeing them per task (`db stats`)."""
from __future__ import annotations

import pytest
from support.records import make_rec, task_json

from autosched.errors import UserError

from .test_cli import SCOPE, cli, db_url_of


def _poisoned(db):
    """Task mm: 3 correct records, 4 build errors, 1 run error, 1 wrong answer."""
    db.register_task(task_json("mm", flops=2e9))
    recs = ([make_rec(cand=i, latency=(i + 2) * 1e-3) for i in range(3)]
            + [make_rec(cand=10 + i, error="build_error") for i in range(4)]
            + [make_rec(cand=20, error="run_error"), make_rec(cand=30, error="wrong_answer")])
    db.add_records(recs)
    return recs


def test_failed_records_of_a_kind_in_the_scope(db):
    recs = _poisoned(db)
    got = db.failed_records(*SCOPE, ["build_error"])
    assert [r.candidate_key for r in got] == [r.candidate_key for r in recs[3:7]]
    assert all(r.result.error_kind == "build_error" for r in got)
    both = db.failed_records(*SCOPE, ["run_error", "wrong_answer"])
    assert [r.candidate_key for r in both] == [recs[7].candidate_key, recs[8].candidate_key]
    assert db.failed_records(*SCOPE, []) == []
    other_version = (*SCOPE[:3], {**SCOPE[3], "tvm": "0.26.0"})
    assert db.failed_records(*other_version, ["build_error"]) == []


def test_a_retried_failure_is_replaced_by_its_new_result(db):
    recs = _poisoned(db)
    assert len(db.measured_keys(*SCOPE)) == 9
    fixed = make_rec(cand=10, latency=1e-3)  # the first build error, now measured: fastest
    # Without replacement the failure stands: one record per candidate and scope.
    assert db.add_records([fixed]) == [None]
    assert db.best(*SCOPE).candidate_key == recs[0].candidate_key
    (rid,) = db.add_records([fixed], replace_failures=["build_error"])
    assert rid is not None
    assert db.count() == 9 and len(db.measured_keys(*SCOPE)) == 9
    best = db.best(*SCOPE)
    assert best.candidate_key == fixed.candidate_key and best.latency == 1e-3
    assert len(db.failed_records(*SCOPE, ["build_error"])) == 3
    # A kind that is not retried is never replaced, nor is a correct record.
    assert db.add_records([make_rec(cand=20, latency=5e-4)],
                          replace_failures=["build_error"]) == [None]
    assert db.add_records([make_rec(cand=0, error="build_error")],
                          replace_failures=["build_error"]) == [None]
    assert db.stats()["failures"] == {"build_error": 3, "run_error": 1, "wrong_answer": 1}


def test_prune_drops_only_the_failures_of_the_kinds_asked(db, capsys):
    _poisoned(db)
    url = db_url_of(db)
    assert cli("prune", "--db", url, "--keep", "10", "--drop-failures", "--kind",
               "build_error", "--dry-run") == 0
    assert "would delete 4 records" in capsys.readouterr().out and db.count() == 9
    assert cli("prune", "--db", url, "--keep", "10", "--drop-failures", "--kind",
               "build_error", "--kind", "run_error") == 0
    out = capsys.readouterr().out
    assert "deleted 5 records" in out and "5 failures" in out and "4 remain" in out
    assert db.stats()["failures"] == {"wrong_answer": 1}
    with pytest.raises(UserError, match="add --drop-failures"):
        cli("prune", "--db", url, "--keep", "10", "--kind", "wrong_answer")
    assert db.count() == 4


def test_stats_shows_failures_by_kind_per_task(db, capsys):
    _poisoned(db)
    db.add_records([make_rec("conv", cand=1, latency=3e-3, target="cuda", hw="gpu")])
    assert cli("stats", "--db", db_url_of(db)) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("WORKLOAD"))
    assert header.split()[5:] == ["FAILURES", "RECORDS", "OK", "FAILED", "BEST_MS",
                                  "GFLOP/S"]
    mm = next(line for line in lines if line.startswith("mm("))
    assert "build_error 4, run_error 1, wrong_answer 1" in mm
    assert mm.split()[-5:] == ["9", "3", "6", "2.0000", "1000.0"]
    conv = next(line for line in lines if line.startswith("conv("))
    assert conv.split()[-6:] == ["-", "1", "1", "0", "3.0000", "-"]
