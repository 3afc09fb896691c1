"""The Database protocol, run identically against SQLite and PostgreSQL."""
from __future__ import annotations

import dataclasses
import math

import pytest
from support.records import hardware_key, make_rec, target_key, task_json, task_key, versions

from autosched.results import MeasureResult

V = versions()
MM = task_key("mm")
A = target_key("llvm-a")
H1 = hardware_key("hw1")


def test_add_returns_ids_and_none_for_duplicates(db):
    recs = [make_rec(cand=i, latency=(i + 1) * 1e-3) for i in range(3)]
    ids = db.add_records(recs)
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == 3
    assert ids == sorted(ids)
    # The same records again, plus one new: only the new one is inserted.
    again = db.add_records(recs + [make_rec(cand=9)])
    assert again[:3] == [None, None, None] and isinstance(again[3], int)
    assert db.count() == 4


def test_duplicate_within_one_batch(db):
    ids = db.add_records([make_rec(cand=1), make_rec(cand=1, latency=5.0)])
    assert isinstance(ids[0], int) and ids[1] is None
    assert db.count() == 1
    assert db.records()[0].latency == pytest.approx(1e-3)  # the first one won


def test_uniqueness_rule_covers_target_hardware_and_versions(db):
    base = make_rec(cand=1)
    variants = [make_rec(cand=1, target="llvm-b"), make_rec(cand=1, hw="hw2"),
                make_rec(cand=1, tvm="0.28.0"), make_rec(cand=1, space="2"),
                make_rec(cand=1, autosched="0.2.0"), make_rec("conv", cand=1)]
    ids = db.add_records([base] + variants)
    assert None not in ids and db.count() == 7


def test_records_round_trip_exactly(db):
    recs = [make_rec(cand=1, latency=1.2345678901234567e-05),
            make_rec(cand=2, error="run_timeout")]
    ids = db.add_records(recs)
    got = db.records()
    assert got == [r.with_id(i) for r, i in zip(recs, ids)]
    assert got[1].result.error_msg == "run_timeout of candidate 2"
    assert got[1].latency == math.inf


def test_record_by_id(db):
    recs = [make_rec(cand=1, latency=2e-3), make_rec(cand=2, error="wrong_answer"),
            make_rec("conv", cand=3)]
    ids = db.add_records(recs)
    for rec, i in zip(recs, ids):
        assert db.record(i) == rec.with_id(i)
    assert db.record(max(ids) + 1) is None
    assert db.record(-1) is None


def test_best_and_top_k_rank_correct_records_only(db):
    lat = [5e-3, 2e-3, 9e-3, 1e-3, 3e-3]
    db.add_records([make_rec(cand=i, latency=x) for i, x in enumerate(lat)])
    # Failures with no latency must never rank, whatever their kind.
    db.add_records([make_rec(cand=100 + n, error=k) for n, k in enumerate(
        ("build_error", "build_timeout", "run_error", "run_timeout", "wrong_answer",
         "invalid"))])
    best = db.best(MM, A, H1, V)
    assert best.candidate_key == make_rec(cand=3).candidate_key and best.ok
    top = db.top_k(MM, A, H1, V, 3)
    assert [r.latency for r in top] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert len(db.top_k(MM, A, H1, V, 100)) == 5
    assert db.top_k(MM, A, H1, V, 0) == []


def test_ties_rank_older_record_first(db):
    ids = db.add_records([make_rec(cand=i, latency=2e-3) for i in range(4)])
    assert [r.id for r in db.top_k(MM, A, H1, V, 4)] == ids


def test_only_failures_means_no_best(db):
    db.add_records([make_rec(cand=i, error="wrong_answer") for i in range(3)])
    assert db.best(MM, A, H1, V) is None
    assert db.top_k(MM, A, H1, V, 5) == []
    assert len(db.measured_keys(MM, A, H1, V)) == 3


def test_measured_keys_include_failures(db):
    ok, bad = make_rec(cand=1), make_rec(cand=2, error="build_error")
    db.add_records([ok, bad])
    assert db.measured_keys(MM, A, H1, V) == {ok.candidate_key, bad.candidate_key}


def test_records_filters_and_insertion_order(db):
    recs = [make_rec(cand=0), make_rec("conv", cand=1), make_rec(cand=2, target="cuda",
                                                                 hw="gpu"),
            make_rec(cand=3, error="run_error"), make_rec(cand=4, hw="hw2")]
    ids = db.add_records(recs)
    assert [r.id for r in db.records()] == ids
    assert [r.id for r in db.records(task_key=MM)] == [ids[0], ids[2], ids[3], ids[4]]
    assert [r.id for r in db.records(target_key=target_key("cuda"))] == [ids[2]]
    assert [r.id for r in db.records(hardware_key=hardware_key("hw2"))] == [ids[4]]
    assert [r.id for r in db.records(task_key=MM, ok_only=True)] == [ids[0], ids[2], ids[4]]
    assert [r.id for r in db.records(limit=2)] == ids[:2]
    assert [r.id for r in db.iter_records(task_key=MM, batch=2)] == [ids[0], ids[2], ids[3],
                                                                     ids[4]]


