"""Torch baselines as database records: stored beside the kernels' records, found only
for the same torch version and thread count, the newest winning, never a kernel."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")


@pytest.fixture
def setup(tmp_path, target):
    from autosched.db import open_database
    from autosched.model.workloads import WORKLOADS
    from autosched.versions import current_versions
    from autosched.workload import make_task
    from search_space import SPACE_VERSION

    task = make_task(WORKLOADS["aten_mm_nt"].definition(), {"M": 8, "N": 8, "K": 8,
                                                            "dtype": "float32"})
    db = open_database(f"sqlite:///{tmp_path}/db.sqlite")
    yield db, task, target, current_versions(SPACE_VERSION)
    db.close()


def test_newest_baseline_of_same_threads_wins_and_is_never_a_kernel(setup):
    from autosched.model.baseline import lookup, record_baseline

    db, task, target, versions = setup
    assert lookup(db, task, target, versions, threads=2) is None
    first = record_baseline(db, task, target, versions, [3e-6, 2e-6, 4e-6], threads=2)
    # torch's best repeat: a stalled repeat does not make torch look slow
    assert lookup(db, task, target, versions, 2).latency_s == pytest.approx(2e-6)
    assert lookup(db, task, target, versions, 2).record_id == first
    record_baseline(db, task, target, versions, [9e-6], threads=1)
    newer = record_baseline(db, task, target, versions, [5e-6], threads=2)
    found = lookup(db, task, target, versions, 2)
    assert (found.latency_s, found.record_id) == (pytest.approx(5e-6), newer)
    assert lookup(db, task, target, versions, 1).latency_s == pytest.approx(9e-6)
    # the task's own records hold kernels only: no baseline is its best
    assert db.best(task.key, target.key, target.hardware_key, versions) is None
    names = {t["workload"] for t in db.tasks()}
    assert names == {"torch:aten_mm_nt"}


def test_baseline_of_another_torch_version_does_not_apply(setup):
    import dataclasses

    from autosched.model.baseline import baseline_key, lookup, record_baseline

    db, task, target, versions = setup
    record_baseline(db, task, target, versions, [1e-6], threads=2)
    (rec,) = db.records(task_key=baseline_key(task))
    assert rec.candidate["baseline"] == "torch" and rec.candidate["format"] == 1
    old = dataclasses.replace(rec, id=None, candidate=dict(rec.candidate, torch="1.0"),
                              candidate_key="other")
    db.add_records([old])
    assert lookup(db, task, target, versions, 2).latency_s == pytest.approx(1e-6)
    db.add_records([dataclasses.replace(old, candidate_key="other-newer",
                                        candidate=dict(rec.candidate, threads=2, torch="1.0"))])
    assert lookup(db, task, target, versions, 2).record_id == rec.id


def test_time_torch_reports_seconds_per_call():
    import torch

    from autosched.measure.settings import MeasureSettings
    from autosched.model.baseline import MIN_REPEATS, time_torch

    calls = []
    x = torch.ones(4)

    def f(t):
        calls.append(1)
        return t + 1

    lat = time_torch(f, [x], MeasureSettings(min_repeat_ms=1), threads=1)
    assert len(lat) == MIN_REPEATS and all(0 < s < 1e-2 for s in lat)
    assert len(calls) > MIN_REPEATS


def test_side_by_side_alternates_every_call():
    import torch

    from autosched.measure.settings import MeasureSettings
    from autosched.model.baseline import MIN_REPEATS, time_side_by_side

    order = []
    x = torch.ones(4)

    def fast(t):
        order.append("fast")
        return t + 1

    def slow(t):
        order.append("slow")
        return (t + 1).sum() + torch.ones(20000).sum()

    lat = time_side_by_side([fast, slow], [x], MeasureSettings(min_repeat_ms=1), threads=1)
    assert [len(v) for v in lat] == [MIN_REPEATS, MIN_REPEATS]
    # after each one's warm-up and calibration (calls of one callable in a row), the
    # timed calls take turns one by one, as a model calls a kernel and torch's operator
    assert order[-4 * MIN_REPEATS:] == ["fast", "slow"] * (2 * MIN_REPEATS)
