"""A tuning record: one measured (or failed) candidate with everything needed to judge
whether it may be applied elsewhere. Records are JSON data, never pickles."""
from __future__ import annotations

import getpass
import json
import socket
import time
from dataclasses import dataclass, field, replace

from ..results import MeasureResult


def _canon(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Record:
    task_key: str
    workload: str
    args: dict
    target_key: str          # canonical JSON of the target config
    hardware: dict           # fingerprint: CPU model / GPU name, SM count, driver
    hardware_key: str
    versions: dict           # {"autosched", "tvm", "space"}
    candidate: dict          # Candidate.to_json()
    candidate_key: str
    result: MeasureResult
    provenance: dict = field(default_factory=dict)  # host, user, time, settings
    id: int | None = None

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def latency(self) -> float:
        return self.result.median

    def with_id(self, rid: int) -> "Record":
        return replace(self, id=rid)

    def to_json(self) -> dict:
        return {"task_key": self.task_key, "workload": self.workload, "args": self.args,
                "target_key": self.target_key, "hardware": self.hardware,
                "hardware_key": self.hardware_key, "versions": self.versions,
                "candidate": self.candidate, "candidate_key": self.candidate_key,
                "result": self.result.to_json(), "provenance": self.provenance, "id": self.id}

    @staticmethod
    def from_json(d: dict) -> "Record":
        try:
            return Record(
                task_key=str(d["task_key"]), workload=str(d["workload"]), args=dict(d["args"]),
                target_key=str(d["target_key"]), hardware=dict(d["hardware"]),
                hardware_key=str(d["hardware_key"]), versions=dict(d["versions"]),
                candidate=dict(d["candidate"]), candidate_key=str(d["candidate_key"]),
                result=MeasureResult.from_json(d["result"]),
                provenance=dict(d.get("provenance") or {}), id=d.get("id"))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a record: {e}") from None

    def dumps(self) -> str:
        return _canon(self.to_json())


def provenance(settings: dict | None = None) -> dict:
    """Who measured, where and when, and how."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return {"host": socket.gethostname(), "user": user, "time": time.time(),
            "settings": dict(settings or {})}


def make_record(task, target, candidate, result: MeasureResult, versions: dict,
                settings: dict | None = None) -> Record:
    """The record for one measurement of `candidate` of `task` on `target` (TargetSpec)."""
    return Record(task_key=task.key, workload=task.workload, args=dict(task.args),
                  target_key=target.key, hardware=dict(target.fingerprint),
                  hardware_key=target.hardware_key, versions=dict(versions),
                  candidate=candidate.to_json(), candidate_key=candidate.key,
                  result=result, provenance=provenance(settings))


def compatible_versions(recorded: dict, current: dict) -> bool:
    """A record applies only where TVM and the search-space version are the same: a
    candidate replays into a different schedule under another space or TVM version."""
    return recorded.get("tvm") == current.get("tvm") and recorded.get("space") == current.get("space")
