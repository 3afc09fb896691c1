"""autosched against MetaSchedule at the same trial budget, side by side, in one run.

For each operator: tune with autosched and with MetaSchedule (`tune_tir`) on the same
target with the same number of trials, time both best kernels with the same method
(`time_evaluator`, number=10, repeat=5, min_repeat_ms=50, median), taking turns with
torch for `--rounds` rounds (the median over rounds: a burst of load from outside reaches
every side alike), check both against numpy, and time the default (unscheduled) build.
Prints per-op latency, the ratio, the geometric mean, tuning wall time per trial, and writes a tuning-curve PNG.
For each of autosched's kernels it counts the stack loads and stores (register spills)
in the hot loop of LLVM's assembly (autosched.measure.asm: the register tile's reduction
loop, the innermost loop broadcasting data with the most FMAs) next to that loop's FMAs.

    python bench/vs_metaschedule.py --trials 256 --checkpoints 64 [--set broad] [--ops matmul,softmax]
                                    [--db logs/bench.db] [--out bench/results]
                                    [--no-metaschedule]

`--checkpoints 64` also reports both tuners at 64 trials, read from the same run: the best
of each tuner's first 64 measured candidates (both tuners' first 64 trials do not depend
on the total budget), re-timed like the final kernels. `--no-metaschedule` leaves torch as the only peer (an
hour less at 256 trials). `--db` keeps autosched's records
(for bench/cost_model_accuracy.py); by default they go to a temporary database.
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

import provenance  # noqa: E402
from ops import SETS, best_so_far, recorded, torch_fn  # noqa: E402
from peers import (metaschedule, random_args, time_tvm, torch_timer,  # noqa: E402
                   tvm_timer)
from autosched.runtime import interleaved  # noqa: E402


def tune_autosched(task, trials: int, strategy: str, seed: int, url: str, checkpoints):
    """Tune; returns ({trials: (best module within the first trials, its candidate)},
    wall seconds, best-latency curve per trial)."""
    from search_space import Candidate, generate_space

    from autosched import TuneConfig, tune_tasks

    before = len(recorded(url, task.key))
    config = TuneConfig(target="llvm", trials=trials, db_url=url, strategy=strategy,
                        seed=seed, work_dir=os.path.dirname(url.removeprefix("sqlite:///")))
    start = time.perf_counter()
    result = tune_tasks([task], config)
    wall = time.perf_counter() - start
    records = recorded(url, task.key)[before:]
    space = generate_space(task, result.target)
    picks = {k: min(records[:k], key=lambda r: r.latency).candidate for k in checkpoints}
    mods = {k: (space.apply(Candidate.from_json(c)), c) for k, c in picks.items()}
    return mods, wall, best_so_far(records)


def _check(outputs, expected, name):
    import numpy as np

    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=name)


def bench_op(op, trials, checkpoints, strategy, seed, target_spec, db_url, with_ms=True,
             rounds=7):
    """One row per checkpoint (the last is `trials`); without MetaSchedule (`with_ms`
    False) its fields are None. Every tuned kernel and torch are timed in `rounds`
    interleaved rounds (`autosched.runtime.timing.interleaved`); a row holds each side's median over them and
    the rounds themselves."""
    import statistics

    import torch

    task = op.task()
    tvm_target = target_spec.tvm()
    args = random_args(task, seed, op.positive)
    n_in = len(task.inputs)
    default_s, expected = time_tvm(task.mod, tvm_target, args)
    expected = expected[n_in:]
    ours_mods, ours_wall, ours_curve = tune_autosched(task, trials, strategy, seed, db_url,
                                                      checkpoints)
    ms_mods, ms_wall, ms_curve = (metaschedule(task, tvm_target, trials, seed, checkpoints)
                                  if with_ms else (None, None, None))
    timers = {"torch": torch_timer(torch_fn(task), [torch.from_numpy(a) for a in args[:n_in]])}
    readers = {}
    for k in checkpoints:
        sides = [("autosched", ours_mods[k][0])] + ([("metaschedule", ms_mods[k])]
                                                    if with_ms else [])
        for side, mod in sides:
            timers[(side, k)], readers[(side, k)] = tvm_timer(mod, tvm_target, args)
    seconds = interleaved(timers, rounds)
    for (side, k), read in readers.items():
        _check(read()[n_in:], expected, f"{side} {op.name} @{k}")
    median = {name: statistics.median(s) for name, s in seconds.items()}
    torch_s = median["torch"]
    rows = {}
    for k in checkpoints:
        ours_s, ms_s = median[("autosched", k)], median.get(("metaschedule", k))
        rows[k] = {"op": op.name, "task": task.name, "flops": task.flops,
                   "bytes": sum(a.nbytes for a in args),
                   "autosched_candidate": ours_mods[k][1],
                   "hot_loop": hot_loop_report(ours_mods[k][0], target_spec),
                   "default_s": default_s, "autosched_s": ours_s, "metaschedule_s": ms_s,
                   "torch_s": torch_s, "ratio": None if ms_s is None else ours_s / ms_s,
                   "vs_torch": ours_s / torch_s,
                   "rounds_s": {"autosched": seconds[("autosched", k)],
                                "metaschedule": seconds.get(("metaschedule", k)),
                                "torch": seconds["torch"]},
                   "autosched_wall_s": ours_wall,
                   "metaschedule_wall_s": ms_wall, "autosched_curve": ours_curve[:k],
                   "metaschedule_curve": ms_curve and ms_curve[:k], "trials": k,
                   "run_trials": trials}
    return rows


def hot_loop_report(mod, target_spec) -> dict | None:
    """The kernel's hot loop (`autosched.measure.asm.hot_loop`) in LLVM's assembly:
    FMAs, instructions and stack loads / stores (register spills); None without FMAs."""
    from dataclasses import asdict

    from autosched.measure import hot_loop, kernel_asm

    loop = hot_loop(kernel_asm(mod, target_spec))
    return None if loop is None else {**asdict(loop), "spills": loop.spills}


def rates(rows, peak: dict) -> str:
    """Each autosched kernel's GFLOP/s and bytes per second (its arguments read and
    written once) against the machine's measured limits (a machine_peak.py file)."""
    from autosched import format_table

    fma, bw = peak["fma_peak_gflops"], peak["bandwidth_gb_per_s"]
    body = []
    for r in rows:
        gflops, gbs = r["flops"] / r["autosched_s"] / 1e9, r["bytes"] / r["autosched_s"] / 1e9
        body.append((r["op"], f"{gflops:.1f}", f"{gflops / fma:.0%}", f"{gbs:.1f}",
                     f"{gbs / bw:.0%}"))
    return format_table(("op", "GFLOP/s", f"of {fma:.0f} peak", "GB/s",
                         f"of {bw:.1f} GB/s"), body)


