"""Training data for cost models from a tuning database.

A record carries the workload name and arguments but not the computation itself, so the
op files (or the workload definitions) are needed to rebuild its task; a rebuilt task
whose key differs from the record's (the definition changed since) is skipped, never
guessed at. The groups feed `cost_model.transfer.train_from_records`.
"""
from __future__ import annotations

import json

from cost_model.transfer import TransferReport, train_from_records
from search_space import SPACE_VERSION, Candidate, generate_space

from .db import compatible_versions, open_database
from .errors import UserError
from .target import TargetSpec
from .versions import current_versions
from .workload import load_op_file, make_task


def rebuild_task(wdef, args: dict, key: str):
    """The task a record was measured on, rebuilt from its workload definition and stored
    arguments (ordered as the definition lists them, for its name); None when the
    definition has changed since (the rebuilt key differs)."""
    ordered = {k: args[k] for k in wdef.params if k in args}
    task = make_task(wdef, {**ordered, **args})
    return task if task.key == key else None


def groups_from_database(db, op_files: list[str], target_kind: str, versions: dict,
                         report: TransferReport | None = None) -> list:
    """(task, target, [(candidate, result), ...]) per (task, target, hardware) in `db`,
    for records of `target_kind` whose versions match `versions`."""
    report = report if report is not None else TransferReport()
    defs = {}
    for path in op_files:
        for name, wdef in load_op_file(path).items():
            defs.setdefault(name, wdef)
    tasks: dict = {}
    buckets: dict = {}
    for rec in db.iter_records():
        config = json.loads(rec.target_key)
        if config.get("kind") != target_kind:
            report.skip("other target")
            continue
        if not compatible_versions(rec.versions, versions):
            report.skip("other TVM or space version")
            continue
        if rec.workload not in defs:
            report.skip("workload not in the op files")
            continue
        ident = (rec.workload, json.dumps(rec.args, sort_keys=True), rec.task_key)
        if ident not in tasks:
            tasks[ident] = rebuild_task(defs[rec.workload], dict(rec.args), rec.task_key)
        task = tasks[ident]
        if task is None:
            report.skip("op file changed since the record was made")
            continue
        key = (rec.task_key, rec.target_key, rec.hardware_key)
        if key not in buckets:
            target = TargetSpec(target_kind, config, dict(rec.hardware), False)
            buckets[key] = (task, target, [])
        buckets[key][2].append((Candidate.from_json(rec.candidate), rec.result))
    return list(buckets.values())


def train_model(db_url: str, op_files: list[str], target_kind: str, rounds: int | None = None,
                space_factory=generate_space):
    """A new ranker trained, with the transfer settings, on every usable record of
    `target_kind` in the database at `db_url` whose workload one of `op_files` defines:
    (model, TransferReport). Candidates replay in `space_factory(task, target)`. A
    database with nothing usable, or with no ranking signal, is a UserError."""
    from cost_model import CostModelError, FeatureConfig, XGBRanker

    report = TransferReport()
    db = open_database(db_url, create=False)  # a mistyped path must not make a new file
    try:
        groups = groups_from_database(db, op_files, target_kind,
                                      current_versions(SPACE_VERSION), report)
        url = db.url  # with any password masked
    finally:
        db.close()
    if not groups:
        raise UserError(f"{url}: no usable {target_kind} records "
                        f"(skipped: {report.skipped_records or 'none'})")
    try:
        model = XGBRanker(features=FeatureConfig(target_kind=target_kind)).for_transfer(rounds)
    except CostModelError as e:  # xgboost is not installed
        raise UserError(str(e)) from None
    train_from_records(groups, None, report=report, model=model, space_factory=space_factory)
    if not model.trained:
        raise UserError("records carry no ranking signal (each task needs two candidates "
                        "with different outcomes)")
    return model, report
