"""Does a model trained on other tasks' records make tuning a new task cheaper?

    python bench/transfer_curve.py --db logs/bench_vs_ms.db --held-out matmul,dense_bias_gelu
                                   [--trials 256] [--seed 1] [--out bench/results]
    python bench/transfer_curve.py --similar-shapes [--held-out ...] [--seed 1]
    python bench/transfer_curve.py --summarize bench/results/transfer_curve_*.json

For each held-out operator of bench/ops.py: train a cost model on every record in `--db`
(llvm, this TVM and space version) of the *other* operators (the held-out task's own
records are excluded), then tune the held-out task twice from an empty database, with
the same seed and budget: cold (the cost model starts untrained) and transferred
(`--model` = the trained model). The reference is the best latency of the cold
256-trial run; each curve's "trials to 90%" is the first trial whose best-so-far is
within 90% of that reference's throughput (latency <= best / 0.9). Prints both counts
and their ratio, writes JSON and a PNG of both curves to `--out`/transfer_curve_[shapes_]TRIALS
[_seedN].{json,png} (the seed only when it is not 1).

`--db` is the database bench/vs_metaschedule.py keeps with `--db` (7 operators x 256
records): run that first.

`--similar-shapes` measures the other transfer, the one `autosched tune` does by itself:
from other shapes of the same workload. Each shape of `SIMILAR_SHAPES` is first tuned
cold for `--shape-trials` into `--shapes-db` (kept: a rerun tunes only shapes with fewer
records), then the held-out shape is tuned from an empty database (cold, --no-transfer)
and from a copy of that database (warm: the automatic warm start of the cost model and
the other shapes' best records as seeds, exactly what a user's run gets).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402
from ops import OPS, best_so_far, database_groups, recorded  # noqa: E402

# Other shapes of the benchmarked workloads (the held-out shape is the one in ops.OPS).
SIMILAR_SHAPES = {
    "matmul": ["M=512,N=512,K=256", "M=256,N=512,K=512", "M=384,N=384,K=384",
               "M=512,N=256,K=384"],
    "dense_bias_gelu": ["M=128,N=1024,K=1024", "M=256,N=768,K=768", "M=256,N=1024,K=512",
                        "M=512,N=512,K=1024"],
}


def train_model(db_url: str, held_key: str, path: str) -> dict:
    """Train on every usable llvm record except the held-out task's; returns the report."""
    from cost_model import FeatureConfig, TransferReport, XGBRanker, train_from_records

    report = TransferReport()
    groups = [g for g in database_groups(db_url, report) if g[0].key != held_key]
    if not groups:
        raise SystemExit(f"{db_url}: no records of other tasks to train on")
    model = train_from_records(groups, None, report=report,
                               model=XGBRanker(features=FeatureConfig(target_kind="llvm"))
                               .for_transfer())  # as `autosched model train` does
    model.save(path)
    return {**report.to_json(), "tasks": sorted({g[0].name for g in groups})}


def tune_curve(task, trials: int, seed: int, work_dir: str, cost_model_path: str | None,
               transfer: bool = False):
    """Best-so-far latency per trial of one tuning run on `work_dir`/tune.db (empty
    unless the caller put a database there)."""
    from autosched import TuneConfig, tune_tasks

    url = f"sqlite:///{work_dir}/tune.db"
    start = time.perf_counter()
    result = tune_tasks([task], TuneConfig(target="llvm", trials=trials, db_url=url, seed=seed,
                                           work_dir=work_dir, cost_model_path=cost_model_path,
                                           transfer=transfer))
    wall = time.perf_counter() - start
    if result.warm_start is not None:
        print(f"   {result.warm_start.describe()}", file=sys.stderr, flush=True)
    return best_so_far(recorded(url, task.key)), wall


def shapes_database(op, trials: int, seed: int, path: str) -> list:
    """Tune every shape of SIMILAR_SHAPES[op] cold for `trials` into `path` (only those
    with fewer records); returns their tasks."""
    from autosched import TuneConfig, load_tasks, tune_tasks

    from ops import EXAMPLES

    url = f"sqlite:///{os.path.abspath(path)}"
    tasks = [load_tasks(str(EXAMPLES / op.op_file), [op.workload], shape.split(","))[0]
             for shape in SIMILAR_SHAPES[op.name]]
    for task in tasks:
        have = len(recorded(url, task.key)) if os.path.exists(path) else 0
        if have < trials:
            print(f"== {op.name}: shape {task.name} ({trials - have} trials)", file=sys.stderr,
                  flush=True)
            tune_tasks([task], TuneConfig(target="llvm", trials=trials - have, db_url=url,
                                          seed=seed, transfer=False,
                                          work_dir=os.path.dirname(os.path.abspath(path))))
    return tasks


def run_similar(op, trials: int, seed: int, shape_trials: int, shapes_db: str) -> dict:
    task = op.task()
    others = shapes_database(op, shape_trials, seed, shapes_db)
    with tempfile.TemporaryDirectory() as tmp:
        curves, walls = cold_and_transfer(op, task, trials, seed, tmp, db_copy=shapes_db)
    return _curve_row(op, task, trials, curves, walls,
                      {"rows": shape_trials * len(others), "tasks": [t.name for t in others],
                       "how": "automatic warm start from other shapes of the workload"})


