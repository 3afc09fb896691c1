"""Train a cost model from other tasks' measurements (transfer across workloads).

`train_from_records` takes (task, [(candidate, result), ...]) groups, so it does not
depend on where the measurements come from. Candidates are replayed in the task's
search space to get their programs; one that no longer replays (another space version,
a changed sketch) is skipped and counted, never guessed at.

Where the groups come from is the application's business (`autosched.training_data`
turns a tuning database into them). Latencies are only compared within one group.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .base import CostModel
from .features import FeatureConfig
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


def train_from_records(groups, target, *, space_factory=None, model: CostModel | None = None,
                       report: TransferReport | None = None) -> CostModel:
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
        cands, mods, latencies = [], [], []
        for cand, result in pairs:
            try:
                mods.append(space.apply(cand))
            except InvalidCandidate:
                report.skipped_candidates += 1
                continue
            cands.append(cand)
            latencies.append(result.median if result.ok else math.inf)
        if len(cands) < 2:
            continue
        model.add_group(task.key, model.features(task, cands, mods), np.asarray(latencies))
        report.groups += 1
        report.rows += len(cands)
        report.failures += sum(1 for x in latencies if not math.isfinite(x))
    model.fit()
    model.summary = dict(model.summary, transfer=report.to_json())
    return model
