"""The model's side of a bundle's baseline jobs (measure/bundle/baselines.py): which
torch timings a round must carry for a model's tasks, and the results of earlier rounds
made baseline records.

A job times torch's twin of one task, or torch's one call computing the outputs of
several tasks (a convolution's or a layer norm's gradients, joint_calls.py), whose job
names the call's `outputs` and each task's workload, params and inputs (`members`).
"""
from __future__ import annotations


def missing_jobs(db, model_ops, tasks, there, versions) -> list[dict]:
    """The baseline jobs (without ids) for every task of `model_ops` and every one-call
    set of its tasks with no baseline on `there` (the target measured on the bundle's
    GPU)."""
    from .baseline import joint_outputs, lookup
    from .joint_calls import sibling_groups

    jobs = [_job(op, t) for op, t in zip(model_ops.ops, tasks)
            if lookup(db, t, there, versions, 0) is None]
    for group in sibling_groups(model_ops):
        first, outputs = joint_outputs([tasks[i] for i in group])
        if lookup(db, first, there, versions, 0, outputs) is None:
            jobs.append(_joint_job(model_ops, tasks, group))
    return jobs


def import_baselines(db, results, tasks, there, versions) -> int:
    """Record the correct baseline results among `results` (the bundle's result files
    of baseline jobs) of `tasks` that `db` lacks on `there`, the newest round first:
    one baseline per task and per one-call set. Returns how many were recorded."""
    from ..results import MeasureResult
    from .baseline import lookup, record_baseline

    by_key, imported = {t.key: t for t in tasks}, 0
    for r in sorted(results, key=lambda r: -r["round"]):
        task, res = by_key.get(r["task_key"]), MeasureResult.from_json(r["result"])
        outputs = tuple(r.get("outputs", ()))
        if task is None or not res.ok or any(k not in by_key for k in outputs) \
                or lookup(db, task, there, versions, 0, outputs):
            continue
        record_baseline(db, task, there, versions, res.latencies, 0, r["settings"],
                        r["runtime"].get("torch"),
                        {"host": r["host"], "user": r["user"], "time": r["time"]}, outputs)
        imported += 1
    return imported


def _job(op, task) -> dict:
    return {"task_key": task.key, "task": task.name, "workload": op.workload,
            "params": dict(op.params),
            "inputs": [{"shape": list(s.shape), "dtype": s.dtype} for s in task.inputs]}


def _joint_job(model_ops, tasks, group) -> dict:
    """The job of torch's one call computing the outputs of a sibling group: its first
    task's fields (`baseline.joint_outputs`), the call's `outputs` and `members`."""
    from .baseline import joint_outputs
    from .joint_calls import member_specs

    first, outputs = joint_outputs([tasks[i] for i in group])
    op = model_ops.ops[next(i for i in group if tasks[i].key == first.key)]
    members = [{"workload": w, "params": p,
                "inputs": [{"shape": list(shape), "dtype": d} for shape, d in specs]}
               for w, p, specs in member_specs(model_ops, tasks, group)]
    return dict(_job(op, first), outputs=list(outputs), members=members,
                task="torch's one call of " + ", ".join(tasks[i].name for i in group))
