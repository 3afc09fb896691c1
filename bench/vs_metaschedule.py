"""autosched against MetaSchedule at the same trial budget, side by side, in one run.

For each operator: tune with autosched and with MetaSchedule (`tune_tir`) on the same
target with the same number of trials, time both best kernels with the same method
(`time_evaluator`, number=10, repeat=5, min_repeat_ms=50, median), check both against
numpy, and time torch and the default (unscheduled) build. Prints per-op latency, the
ratio, the geometric mean, tuning wall time per trial, and writes a tuning-curve PNG.

    python bench/vs_metaschedule.py --trials 64 [--ops matmul,softmax] [--out bench/results]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ops import OPS, torch_fn  # noqa: E402
from peers import metaschedule, random_args, time_tvm, torch_time  # noqa: E402


def tune_autosched(task, trials: int, strategy: str, seed: int, work_dir: str):
    """Tune; returns (scheduled module, wall seconds, best-latency curve per trial)."""
    from search_space import Candidate, generate_space

    from autosched.config import TuneConfig
    from autosched.db import open_database
    from autosched.tuner import tune_tasks

    url = f"sqlite:///{work_dir}/bench.db"
    config = TuneConfig(target="llvm", trials=trials, db_url=url, strategy=strategy,
                        seed=seed, work_dir=work_dir)
    start = time.perf_counter()
    result = tune_tasks([task], config)
    wall = time.perf_counter() - start
    db = open_database(url)
    records = db.records(task_key=task.key)
    db.close()
    curve, best = [], math.inf
    for rec in records:
        best = min(best, rec.latency)
        curve.append(best)
    state = result.tasks[0]
    mod = generate_space(task, result.target).apply(Candidate.from_json(state.best_record.candidate))
    return mod, wall, curve


def _check(outputs, expected, name):
    import numpy as np

    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=name)


def bench_op(op, trials, strategy, seed, target_spec):
    import torch

    task = op.task()
    tvm_target = target_spec.tvm()
    args = random_args(task, seed)
    n_in = len(task.inputs)
    default_s, expected = time_tvm(task.mod, tvm_target, args)
    expected = expected[n_in:]
    with tempfile.TemporaryDirectory() as work:
        ours_mod, ours_wall, ours_curve = tune_autosched(task, trials, strategy, seed, work)
    ours_s, out = time_tvm(ours_mod, tvm_target, args)
    _check(out[n_in:], expected, f"autosched {op.name}")
    ms_mod, ms_wall, ms_curve = metaschedule(task, tvm_target, trials, seed)
    ms_s, out = time_tvm(ms_mod, tvm_target, args)
    _check(out[n_in:], expected, f"metaschedule {op.name}")
    torch_s = torch_time(torch_fn(op.name, task), [torch.from_numpy(a) for a in args[:n_in]])
    return {"op": op.name, "task": task.name, "flops": task.flops, "default_s": default_s,
            "autosched_s": ours_s, "metaschedule_s": ms_s, "torch_s": torch_s,
            "ratio": ours_s / ms_s, "autosched_wall_s": ours_wall, "metaschedule_wall_s": ms_wall,
            "autosched_curve": ours_curve, "metaschedule_curve": ms_curve, "trials": trials}


def print_table(rows) -> str:
    from autosched.progress import format_table

    body = [(r["op"], f"{r['autosched_s'] * 1e3:.3f}", f"{r['metaschedule_s'] * 1e3:.3f}",
             f"{r['ratio']:.2f}", f"{r['torch_s'] * 1e3:.3f}", f"{r['default_s'] * 1e3:.2f}",
             f"{r['autosched_wall_s'] / r['trials']:.2f}",
             f"{r['metaschedule_wall_s'] / r['trials']:.2f}") for r in rows]
    text = format_table(("op", "autosched ms", "MetaSchedule ms", "ratio", "torch ms",
                         "default ms", "ours s/trial", "MS s/trial"), body)
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    worst = max(rows, key=lambda r: r["ratio"])
    text += (f"\ngeometric-mean ratio autosched/MetaSchedule: {geo:.3f}   worst: {worst['op']} "
             f"{worst['ratio']:.2f}   trials per op: {rows[0]['trials']}")
    return text


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(rows))
    nrows = math.ceil(len(rows) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    for ax, r in zip(axes.flat, rows):
        for key, label in (("autosched_curve", "autosched"), ("metaschedule_curve", "MetaSchedule")):
            g = [r["flops"] / s / 1e9 if math.isfinite(s) else 0.0 for s in r[key]]
            ax.plot(range(1, len(g) + 1), g, drawstyle="steps-post", label=label)
        ax.axhline(r["flops"] / r["torch_s"] / 1e9, color="gray", ls="--", label="torch")
        ax.set_title(r["op"], fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--ops", default=",".join(o.name for o in OPS))
    p.add_argument("--strategy", default="evolutionary")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench/results")
    a = p.parse_args()
    from autosched.target import resolve_target

    target = resolve_target("llvm")
    os.makedirs(a.out, exist_ok=True)
    wanted = a.ops.split(",")
    rows = []
    for op in [o for o in OPS if o.name in wanted]:
        print(f"== {op.name}", file=sys.stderr, flush=True)
        rows.append(bench_op(op, a.trials, a.strategy, a.seed, target))
        print(print_table(rows), file=sys.stderr, flush=True)
    stem = os.path.join(a.out, f"vs_metaschedule_{a.trials}")
    with open(stem + ".json", "w") as f:
        json.dump({"target": target.config, "hardware": target.fingerprint, "rows": rows}, f,
                  indent=1, default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else str(x))
    plot(rows, stem + ".png")
    print(print_table(rows))
    print(f"wrote {stem}.json and {stem}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
