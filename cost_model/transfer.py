"""Train a cost model from other tasks' measurements (transfer across workloads).

`train_from_records` takes (task, [(candidate, result), ...]) groups, so it does not
depend on where the measurements come from. Candidates are replayed in the task's
search space to get their programs; one that no longer replays (another space version,
a changed sketch) is skipped and counted, never guessed at.

`groups_from_database` turns a tuning database into such groups. A record carries the
workload name and arguments but not the computation itself, so the op files that
define the workloads are needed to rebuild the tasks; a rebuilt task whose key differs
from the record's (the op file changed since) is skipped. Latencies are only compared
within one (task, target, hardware) group.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from .features import FeatureConfig, extract
from .xgb_ranker import XGBRanker


@dataclass
class TransferReport:
    """What went into a transferred model."""

    groups: int = 0
    rows: int = 0
    failures: int = 0
    skipped_candidates: int = 0
    skipped_records: dict = field(default_factory=dict)  # reason -> count

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped_records[reason] = self.skipped_records.get(reason, 0) + n

    def to_json(self) -> dict:
        return {"groups": self.groups, "rows": self.rows, "failures": self.failures,
                "skipped_candidates": self.skipped_candidates,
                "skipped_records": dict(self.skipped_records)}


def train_from_records(groups, target, *, space_factory=None, model: XGBRanker | None = None,
                       report: TransferReport | None = None) -> XGBRanker:
    """A ranker trained on `groups`: iterable of (task, [(Candidate, MeasureResult), ...])
    measured on `target` (a TargetSpec), or (task, target, pairs) triples where groups
    come from several targets of one kind. `space_factory(task, target)` builds the
    search space (default: `search_space.generate_space`). With `model`, the groups are
    added to it (on top of whatever it was loaded from) and trained with its settings;
    without, a new ranker with the transfer settings (`XGBRanker.for_transfer`)."""
    from search_space import InvalidCandidate, generate_space

    make_space = space_factory or generate_space
    model = model or XGBRanker(features=FeatureConfig(target_kind=target.kind)).for_transfer()
    report = report if report is not None else TransferReport()
    for group in groups:
        task, pairs = group[0], group[-1]
        space = make_space(task, group[1] if len(group) == 3 else target)
        rows, latencies = [], []
        for cand, result in pairs:
            try:
                mod = space.apply(cand)
            except InvalidCandidate:
                report.skipped_candidates += 1
                continue
            rows.append(np.asarray(extract(task, cand, mod, model.config), dtype=np.float32))
            latencies.append(result.median if result.ok else math.inf)
        if len(rows) < 2:
            continue
        model.add_group(task.key, np.stack(rows), np.asarray(latencies))
        report.groups += 1
        report.rows += len(rows)
        report.failures += sum(1 for x in latencies if not math.isfinite(x))
    model.fit()
    model.summary = dict(model.summary, transfer=report.to_json())
    return model


def rebuild_task(wdef, args: dict, key: str):
    """The task a record was measured on, rebuilt from its workload definition and stored
    arguments (ordered as the definition lists them, for its name); None when the
    definition has changed since (the rebuilt key differs)."""
    from autosched.workload import make_task

    ordered = {k: args[k] for k in wdef.params if k in args}
    task = make_task(wdef, {**ordered, **args})
    return task if task.key == key else None


def groups_from_database(db, op_files: list[str], target_kind: str, versions: dict,
                         report: TransferReport | None = None) -> list:
    """(task, target, [(candidate, result), ...]) per (task, target, hardware) in `db`,
    for records of `target_kind` whose versions match `versions`."""
    from autosched.db import compatible_versions
    from autosched.target import TargetSpec
    from autosched.workload import load_op_file
    from search_space import Candidate

    report = report if report is not None else TransferReport()
    defs = {}
    for path in op_files:
        for name, wdef in load_op_file(path).items():
            defs.setdefault(name, wdef)
    tasks: dict = {}
    buckets: dict = {}
    stream = getattr(db, "iter_records", None) or db.records  # stream when the backend can
    for rec in stream():
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
