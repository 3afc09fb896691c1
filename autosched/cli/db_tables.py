"""Plain-text tables for `autosched db stats` and `autosched db best`."""
from __future__ import annotations

from ..tables import format_table, gflops_label, target_label


def workload_label(workload: str, args: dict, width: int = 40) -> str:
    inner = ",".join(f"{k}={v}" for k, v in args.items())
    label = f"{workload}({inner})"
    return label if len(label) <= width else label[:width - 3] + "..."


def hardware_label(fingerprint: dict, hardware_key: str, width: int = 28) -> str:
    name = str(fingerprint.get("model") or fingerprint.get("name") or "?")
    if len(name) > width:
        name = name[:width - 3] + "..."
    return f"{name} [{hardware_key[:8]}]"


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4f}"


def versions_label(versions: dict) -> str:
    return f"{versions.get('tvm')}/{versions.get('space')}"


def stats_text(stats: dict) -> str:
    """The summary and one row per (task, target, hardware, versions) group, with its
    failures by kind (a task whose candidates all failed shows at a glance)."""
    failures = ", ".join(f"{k} {n}" for k, n in sorted(stats["failures"].items()))
    failed = stats["records"] - stats["ok"]
    lines = [f"database  {stats['url']} ({stats['backend']}, schema {stats['schema_version']})",
             f"records   {stats['records']} ({stats['ok']} correct, {failed} failed"
             + (f": {failures}" if failures else "") + f"), {stats['workloads']} workloads"]
    if not stats["groups"]:
        return "\n".join(lines)
    header = ["WORKLOAD", "TASK", "TARGET", "HARDWARE", "TVM/SPACE", "FAILURES", "RECORDS",
              "OK", "FAILED", "BEST_MS", "GFLOP/S"]
    rows = [[workload_label(g["workload"], g["args"]), g["task_key"][:12],
             target_label(g["target_key"]), hardware_label(g["hardware"], g["hardware_key"]),
             versions_label(g["versions"]), failures_label(g["failures"]), str(g["records"]),
             str(g["ok"]), str(g["records"] - g["ok"]), ms(g["best_latency"]),
             gflops_label(g["flops"], g["best_latency"])] for g in stats["groups"]]
    return "\n".join(lines + ["", format_table(header, rows, right=5, rule=False)])


def failures_label(failures: dict) -> str:
    """'build_error 16, run_error 1' (by kind, so a poisoned task shows), '-' for none."""
    return ", ".join(f"{k} {n}" for k, n in sorted(failures.items())) or "-"


def best_text(entries: list[dict]) -> str:
    """Rows of `autosched db best`: each entry has a record, its rank in its scope and
    the workload's FLOPs (None when unknown)."""
    header = ["WORKLOAD", "TASK", "TARGET", "HARDWARE", "TVM/SPACE", "CANDIDATE", "RANK",
              "MS", "GFLOP/S", "RECORD"]
    rows = []
    for e in entries:
        r = e["record"]
        rows.append([workload_label(r.workload, r.args), r.task_key[:12],
                     target_label(r.target_key), hardware_label(r.hardware, r.hardware_key),
                     versions_label(r.versions), r.candidate_key[:12], str(e["rank"]),
                     ms(r.latency), gflops_label(e["flops"], r.latency), str(r.id)])
    return format_table(header, rows, right=4, rule=False)
