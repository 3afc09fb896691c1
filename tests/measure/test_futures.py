"""The tuning loop treats every measurer's futures alike: it records the results that
are done and leaves a task whose results are pending for a later run, which records
them through the measurer's own `collect`. No measurer is special to the loop: these
measurers are the test's own, not a bundle."""
from __future__ import annotations

from pathlib import Path

from support import tiny_space

from autosched.components import make_strategy
from autosched.config import TuneConfig
from autosched.db import make_record, open_database
from autosched.measure import Measurer, Pending, SimulatedMeasurer
from autosched.tuner import Callback, tune_tasks
from search_space import SearchSpace

TINY_LOG = str(Path(__file__).resolve().parents[2] / tiny_space.LOG)
QUEUE = "the test's queue"


class Deferred(Measurer):
    """Measures nothing now: every future is pending, as a queue on another machine
    would leave them. `collect` in a later run records what an earlier one handed over,
    with the logged results of those candidates."""

    concurrency = 4

    def __init__(self, handed=()):
        self.sim = SimulatedMeasurer.from_log(TINY_LOG)
        self.earlier = list(handed)  # (task, candidate) handed over by earlier runs
        self.handed: list = []       # ... and by this run, in order
        self.settled: list = []      # (candidate key, failure kind) known without a build

    def measure(self, inputs):
        self.handed += [(i.task, i.candidate) for i in inputs]
        return [Pending(QUEUE)] * len(inputs)

    def settle(self, inputs, results):
        self.handed += [(i.task, i.candidate) for i in inputs]
        self.settled += [(i.candidate.key, r.error_kind) for i, r in zip(inputs, results)]
        return [Pending(QUEUE)] * len(inputs)

    def hardware(self, target):
        return target.fingerprint

    def budget(self, trials: int) -> int:
        return max(0, trials - len(self.earlier))

    def collect(self, db, tasks, target, versions, retry=()):
        pairs = [(t, c, self.sim.result(t.key, c.key)) for t, c in self.earlier]
        records = [make_record(t, target, c, r, versions) for t, c, r in pairs]
        ids = db.add_records(records)
        learned = {t.key: [(c, r) for tt, c, r in pairs if tt.key == t.key] for t in tasks}
        return [rec.with_id(i) for rec, i in zip(records, ids)], learned

    def finish_run(self, tasks, target, versions, trials):
        return f"{len(self.handed)} candidates wait in {QUEUE}"


class Results(Callback):
    def __init__(self):
        self.results = []

    def on_result(self, state, candidate, result) -> None:
        self.results.append((candidate.key, result.error_kind))


class _NoVectorRules(tiny_space.TinyRules):
    """The tiny space on a target that refuses vector loops: limit-check failures."""

    def check(self, mod, target):
        return "vector loops are refused here" if "T.vectorized" in mod.script() else None


def _tune(tmp_path, task, measurer, space=tiny_space.make_space, trials=16):
    config = TuneConfig(trials=trials, batch_size=8, work_dir=str(tmp_path), seed=3,
                        db_url=f"sqlite:///{tmp_path}/t.db")
    seen = Results()
    result = tune_tasks([task], config, [seen], measurer=measurer, space_factory=space,
                        strategy_factory=lambda: make_strategy("random"))
    with open_database(config.database_url) as db:
        return result, db.records(task_key=task.key), seen.results


def test_pending_futures_record_nothing_and_leave_the_task_for_a_later_run(tmp_path,
                                                                           tiny_task):
    measurer = Deferred()
    result, records, seen = _tune(tmp_path, tiny_task, measurer)
    (state,) = result.tasks
    assert records == [] and seen == [] and result.trials == 0
    # one batch, then the task waits: its search cannot learn from what it handed over
    assert len(measurer.handed) == state.pending == 8 and state.history == []
    assert result.stopped is None and result.bundle == f"8 candidates wait in {QUEUE}"

    later = Deferred(measurer.handed)
    result, records, seen = _tune(tmp_path, tiny_task, later)
    (state,) = result.tasks
    earlier = {c.key for _, c in measurer.handed}
    assert sorted(r.candidate_key for r in records) == sorted(earlier)
    assert state.trials == 8 and sorted(k for k, _ in seen) == sorted(earlier)
    # what this run hands over is new, and within what the earlier run left
    assert len(later.handed) == state.pending == 8
    assert not {c.key for _, c in later.handed} & earlier


def test_done_futures_are_recorded_with_exact_counts(tmp_path, tiny_task):
    sim = SimulatedMeasurer.from_log(TINY_LOG)
    result, records, seen = _tune(tmp_path, tiny_task, sim)
    (state,) = result.tasks
    assert result.trials == state.trials == len(records) == len(seen) == 16
    assert state.pending == 0 and result.bundle is None
    assert len(state.history) == 2  # two batches of 8, each learned from
    assert sorted(r.candidate_key for r in records) == sorted(k for _, k in sim.measured)


def test_limit_check_failures_wait_with_the_pending_results(tmp_path, tiny_task):
    def space(task, target):
        return SearchSpace(task, target, _NoVectorRules())

    measurer = Deferred()
    result, records, seen = _tune(tmp_path, tiny_task, measurer, space)
    assert records == [] and seen == []
    refused = [c for _, c in measurer.handed if c.values().get("vectorize") == 1]
    assert refused and measurer.settled == [(c.key, "invalid") for c in refused]
    assert result.tasks[0].pending == len(measurer.handed) == 8

    sim = SimulatedMeasurer.from_log(TINY_LOG)
    result, records, seen = _tune(tmp_path / "now", tiny_task, sim, space)
    invalid = [k for k, kind in seen if kind == "invalid"]
    assert invalid and len(records) == len(seen) == 16
    assert len(sim.measured) == 16 - len(invalid)  # a refused candidate is never measured
