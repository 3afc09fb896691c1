"""`autosched report`: what the database knows, per task, as a table and tuning curves."""
from __future__ import annotations

import argparse
import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .options import DB_URL_HELP
from ..tables import format_table, gflops_label, latency_label, target_label


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `report` command to the main CLI's subparsers."""
    p = subparsers.add_parser("report",
                              help="per-task table and tuning curves from the database")
    p.add_argument("--db", metavar="URL", help=DB_URL_HELP)
    p.add_argument("-o", "--output", default="logs/report", metavar="DIR",
                   help="where the tuning-curve PNGs go")
    p.add_argument("--no-plots", action="store_true", help="print the table only")
    p.add_argument("--model-library", metavar="DIR",
                   help="also print the per-operator choices of a library that "
                        "`autosched export-model` wrote")
    return p


# Said instead of the plots where matplotlib is missing (it is an optional extra).
NO_MATPLOTLIB = ("autosched: no tuning-curve plots: they need matplotlib (pip install "
                 "'autosched[plot]'); --no-plots leaves them out")


def run(args: argparse.Namespace) -> int:
    """Print the per-task table and write one tuning-curve PNG per task (or, without
    matplotlib, say on stderr how to get them: the table is the report's substance)."""
    import sys

    from ..db import open_database

    if args.model_library:
        _print_model_choices(args.model_library)

    db = open_database(args.db)
    try:
        summaries = summarize(db)
    finally:
        db.close()
    if not summaries:
        print("no records")
        return 0
    print(table(summaries))
    if args.no_plots:
        return 0
    try:
        import matplotlib  # noqa: F401  (only whether it is there)
    except ImportError:
        print(NO_MATPLOTLIB, file=sys.stderr)
        return 0
    for path in plot_curves(summaries, args.output):
        print(f"wrote {path}")
    return 0


def _print_model_choices(directory: str) -> None:
    from ..errors import UserError
    from ..model.choice import choices_table, read_choices

    choices = read_choices(directory)
    if choices is None:
        raise UserError(f"--model-library {directory}: no model_ops.json (a library made "
                        "by `autosched export-model`)")
    won = sum(1 for c in choices if c.chosen == "autosched")
    print(f"{directory}: {won} of {len(choices)} operators run autosched kernels")
    print(choices_table(choices))
    print()


@dataclass
class TaskSummary:
    """Records of one task on one target and machine, in the order they were measured."""

    name: str
    task_key: str
    target: str
    hardware: str
    flops: float
    latencies: list[float] = field(default_factory=list)   # inf for failures
    failures: Counter = field(default_factory=Counter)

    @property
    def best(self) -> float:
        return min(self.latencies, default=math.inf)

    def curve(self) -> list[float]:
        """Best GFLOP/s after each trial."""
        best, out = math.inf, []
        for lat in self.latencies:
            best = min(best, lat)
            out.append(self.flops / best / 1e9 if math.isfinite(best) and self.flops else 0.0)
        return out


def summarize(db) -> list[TaskSummary]:
    """One summary per (task, target, hardware) in the database."""
    tasks = {t["key"]: t for t in db.tasks()}
    groups: dict[tuple, TaskSummary] = {}
    for rec in db.records():
        gkey = (rec.task_key, rec.target_key, rec.hardware_key)
        if gkey not in groups:
            info = tasks.get(rec.task_key, {})
            args = ",".join(f"{k}={v}" for k, v in rec.args.items())
            groups[gkey] = TaskSummary(f"{rec.workload}({args})", rec.task_key,
                                       target_label(rec.target_key),
                                       str(rec.hardware.get("model") or rec.hardware.get("name")),
                                       float(info.get("flops") or 0.0))
        s = groups[gkey]
        s.latencies.append(rec.latency)
        if not rec.ok:
            s.failures[rec.result.error_kind] += 1
    return list(groups.values())


def table(summaries: list[TaskSummary]) -> str:
    """One row per summary: task, target, machine, best latency and GFLOP/s, trials, failures."""
    rows = []
    for s in summaries:
        fails = ", ".join(f"{k}={v}" for k, v in sorted(s.failures.items())) or "0"
        rows.append((s.name, s.target, s.hardware, latency_label(s.best),
                     gflops_label(s.flops, s.best), str(len(s.latencies)), fails))
    return format_table(("task", "target", "hardware", "best latency", "GFLOP/s", "trials",
                         "failures"), rows)


def plot_curves(summaries: list[TaskSummary], out_dir: str) -> list[str]:
    """One PNG per task: best GFLOP/s against trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths, used = [], defaultdict(int)
    for s in summaries:
        stem = re.sub(r"[^\w.-]+", "_", f"{s.name.split('(')[0]}-{s.task_key[:8]}-{s.target}")
        used[stem] += 1
        path = os.path.join(out_dir, f"{stem}{'' if used[stem] == 1 else used[stem]}.png")
        fig, ax = plt.subplots(figsize=(6, 3.5))
        curve = s.curve()
        ax.plot(range(1, len(curve) + 1), curve, drawstyle="steps-post")
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s")
        ax.set_title(f"{s.name} on {s.target}", fontsize=9)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths
