"""Queries for use never return a record from another target, machine or version."""
from __future__ import annotations

import itertools
import random

import pytest
from support.records import hardware_key, make_rec, target_key, task_key, versions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosched.db import compatible_versions, open_database

SCOPES = list(itertools.product(["mm", "conv"], ["llvm-a", "llvm-b"], ["hw1", "hw2"],
                                ["0.27.0", "0.28.0"], ["1", "2"]))


def _query_args(task, target, hw, tvm, space):
    return task_key(task), target_key(target), hardware_key(hw), versions(tvm, space)


def test_record_for_target_a_is_invisible_elsewhere(db):
    rec = make_rec(cand=1, latency=1e-4, target="llvm-a", hw="hw1")
    db.add_records([rec])
    here = _query_args("mm", "llvm-a", "hw1", "0.27.0", "1")
    assert db.best(*here).candidate_key == rec.candidate_key
    elsewhere = [_query_args("mm", "llvm-b", "hw1", "0.27.0", "1"),  # other target
                 _query_args("mm", "llvm-a", "hw2", "0.27.0", "1"),  # other machine
                 _query_args("mm", "llvm-a", "hw1", "0.28.0", "1"),  # other TVM
                 _query_args("mm", "llvm-a", "hw1", "0.27.0", "2"),  # other space
                 _query_args("conv", "llvm-a", "hw1", "0.27.0", "1")]  # other task
    for args in elsewhere:
        assert db.best(*args) is None
        assert db.top_k(*args, 10) == []
        assert db.measured_keys(*args) == set()
    # ... but it is listed, and counted.
    assert [r.candidate_key for r in db.records()] == [rec.candidate_key]
    assert db.stats()["records"] == 1


def test_autosched_version_alone_does_not_isolate(db):
    """compatible_versions: only TVM and the space version decide."""
    db.add_records([make_rec(cand=1, autosched="0.0.9")])
    got = db.best(*_query_args("mm", "llvm-a", "hw1", "0.27.0", "1"))
    assert got is not None and got.versions["autosched"] == "0.0.9"


def test_versions_without_tvm_or_space_match_nothing(db):
    db.add_records([make_rec(cand=1)])
    tk, tg, hw = task_key("mm"), target_key("llvm-a"), hardware_key("hw1")
    for v in ({}, {"tvm": "0.27.0"}, {"space": "1"}, {"tvm": "", "space": ""}):
        assert db.best(tk, tg, hw, v) is None and db.measured_keys(tk, tg, hw, v) == set()


def _reference(recs, task, target, hw, tvm, space, k):
    """What best/top_k must answer, computed in Python from the records."""
    want = versions(tvm, space)
    usable = [(r.latency, n) for n, r in enumerate(recs) if r.ok
              and r.task_key == task_key(task) and r.target_key == target_key(target)
              and r.hardware_key == hardware_key(hw) and compatible_versions(r.versions, want)]
    return [recs[n].candidate_key for _, n in sorted(usable)[:k]]


def _check_all_scopes(db, recs):
    for scope in SCOPES:
        args = _query_args(*scope)
        got = [r.candidate_key for r in db.top_k(*args, 3)]
        assert got == _reference(recs, *scope, 3), scope
        best = db.best(*args)
        assert (best.candidate_key if best else None) == (got[0] if got else None)
        measured = {r.candidate_key for r in recs if r.task_key == args[0] and
                    r.target_key == args[1] and r.hardware_key == args[2] and
                    compatible_versions(r.versions, args[3])}
        assert db.measured_keys(*args) == measured, scope


def test_random_records_against_reference(db):
    rng = random.Random(7)
    recs = []
    for n in range(300):
        task, target, hw, tvm, space = rng.choice(SCOPES)
        error = rng.choice([None, None, None, "build_error", "run_timeout", "wrong_answer"])
        recs.append(make_rec(task, n, rng.uniform(1e-4, 1e-2), target=target, hw=hw,
                             tvm=tvm, space=space, error=error))
    db.add_records(recs)
    _check_all_scopes(db, recs)


_scope = st.sampled_from(SCOPES)
_rec = st.tuples(_scope, st.floats(1e-6, 1.0), st.sampled_from([None, "build_error",
                                                                  "run_error"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_rec, max_size=25))
def test_property_sqlite_matches_reference(items):
    recs = [make_rec(task, n, lat, target=target, hw=hw, tvm=tvm, space=space, error=err)
            for n, ((task, target, hw, tvm, space), lat, err) in enumerate(items)]
    with open_database("sqlite:///:memory:") as db:
        db.add_records(recs)
        _check_all_scopes(db, recs)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_top_k_never_pads_with_other_scopes(db, k):
    db.add_records([make_rec(cand=1, latency=3e-3)])
    db.add_records([make_rec(cand=2 + i, latency=1e-4, hw="hw2") for i in range(5)])
    got = db.top_k(*_query_args("mm", "llvm-a", "hw1", "0.27.0", "1"), k)
    assert [r.hardware_key for r in got] == [hardware_key("hw1")]
