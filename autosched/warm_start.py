"""Transfer without `--cost-model`: warm-start the cost model from the database.

A team's database often already holds records of other shapes of the workload being
tuned (another batch size, another layer width) on the same target and machine. Before
the first batch the run's ranker is given their records as training groups, with the
settings for many tasks' data (`XGBRanker.for_transfer`), and keeps them: every later
retrain learns from them and from this run's measurements together.

Only other shapes of the same workloads are used: across shapes of one workload what
makes a schedule fast carries over, and more so the more shapes the database holds;
across operators the features mean different things and a ranker learnt on one ranks
another's candidates no better than chance. bench/README.md gives the commands that
measure both.

Every record is replayed in its task's space to get its program (milliseconds a record),
so at most `RecordBudget.max_records` (TuneConfig.transfer_records) are used, shared
evenly by the similar shapes (more shapes teach more than more records of fewer
shapes), at most `per_task` and at least `min_per_task` each, newest first.

Where the database gives nothing to learn from (a first run on a GPU), the shipped
model of the target's family is loaded instead, when there is one
(`shipped_models.py`; the folder is `TuneConfig.shipped_models`, the package's own by
default).
"""
from __future__ import annotations

from dataclasses import dataclass

from search_space import Candidate, generate_space

from .config import RecordBudget
from .db import compatible_versions
from .training_data import rebuild_task


@dataclass
class WarmStart:
    """What a run's cost model was trained on before its first batch."""

    records: int
    tasks: list[str]

    def describe(self) -> str:
        names = ", ".join(self.tasks[:3]) + (f" and {len(self.tasks) - 3} more"
                                             if len(self.tasks) > 3 else "")
        return (f"cost model warm-started from {self.records} records of "
                f"{len(self.tasks)} other shape(s) in the database: {names}")


def similar_groups(tasks, db, target, versions, known_tasks: list[dict],
                   budget: RecordBudget = RecordBudget()) -> list:
    """(task, [(candidate, result), ...]) for every registered task of the same workload
    as one of `tasks` but another shape, with its newest usable records on `target`
    and this machine. A task whose definition has changed since (its rebuilt key
    differs) is left out."""
    tuned = {t.key for t in tasks}
    by_workload = {t.workload: t.definition for t in tasks if t.definition is not None}
    similar = [info for info in known_tasks
               if info.get("workload") in by_workload and info.get("key") not in tuned]
    share = max(budget.min_per_task,
                min(budget.per_task, budget.max_records // max(len(similar), 1)))
    groups, total = [], 0
    for info in similar:
        if total >= budget.max_records:
            break
        records = [r for r in db.records(task_key=info["key"], target_key=target.key,
                                         hardware_key=target.hardware_key)
                   if compatible_versions(r.versions, versions)]
        records = records[-min(share, budget.max_records - total):]
        if len(records) < 2:
            continue
        task = rebuild_task(by_workload[info["workload"]], dict(info.get("args") or {}),
                            info["key"])
        if task is None:
            continue
        groups.append((task, [(Candidate.from_json(r.candidate), r.result) for r in records]))
        total += len(records)
    return groups


def warm_start(model, tasks, db, target, versions, known_tasks,
               budget: RecordBudget = RecordBudget(),
               space_factory=generate_space, shipped_dir: str | None = None):
    """Give `model` (the CostModel shared by the run's strategies) the similar tasks'
    records as training groups, switched to the transfer settings, and train it. Records
    replay in the spaces `space_factory(task, target)` makes (the run's own). When there
    are none or they carry no ranking signal, the shipped model of the target's family
    in `shipped_dir` (None: the package's) is loaded instead: a ShippedWarmStart. None
    when neither applies."""
    from .shipped_models import load_shipped

    learned = _from_database(model, tasks, db, target, versions, known_tasks, budget,
                             space_factory)
    return learned or load_shipped(model, target, tasks, shipped_dir)


def _from_database(model, tasks, db, target, versions, known_tasks, budget,
                   space_factory) -> WarmStart | None:
    groups = similar_groups(tasks, db, target, versions, known_tasks, budget)
    if not groups:
        return None
    from cost_model.transfer import TransferReport, train_from_records

    report = TransferReport()
    train_from_records(groups, target, model=model.for_transfer(), report=report,
                       space_factory=space_factory)
    if not model.trained:
        return None
    return WarmStart(report.rows, [g[0].name for g in groups])
