"""Records <-> table rows, and the checks a record passes before it is stored.

Both backends store the same rows: JSON columns hold canonical JSON text (sorted keys,
no spaces), and the columns that queries filter or rank on (latency, failure kind,
TVM and search-space versions) are extracted from the record when it is inserted.
"""
from __future__ import annotations

import json
import math

from ..results import MeasureResult
from .record import Record

#: What every record query selects; `row_record` turns one such row into a Record.
RECORD_COLUMNS = ("r.id, r.task_key, w.workload, w.args, r.target_key, r.hardware, "
                  "r.hardware_key, r.versions, r.candidate, r.candidate_key, r.result, "
                  "r.provenance")
RECORD_FROM = "autosched_records r JOIN autosched_workloads w ON w.task_key = r.task_key"

INSERT_RECORD = (
    "INSERT INTO autosched_records (task_key, target_key, hardware_key, hardware, versions,"
    " tvm_version, space_version, candidate_key, candidate, result, latency, error_kind,"
    " provenance, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (task_key, target_key, hardware_key, versions, candidate_key) DO NOTHING"
    " RETURNING id")
_UNIQUE = ("task_key = ? AND target_key = ? AND hardware_key = ? AND versions = ? "
           "AND candidate_key = ?")


def delete_failure_sql(n_kinds: int) -> str:
    """DELETE of the failure record (of one of `n_kinds` kinds) with a record's unique
    key; parameters: `unique_key(record_row(...))` then the kinds."""
    return (f"DELETE FROM autosched_records WHERE {_UNIQUE} "
            f"AND error_kind IN ({', '.join('?' * n_kinds)})")


def unique_key(row: tuple) -> tuple:
    """(task, target, hardware, versions, candidate key) of a `record_row` tuple."""
    return row[0], row[1], row[2], row[4], row[7]


INSERT_WORKLOAD = ("INSERT INTO autosched_workloads (task_key, workload, args) VALUES (?, ?, ?)"
                   " ON CONFLICT (task_key) DO NOTHING")


def canon(obj) -> str:
    """Canonical JSON text; `allow_nan=False` because NaN is not JSON."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def version_pair(versions: dict) -> tuple[str, str] | None:
    """(TVM version, space version) that decide compatibility, or None when either is
    missing: such versions are compatible with nothing stored."""
    if not isinstance(versions, dict):
        return None
    tvm, space = versions.get("tvm"), versions.get("space")
    if not (isinstance(tvm, str) and tvm and isinstance(space, str) and space):
        return None
    return tvm, space


def _text(name: str, value) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")


def check_record(rec: Record) -> None:
    """Raise ValueError when `rec` cannot be stored faithfully (so an import can reject
    a bad file before writing anything)."""
    for name in ("task_key", "workload", "target_key", "hardware_key", "candidate_key"):
        _text(name, getattr(rec, name))
    for name in ("args", "hardware", "versions", "candidate", "provenance"):
        if not isinstance(getattr(rec, name), dict):
            raise ValueError(f"{name} must be a JSON object")
    if version_pair(rec.versions) is None:
        raise ValueError("versions need non-empty 'tvm' and 'space' strings")
    if not isinstance(rec.result, MeasureResult):
        raise ValueError("result must be a MeasureResult")
    if rec.result.ok and not all(math.isfinite(x) and x >= 0 for x in rec.result.latencies):
        raise ValueError("latencies must be finite and non-negative")
    try:
        for name in ("args", "hardware", "versions", "candidate", "provenance"):
            canon(getattr(rec, name))
        canon(rec.result.to_json())
    except (TypeError, ValueError) as e:
        raise ValueError(f"not JSON-serialisable: {e}") from None


def record_row(rec: Record, created: float) -> tuple:
    """The parameters of INSERT_RECORD for `rec` (already checked)."""
    tvm, space = version_pair(rec.versions)
    latency = rec.result.median if rec.ok else None
    return (rec.task_key, rec.target_key, rec.hardware_key, canon(rec.hardware),
            canon(rec.versions), tvm, space, rec.candidate_key, canon(rec.candidate),
            canon(rec.result.to_json()), latency, rec.result.error_kind,
            canon(rec.provenance), created)


def workload_row(rec: Record) -> tuple:
    return rec.task_key, rec.workload, canon(rec.args)


def row_record(row) -> Record:
    """A Record from a row selected with RECORD_COLUMNS."""
    (rid, task_key, workload, args, target_key, hardware, hardware_key, versions, candidate,
     candidate_key, result, provenance) = row
    return Record(task_key=task_key, workload=workload, args=json.loads(args),
                  target_key=target_key, hardware=json.loads(hardware),
                  hardware_key=hardware_key, versions=json.loads(versions),
                  candidate=json.loads(candidate), candidate_key=candidate_key,
                  result=MeasureResult.from_json(json.loads(result)),
                  provenance=json.loads(provenance), id=int(rid))


def task_row(task_json: dict) -> tuple:
    """(task_key, workload, args, flops, arg_specs) from Task.to_json()."""
    try:
        key, workload = task_json["key"], task_json["workload"]
        args = canon(dict(task_json.get("args") or {}))
        flops = task_json.get("flops")
        flops = None if flops is None else float(flops)
        specs = canon({"inputs": list(task_json.get("inputs") or []),
                       "outputs": list(task_json.get("outputs") or [])})
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"not a task description: {e}") from None
    _text("key", key)
    _text("workload", workload)
    return key, workload, args, flops, specs


def task_json(row) -> dict:
    """The Task.to_json() shape from a workloads row (FLOPs and specs may be unknown
    when the workload only arrived with imported records)."""
    key, workload, args, flops, specs = row
    specs = json.loads(specs) if specs else {}
    return {"workload": workload, "args": json.loads(args), "key": key, "flops": flops,
            "inputs": specs.get("inputs", []), "outputs": specs.get("outputs", [])}
