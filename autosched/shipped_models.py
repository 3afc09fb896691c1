"""Cost models that ship with autosched: a warm start from real GPU measurements.

A first run on a GPU has nothing in its database to learn from, and a cold ranker
ranks the first batches no better than chance. `autosched/cost_models/` may hold a
ranker per target family, trained on GPU records that were measured for real and
committed with their provenance (bench/gpu/logs/README.md): `cuda_sm_90.json` (and its
sidecar `cuda_sm_90.meta.json`) serves sm_90 and sm_90a alike (`arch_family`), since
the features describe programs and one family's GPUs rank them alike. It is made by
`bench/gpu/train_warm_start.py LOG... -o autosched/cost_models/cuda_<family>.json`
(`train_shipped`), which never ships a model of synthetic records.

The tuner loads it (`load_shipped`) when a run on that family has no model given
(`--cost-model`), transfer on, and no records of other shapes in the database to warm-start
from (`warm_start.py`); later measurements are boosted on top of it, as for `--cost-model`.

Honesty: the sidecar's `summary["shipped"]` lists every task (key, workload, arguments,
record count) the model was trained on, the logs (path, SHA-256, machines, provenance),
the versions and what was held out. A tuned task that is among them is used as it is,
since those are real measurements of that task, and the run says so; an evaluation of
the warm start (bench) must not do that: it trains with the evaluated task held out
(`--hold-out`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field

from .errors import UserError

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cost_models")
METADATA_FORMAT = 1
_ARCH = re.compile(r"^sm_(\d+)[af]?$")


def arch_family(arch: str) -> str | None:
    """`sm_90a` / `sm_90` -> `sm_90` (the arch-specific suffix dropped); None for a
    string that is no CUDA arch."""
    m = _ARCH.match(str(arch))
    return f"sm_{m.group(1)}" if m else None


def model_name(kind: str, family: str) -> str:
    """The file a family's shipped model has: `cuda_sm_90.json`."""
    return f"{kind}_{family}.json"


def shipped_path(target, folder: str | None = None) -> str | None:
    """The shipped model for `target` (a TargetSpec) in `folder` (default: the
    package's), or None when there is none (and for every non-CUDA target)."""
    family = arch_family(target.config.get("arch", "")) if target.kind == "cuda" else None
    if family is None:
        return None
    path = os.path.join(folder or PACKAGE_DIR, model_name(target.kind, family))
    return path if os.path.isfile(path) else None


def read_metadata(path: str) -> dict:
    """What a shipped model was trained on (its sidecar's `summary["shipped"]`); {} when
    the sidecar is missing, unreadable or says nothing of it."""
    from cost_model.xgb_ranker import sidecar_path

    try:
        with open(sidecar_path(path)) as f:
            meta = json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}
    shipped = meta.get("summary", {}).get("shipped") if isinstance(meta, dict) else None
    return shipped if isinstance(shipped, dict) else {}


@dataclass
class ShippedWarmStart:
    """The run's cost model started from a shipped model (or why it did not)."""

    family: str
    path: str
    records: int = 0
    tasks: list[str] = field(default_factory=list)     # the names it was trained on
    tuned_among: list[str] = field(default_factory=list)  # tuned tasks among them
    skipped: str | None = None                         # why it was not used

    def describe(self) -> str:
        if self.skipped:
            return f"the shipped {self.family} model was not used: {self.skipped}"
        line = (f"cost model warm-started from the shipped {self.family} model: "
                f"{self.records} GPU records of {len(self.tasks)} tasks")
        if self.tuned_among:
            line += (f" (including {', '.join(self.tuned_among)}: real measurements of "
                     "the tuned task)")
        return line


def load_shipped(model, target, tasks, folder: str | None = None) -> ShippedWarmStart | None:
    """Load the shipped model of `target`'s family into `model` (the run's shared
    CostModel); None when there is none. A model that does not load (features of
    another version) leaves `model` as it was and says why; so does a synthetic one in
    the package's own folder, which must never happen."""
    from cost_model import CostModelError

    path = shipped_path(target, folder)
    if path is None:
        return None
    meta = read_metadata(path)
    family = arch_family(target.config.get("arch", "")) or "?"
    if meta.get("synthetic") and folder is None:
        return ShippedWarmStart(family, path, skipped="it was trained on synthetic records")
    try:
        model.load(path)
    except CostModelError as e:
        return ShippedWarmStart(family, path, skipped=str(e))
    trained = meta.get("tasks") or []
    keys = {t.get("key") for t in trained}
    return ShippedWarmStart(family, path, int(meta.get("records", 0)),
                            [t.get("name", t.get("workload", "?")) for t in trained],
                            [t.name for t in tasks if t.key in keys])


