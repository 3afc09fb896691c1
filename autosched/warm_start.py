"""Transfer without `--model`: warm-start the cost model from the database.

A team's database often already holds records of other shapes of the workload being
tuned (another batch size, another layer width) on the same target and machine. The
ranker is trained on them before the first batch, as `autosched model train` would,
and kept as the base that this run's own measurements correct (see `XGBRanker.freeze`).

Only other shapes of the same workloads are used. Across shapes the transfer pays: on
held-out layer-sized matmuls it orders random candidates at 0.736 pairwise accuracy
before any local measurement, where a cold model trained on 16 local ones reaches 0.623
(bench/results/cost_model_heldout_matmul_large.json). Across operators it does not:
0.483 over the seven benchmark operators, no better than chance
(bench/results/cost_model_heldout_ops.json).

Every record is replayed in its task's space to get its program (3.5 ms a record for a
512x512x256 matmul here), so the newest `PER_TASK` records of each similar task,
`MAX_RECORDS` in all, are used: seconds, not minutes, before the first batch.
"""
from __future__ import annotations

from dataclasses import dataclass

from search_space import Candidate

from .db import compatible_versions

PER_TASK = 256
MAX_RECORDS = 1024


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


def similar_groups(tasks, db, target, versions, known_tasks: list[dict]) -> list:
    """(task, [(candidate, result), ...]) for every registered task of the same workload
    as one of `tasks` but another shape, with its newest usable records on `target`
    and this machine. A task whose definition has changed since (its rebuilt key
    differs) is left out."""
    from cost_model.transfer import rebuild_task

    tuned = {t.key for t in tasks}
    by_workload = {t.workload: t.definition for t in tasks if t.definition is not None}
    groups, total = [], 0
    for info in known_tasks:
        wdef = by_workload.get(info.get("workload"))
        if wdef is None or info.get("key") in tuned or total >= MAX_RECORDS:
            continue
        records = [r for r in db.records(task_key=info["key"], target_key=target.key,
                                         hardware_key=target.hardware_key)
                   if compatible_versions(r.versions, versions)]
        records = records[-min(PER_TASK, MAX_RECORDS - total):]
        if len(records) < 2:
            continue
        task = rebuild_task(wdef, dict(info.get("args") or {}), info["key"])
        if task is None:
            continue
        groups.append((task, [(Candidate.from_json(r.candidate), r.result) for r in records]))
        total += len(records)
    return groups


def warm_start(model, tasks, db, target, versions, known_tasks) -> WarmStart | None:
    """Train `model` (an XGBRanker shared by the run's strategies) on the similar tasks'
    records and freeze it as the base; None, and the model untouched, when there are
    none."""
    groups = similar_groups(tasks, db, target, versions, known_tasks)
    if not groups:
        return None
    from cost_model.transfer import TransferReport, train_from_records

    report = TransferReport()
    train_from_records(groups, target, model=model, report=report)
    if not model.trained:
        return None
    model.freeze()
    return WarmStart(report.rows, [g[0].name for g in groups])