def cold_and_transfer(op, task, trials: int, seed: int, tmp: str, cost_model_path: str | None = None,
                      db_copy: str | None = None):
    """Two runs of `task` with the same seed: cold (empty database, no model) and with
    transfer (`cost_model_path`, or the automatic warm start from a copy of `db_copy`).
    Returns their curves and wall times by name."""
    curves, walls = {}, {}
    for name in ("cold", "transfer"):
        work = os.path.join(tmp, name)
        os.makedirs(work)
        warm = name == "transfer"
        if warm and db_copy:
            shutil.copy(db_copy, os.path.join(work, "tune.db"))
        print(f"== {op.name}: {name}", file=sys.stderr, flush=True)
        curves[name], walls[name] = tune_curve(task, trials, seed, work,
                                               cost_model_path if warm else None,
                                               transfer=warm and bool(db_copy))
    return curves, walls


def trials_to_reach(curve, latency: float) -> int | None:
    return next((i + 1 for i, x in enumerate(curve) if x <= latency), None)


def run_op(op, trials: int, seed: int, db_url: str) -> dict:
    task = op.task()
    with tempfile.TemporaryDirectory() as tmp:
        cost_model_path = os.path.join(tmp, "model.json")
        report = train_model(db_url, task.key, cost_model_path)
        curves, walls = cold_and_transfer(op, task, trials, seed, tmp, cost_model_path=cost_model_path)
    return _curve_row(op, task, trials, curves, walls, report)


def _curve_row(op, task, trials: int, curves: dict, walls: dict, report: dict) -> dict:
    goal = curves["cold"][-1] / 0.9
    reach = {name: trials_to_reach(c, goal) for name, c in curves.items()}
    return {"op": op.name, "flops": task.flops, "trials": trials, "trained_on": report,
            "cold_best_s": curves["cold"][-1], "transfer_best_s": curves["transfer"][-1],
            "goal_s": goal, "trials_to_goal": reach, "wall_s": walls, "curves": curves}


def plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(4.5 * len(rows), 3.2), squeeze=False)
    for ax, r in zip(axes.flat, rows):
        for name, curve in r["curves"].items():
            g = [r["flops"] / s / 1e9 if math.isfinite(s) else 0.0 for s in curve]
            ax.plot(range(1, len(g) + 1), g, drawstyle="steps-post",
                    label=f"{name} (90% at {r['trials_to_goal'][name]})")
        ax.axhline(r["flops"] / r["goal_s"] / 1e9, color="gray", ls="--", lw=0.8,
                   label="90% of cold best")
        ax.set_title(r["op"], fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", default="logs/bench_vs_ms.db", help="SQLite file with the records")
    p.add_argument("--held-out", default="matmul,dense_bias_gelu")
    p.add_argument("--trials", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench/results")
    p.add_argument("--similar-shapes", action="store_true",
                   help="transfer from other shapes of the same workload (automatic)")
    p.add_argument("--shape-trials", type=int, default=64)
    p.add_argument("--shapes-db", default="logs/bench_transfer_shapes.db")
    p.add_argument("--summarize", nargs="+", metavar="JSON",
                   help="print the summary lines of saved results instead of running")
    a = p.parse_args()
    if a.summarize:
        for path in a.summarize:
            with open(path) as f:
                rows = json.load(f)["rows"]
            for r in rows:
                print(f"{os.path.basename(path)}: {summary_line(r)}")
        return 0
    stamp = provenance.stamp(seed=a.seed)
    names = a.held_out.split(",")
    unknown = set(names) - {o.name for o in OPS}
    if unknown:
        p.error(f"--held-out: unknown operators {sorted(unknown)}")
    if a.similar_shapes:
        if set(names) - set(SIMILAR_SHAPES):
            p.error(f"--similar-shapes: shapes are listed for {sorted(SIMILAR_SHAPES)} only")
        rows = [run_similar(op, a.trials, a.seed, a.shape_trials, a.shapes_db)
                for op in OPS if op.name in names]
    else:
        if not os.path.exists(a.db):
            p.error(f"--db {a.db}: not found (run bench/vs_metaschedule.py --db {a.db} first)")
        db_url = f"sqlite:///{os.path.abspath(a.db)}"
        rows = [run_op(op, a.trials, a.seed, db_url) for op in OPS if op.name in names]
    os.makedirs(a.out, exist_ok=True)
    # the seed is in the name unless it is the default, so runs with other seeds sit beside
    stem = os.path.join(a.out, f"transfer_curve_{'shapes_' if a.similar_shapes else ''}"
                               f"{a.trials}" + (f"_seed{a.seed}" if a.seed != p.get_default("seed") else ""))
    provenance.write_json(stem + ".json", {"rows": rows}, stamp, default=lambda x: None)
    plot(rows, stem + ".png")
    provenance.write_sidecar(stem + ".png", stamp)
    for r in rows:
        print(summary_line(r))
    print(f"wrote {stem}.json and {stem}.png")
    return 0


def summary_line(r: dict) -> str:
    """One line per curve pair: trials to 90% of the cold best (the goal), and to 95% and
    97% (with this space random samples often reach 90% within a few trials)."""
    def reach(share):
        return {n: trials_to_reach(c, r["cold_best_s"] / share) for n, c in r["curves"].items()}

    cold, warm = r["trials_to_goal"]["cold"], r["trials_to_goal"]["transfer"]
    ratio = f"{warm / cold:.2f}" if cold and warm else "n/a"
    more = ", ".join(f"{int(share * 100)}%: cold {x['cold']} / transfer {x['transfer']}"
                     for share in (0.95, 0.97) for x in [reach(share)])
    return (f"{r['op']:18s} trained on {r['trained_on']['rows']} records of "
            f"{len(r['trained_on']['tasks'])} tasks; 90% of the cold {r['trials']}-trial best "
            f"({r['cold_best_s'] * 1e3:.3f} ms): cold {cold} trials, transfer {warm} "
            f"(ratio {ratio}); {more}; transfer's own best {r['transfer_best_s'] * 1e3:.3f} ms")


if __name__ == "__main__":
    sys.exit(main())