class _LogRecords:
    """The records of some logs, as `training_data.groups_from_database` reads a
    database."""

    def __init__(self, records):
        self.records = records

    def iter_records(self):
        return iter(self.records)


def _held_out(rec, hold_out) -> bool:
    return any(h == rec.workload or (len(h) >= 8 and rec.task_key.startswith(h))
               for h in hold_out)


def _is_synthetic(rec) -> bool:
    return bool(rec.hardware.get("synthetic") or rec.provenance.get("synthetic"))


def _log_provenance(path: str, records) -> dict:
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    machines = sorted({f"{r.hardware.get('name') or r.hardware.get('model') or '?'} "
                       f"({r.hardware_key})" for r in records})
    times = [r.provenance.get("time") for r in records
             if isinstance(r.provenance.get("time"), (int, float))]
    return {"path": path, "sha256": digest, "records": len(records), "machines": machines,
            "hosts": sorted({str(r.provenance.get("host", "?")) for r in records}),
            "measured": [min(times), max(times)] if times else None,
            "synthetic": any(_is_synthetic(r) for r in records)}


def train_shipped(logs: list[str], op_files: list[str], hold_out=(), rounds=None,
                  synthetic_ok: bool = False):
    """A ranker trained, with the transfer settings, on the CUDA records of `logs`
    (`autosched db export` files) whose workloads `op_files` define, less the held-out
    workloads or task keys (8+ characters): (model, metadata), the metadata also in
    the model's summary["shipped"]. Records of several arch families, synthetic records
    (unless `synthetic_ok`), or nothing to learn from are a UserError."""
    from cost_model import FeatureConfig, XGBRanker
    from cost_model.transfer import TransferReport, train_from_records
    from search_space import SPACE_VERSION

    from .db.jsonl import read_records
    from .training_data import groups_from_database
    from .versions import current_versions

    provenance, kept, held, held_records = [], [], set(), []
    for path in logs:
        records = read_records(path)
        provenance.append(_log_provenance(path, records))
        if provenance[-1]["synthetic"] and not synthetic_ok:
            raise UserError(f"{path}: synthetic records; a model of them is never shipped "
                            "(--synthetic-ok trains one for tests)")
        for rec in records:
            if _held_out(rec, hold_out):
                held.add(f"{rec.workload}{json.dumps(rec.args, sort_keys=True)}")
                held_records.append(rec)
            else:
                kept.append(rec)
    unmatched = [h for h in hold_out if not any(_held_out(r, [h]) for r in
                                                 [*kept, *held_records])] if hold_out else []
    if unmatched:
        raise UserError(f"--hold-out {unmatched[0]}: no record of that workload or task key "
                        "in the logs (nothing would be held out)")
    families = {arch_family(json.loads(r.target_key).get("arch", "")) for r in kept
                if json.loads(r.target_key).get("kind") == "cuda"}
    if len(families) != 1 or None in families:
        raise UserError(f"the logs hold CUDA records of {len(families)} arch families "
                        f"({', '.join(sorted(str(f) for f in families)) or 'none'}); "
                        "train one family at a time")
    (family,) = families
    report = TransferReport()
    groups = groups_from_database(_LogRecords(kept), op_files, "cuda",
                                  current_versions(SPACE_VERSION), report)
    model = XGBRanker(features=FeatureConfig(target_kind="cuda")).for_transfer(rounds)
    train_from_records(groups, None, report=report, model=model)
    if not model.trained:
        raise UserError(f"nothing to learn from: {report.rows} usable records "
                        f"(skipped: {report.skipped_records or 'none'})")
    tasks: dict = {}
    for task, _, pairs in groups:
        entry = tasks.setdefault(task.key, {"key": task.key, "name": task.name,
                                            "workload": task.workload,
                                            "args": dict(task.args), "records": 0})
        entry["records"] += len(pairs)
    meta = {"format": METADATA_FORMAT, "kind": "cuda", "family": family,
            "records": report.rows, "tasks": list(tasks.values()),
            "held_out": sorted(held), "hold_out": list(hold_out), "logs": provenance,
            "versions": current_versions(SPACE_VERSION),
            "skipped_records": dict(report.skipped_records),
            "synthetic": any(p["synthetic"] for p in provenance)}
    model.summary = dict(model.summary, shipped=meta)
    return model, meta
