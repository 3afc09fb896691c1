"""Summary counts of a database: what `autosched db stats` prints and `stats()` returns."""
from __future__ import annotations

import json

_GROUPS = ("SELECT r.task_key, r.target_key, r.hardware_key, r.tvm_version, r.space_version, "
           "r.error_kind, COUNT(*), MIN(r.latency) FROM autosched_records r "
           "GROUP BY r.task_key, r.target_key, r.hardware_key, r.tvm_version, "
           "r.space_version, r.error_kind")
_WORKLOADS = "SELECT task_key, workload, args, flops FROM autosched_workloads"
_HARDWARE = ("SELECT hardware_key, MIN(hardware) FROM autosched_records "
             "GROUP BY hardware_key")


def _read_all(cur) -> tuple[list, list, list]:
    out = []
    for sql in (_GROUPS, _WORKLOADS, _HARDWARE):
        cur.execute(sql, ())
        out.append(cur.fetchall())
    return tuple(out)


def _group(workloads: dict, hardware: dict, key: tuple) -> dict:
    task_key, target_key, hardware_key, tvm, space = key
    workload, args, flops = workloads.get(task_key, ("?", "{}", None))
    return {"task_key": task_key, "workload": workload, "args": json.loads(args),
            "flops": flops, "target_key": target_key, "hardware_key": hardware_key,
            "hardware": json.loads(hardware.get(hardware_key, "{}")),
            "versions": {"tvm": tvm, "space": space},
            "records": 0, "ok": 0, "failures": {}, "best_latency": None}


def collect(db) -> dict:
    """Totals and one entry per (task, target, hardware, TVM version, space version),
    read in one transaction so the numbers agree with each other."""
    groups_rows, workload_rows, hardware_rows = db.transaction(_read_all, write=False)
    workloads = {k: (w, a, f) for k, w, a, f in workload_rows}
    hardware = dict(hardware_rows)
    groups: dict[tuple, dict] = {}
    totals = {"records": 0, "ok": 0, "failures": {}}
    for *key, kind, n, best in groups_rows:
        g = groups.setdefault(tuple(key), _group(workloads, hardware, tuple(key)))
        for acc in (g, totals):
            acc["records"] += n
            if kind is None:
                acc["ok"] += n
            else:
                acc["failures"][kind] = acc["failures"].get(kind, 0) + n
        if kind is None:
            g["best_latency"] = best
    ordered = sorted(groups.values(), key=lambda g: (
        g["workload"], g["task_key"], g["target_key"], g["hardware_key"],
        str(g["versions"]["tvm"]), str(g["versions"]["space"])))
    return {"url": db.url, "backend": db.dialect.name, "schema_version": db.schema_version,
            "workloads": len(workloads), **totals, "groups": ordered}