def print_table(rows) -> str:
    from autosched import format_table

    def fmt(x, scale=1.0, digits=2):
        return "-" if x is None else f"{x * scale:.{digits}f}"

    body = [(r["op"], fmt(r["autosched_s"], 1e3, 3), fmt(r["metaschedule_s"], 1e3, 3),
             fmt(r["ratio"]), fmt(r["torch_s"], 1e3, 3), fmt(r["vs_torch"]),
             fmt(r["default_s"], 1e3), fmt(r["autosched_wall_s"] / r["run_trials"]),
             fmt(r["metaschedule_wall_s"] and r["metaschedule_wall_s"] / r["run_trials"]),
             "-" if r["hot_loop"] is None else f"{r['hot_loop']['spills']}"
                                               f"/{r['hot_loop']['fmas']}")
            for r in rows]
    text = format_table(("op", "autosched ms", "MetaSchedule ms", "ratio", "torch ms",
                         "ours/torch", "default ms", "ours s/trial", "MS s/trial",
                         "spills/FMAs"), body)
    for key, peer in (("ratio", "MetaSchedule"), ("vs_torch", "torch")):
        if rows[0][key] is None:
            continue
        geo = math.exp(sum(math.log(r[key]) for r in rows) / len(rows))
        worst = max(rows, key=lambda r: r[key])
        text += (f"\ngeometric-mean ratio autosched/{peer}: {geo:.3f}   worst: {worst['op']} "
                 f"{worst[key]:.2f}   trials per op: {rows[0]['trials']}")
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
            if r[key] is None:
                continue
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
    p.add_argument("--checkpoints", default="",
                   help="comma-separated smaller budgets read from the same run")
    p.add_argument("--db", default="", help="SQLite file that keeps autosched's records")
    p.add_argument("--set", default="examples", choices=sorted(SETS),
                   help="examples: the 7 example operators; broad: convolution variants, "
                        "norms, attention and odd shapes (bench/ops.py)")
    p.add_argument("--ops", default="", help="comma-separated names of the set (default all)")
    p.add_argument("--strategy", default="evolutionary")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench/results")
    p.add_argument("--peak", help="a machine_peak.py --out file: report each kernel's "
                                  "GFLOP/s and GB/s against it")
    p.add_argument("--rounds", type=int, default=7,
                   help="interleaved timing rounds of the tuned kernels and torch")
    p.add_argument("--no-metaschedule", action="store_true",
                   help="torch as the only peer (files named vs_torch_*)")
    a = p.parse_args()
    stamp = provenance.stamp(seed=a.seed)
    from autosched import resolve_target

    target = resolve_target("llvm")
    os.makedirs(a.out, exist_ok=True)
    peak = None
    if a.peak:
        with open(a.peak) as f:
            full = json.load(f)
        peak = {k: full[k] for k in ("fma_peak_gflops", "bandwidth_gb_per_s")}
    ops = SETS[a.set]
    wanted = a.ops.split(",") if a.ops else [o.name for o in ops]
    if unknown := sorted(set(wanted) - {o.name for o in ops}):
        p.error(f"--ops: not in the {a.set} set: {unknown}")
    checkpoints = sorted({int(c) for c in a.checkpoints.split(",") if c} | {a.trials})
    if checkpoints[0] < 1 or checkpoints[-1] > a.trials:
        p.error("checkpoints must lie between 1 and --trials")
    name = ("vs_torch" if a.no_metaschedule else "vs_metaschedule") + \
        ("" if a.set == "examples" else f"_{a.set}")
    chosen = [o for o in ops if o.name in wanted]
    with tempfile.TemporaryDirectory() as tmp:
        db_url = f"sqlite:///{os.path.abspath(a.db or os.path.join(tmp, 'bench.db'))}"
        rows: dict[int, list] = {k: [] for k in checkpoints}
        for done, op in enumerate(chosen, 1):
            print(f"== {op.name}", file=sys.stderr, flush=True)
            for k, row in bench_op(op, a.trials, checkpoints, a.strategy, a.seed, target,
                                   db_url, with_ms=not a.no_metaschedule,
                                   rounds=a.rounds).items():
                rows[k].append(row)
            # written after every operator: a run cut short keeps what it measured
            for k in checkpoints:
                stem = os.path.join(a.out, f"{name}_{k}" +
                                    (f"_of_{a.trials}" if k != a.trials else ""))
                provenance.write_json(
                    stem + ".json", {"target": target.config, "hardware": target.fingerprint,
                                     "peak": peak, "complete": done == len(chosen),
                                     "rows": rows[k]}, stamp, default=_json_default)
                plot(rows[k], stem + ".png")
                provenance.write_sidecar(stem + ".png", stamp)
                print(print_table(rows[k]), file=sys.stderr, flush=True)
    for k in checkpoints:
        print(print_table(rows[k]))
        if peak:
            print(rates(rows[k], peak))
    print(f"wrote {a.out}/{name}_*.json and .png")
    return 0


def _json_default(x):
    return None if isinstance(x, float) and not math.isfinite(x) else str(x)


if __name__ == "__main__":
    sys.exit(main())