def test_register_task_then_update(db):
    db.register_task(task_json("mm", flops=100.0))
    db.register_task(task_json("conv", flops=7.0))
    db.register_task(task_json("mm", flops=200.0))
    tasks = {t["key"]: t for t in db.tasks()}
    assert set(tasks) == {MM, task_key("conv")}
    assert tasks[MM] == task_json("mm", flops=200.0)


def test_records_register_their_workload(db):
    db.add_records([make_rec("softmax", cand=1)])
    (t,) = db.tasks()
    assert (t["key"], t["workload"], t["args"], t["flops"]) == (
        task_key("softmax"), "softmax", {"M": 64, "N": 32}, None)
    db.register_task(task_json("softmax", flops=10.0))  # fills in what records lack
    assert db.tasks()[0]["flops"] == 10.0


def test_invalid_batch_writes_nothing(db):
    good = make_rec(cand=1)
    bad = dataclasses.replace(make_rec(cand=2), versions={"autosched": "0.1.0"})
    with pytest.raises(ValueError, match="tvm"):
        db.add_records([good, bad])
    nan = dataclasses.replace(make_rec(cand=3), result=MeasureResult((float("nan"),)))
    with pytest.raises(ValueError, match="finite"):
        db.add_records([good, nan])
    assert db.count() == 0 and db.tasks() == []


def test_stats_counts(db):
    db.register_task(task_json("mm", flops=2e6))
    db.add_records([make_rec(cand=i, latency=(i + 1) * 1e-3) for i in range(4)])
    db.add_records([make_rec(cand=10, error="build_error"),
                    make_rec(cand=11, error="build_error"),
                    make_rec(cand=12, error="wrong_answer"),
                    make_rec(cand=13, latency=5e-4, tvm="0.26.0"),
                    make_rec("conv", cand=1, target="cuda", hw="gpu", latency=7e-3)])
    s = db.stats()
    assert (s["records"], s["ok"], s["workloads"]) == (9, 6, 2)
    assert s["failures"] == {"build_error": 2, "wrong_answer": 1}
    assert s["schema_version"] == 2 and s["url"] == db.url
    groups = {(g["workload"], g["target_key"], g["versions"]["tvm"]): g for g in s["groups"]}
    assert len(groups) == 3
    main = groups[("mm", A, "0.27.0")]
    assert (main["records"], main["ok"], main["failures"]) == (7, 4, {"build_error": 2,
                                                                     "wrong_answer": 1})
    assert main["best_latency"] == pytest.approx(1e-3) and main["flops"] == 2e6
    assert main["hardware"]["model"] == "Intel Xeon Platinum 8375C"
    assert groups[("mm", A, "0.26.0")]["best_latency"] == pytest.approx(5e-4)
    assert groups[("conv", target_key("cuda"), "0.27.0")]["flops"] is None


def test_empty_database(db):
    assert db.count() == 0 and db.records() == [] and db.tasks() == []
    assert db.best(MM, A, H1, V) is None and db.measured_keys(MM, A, H1, V) == set()
    s = db.stats()
    assert (s["records"], s["ok"], s["groups"], s["failures"]) == (0, 0, [], {})


def test_reopen_keeps_everything(db_url):
    from autosched.db import open_database

    with open_database(db_url) as db:
        ids = db.add_records([make_rec(cand=i) for i in range(5)])
    with open_database(db_url) as db:
        assert [r.id for r in db.records()] == ids
        assert db.add_records([make_rec(cand=0)]) == [None]


def test_query_and_write_while_streaming(db):
    ids = db.add_records([make_rec(cand=i, latency=(i + 1) * 1e-3) for i in range(5)])
    seen = []
    for rec in db.iter_records(batch=2):
        seen.append(rec.id)
        assert db.best(MM, A, H1, V).id == ids[0]
        db.add_records([make_rec(cand=100 + len(seen))])
    assert seen == ids  # the snapshot taken when the stream started
    assert db.count() == 10


def test_threads_share_one_database_object(db):
    from concurrent.futures import ThreadPoolExecutor

    def work(t):
        for i in range(20):
            db.add_records([make_rec(cand=f"t{t}-{i}")])
            db.best(MM, A, H1, V)
        return t

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(work, range(4))) == [0, 1, 2, 3]
    assert db.count() == 80
