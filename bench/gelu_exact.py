"""Exact (erf) GELU on the CPU against torch, side by side: forward, backward, and a dense
layer with an exact-GELU epilogue against the same dense layer without it.

Tunes each workload of examples/nn_ops.py below with autosched on llvm (`--trials` each,
the `fast_math` decision free to pick the vectorisable erf / exp), then times the best
kernel and torch's own op in turns (`--rounds` rounds, the median of each side), both on
the same number of threads (a thread per core: the TVM pool and torch.set_num_threads),
checks the kernel against torch, and writes the rows with GB/s (elementwise: every
argument read or written once) or GFLOP/s (the dense layers) beside each latency:

    gelu_exact       (M x N)      y = x Phi(x)                 torch: F.gelu(x)
    gelu_exact_grad  (M x N)      dx = dy (Phi(x) + x phi(x))  torch: aten.gelu_backward
    linear_gelu_exact (M, N, K)   GELU(x @ w.T + b)            torch: F.gelu(F.linear(...))
    linear           (M, N, K)    x @ w.T + b                  torch: F.linear(...)

The summary states the issue's targets: GELU forward and backward within 1.2x of torch,
the GELU dense layer within 10% of the dense layer alone (our GFLOP/s).

    python bench/gelu_exact.py [--trials 64] [--rows 4096 --hidden 1024]
        [--dense 128,1024,1024] [--rounds 7] [--db sqlite:///logs/gelu.db] [--out FILE]
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402
from peers import random_args, torch_timer, tvm_timer  # noqa: E402
from autosched import load_tasks, machine_cores  # noqa: E402
from autosched.runtime import interleaved  # noqa: E402

NN_OPS = os.path.join(provenance.ROOT, "examples", "nn_ops.py")


def torch_op(workload: str):
    """Torch's own kernel for each workload (inputs in the workload's order)."""
    import torch
    import torch.nn.functional as F

    return {"gelu_exact": F.gelu,
            "gelu_exact_grad": lambda dy, x: torch.ops.aten.gelu_backward(dy, x),
            "linear_gelu_exact": lambda x, w, b: F.gelu(F.linear(x, w, b)),
            "linear": F.linear}[workload]


def tune_best(task, trials: int, seed: int, db_url: str, work_dir: str):
    """Tune `task`; the best candidate's module and its JSON."""
    from autosched import TuneConfig, tune_tasks
    from search_space import Candidate, generate_space

    config = TuneConfig(target="llvm", trials=trials, db_url=db_url, seed=seed,
                        work_dir=work_dir)
    result = tune_tasks([task], config)
    best = result.tasks[0].best_record
    if best is None:
        raise SystemExit(f"{task.name}: no candidate was measured")
    space = generate_space(task, result.target)
    return space.apply(Candidate.from_json(best.candidate)), best.candidate, result.target


def bench_task(task, trials: int, seed: int, rounds: int, db_url: str, work_dir: str) -> dict:
    """Tune, then time ours and torch's in turns; one row."""
    import torch

    mod, cand, target = tune_best(task, trials, seed, db_url, work_dir)
    args = random_args(task, seed)
    n_in = len(task.inputs)
    inputs = [torch.from_numpy(a) for a in args[:n_in]]
    fn = torch_op(task.workload)
    ours, read = tvm_timer(mod, target.tvm(), args)
    seconds = interleaved({"ours": ours, "torch": torch_timer(fn, inputs)}, rounds)
    with torch.no_grad():
        want = fn(*inputs).numpy()
    got = read()[n_in]
    matches = bool(np.allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max())))
    ours_s, torch_s = (statistics.median(seconds[k]) for k in ("ours", "torch"))
    moved = sum(a.nbytes for a in args)
    return {"task": task.name, "workload": task.workload, "candidate": cand,
            "ours_ms": ours_s * 1e3, "torch_ms": torch_s * 1e3, "ours_over_torch": ours_s / torch_s,
            "bytes": moved, "ours_gb_per_s": moved / ours_s / 1e9,
            "torch_gb_per_s": moved / torch_s / 1e9, "flops": task.flops,
            "ours_gflop_per_s": task.flops / ours_s / 1e9,
            "torch_gflop_per_s": task.flops / torch_s / 1e9,
            "max_abs_diff": float(np.abs(got - want).max()), "matches_torch": matches,
            "rounds_s": seconds}


def summary(rows: dict) -> dict:
    """The issue's three targets, met or not."""
    dense, alone = rows["linear_gelu_exact"], rows["linear"]
    out = {"forward_over_torch": rows["gelu_exact"]["ours_over_torch"],
           "backward_over_torch": rows["gelu_exact_grad"]["ours_over_torch"],
           "gelu_dense_over_dense_alone": dense["ours_ms"] / alone["ours_ms"]}
    out["targets_met"] = {"forward_within_1.2x": out["forward_over_torch"] <= 1.2,
                          "backward_within_1.2x": out["backward_over_torch"] <= 1.2,
                          "gelu_dense_within_10pct": out["gelu_dense_over_dense_alone"] <= 1.1}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--dense", default="128,1024,1024", help="M,N,K of the dense layers")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--db", help="keep the records here (default: a temporary database)")
    ap.add_argument("--out", help="default: bench/results/gelu_exact_<date>.json")
    opts = ap.parse_args()
    stamp = provenance.stamp(seed=opts.seed)
    print(provenance.header(stamp), flush=True)
    m, n, k = (int(v) for v in opts.dense.split(","))
    shapes = {"gelu_exact": [f"M={opts.rows}", f"N={opts.hidden}"],
              "gelu_exact_grad": [f"M={opts.rows}", f"N={opts.hidden}"],
              "linear_gelu_exact": [f"M={m}", f"N={n}", f"K={k}"],
              "linear": [f"M={m}", f"N={n}", f"K={k}"]}
    work = tempfile.mkdtemp(prefix="gelu_exact_")
    db_url = opts.db or f"sqlite:///{os.path.join(work, 'records.db')}"
    rows = {}
    for workload, items in shapes.items():
        (task,) = load_tasks(NN_OPS, [workload], items)
        row = rows[workload] = bench_task(task, opts.trials, opts.seed, opts.rounds, db_url,
                                          work)
        rate = (f"{row['ours_gflop_per_s']:.1f} vs {row['torch_gflop_per_s']:.1f} GFLOP/s"
                if workload.startswith("linear") else
                f"{row['ours_gb_per_s']:.1f} vs {row['torch_gb_per_s']:.1f} GB/s")
        print(f"{task.name}: ours {row['ours_ms']:.3f} ms | torch {row['torch_ms']:.3f} ms | "
              f"ours/torch {row['ours_over_torch']:.2f} | {rate} | "
              f"{'matches torch' if row['matches_torch'] else 'DIFFERS from torch'}",
              flush=True)
    result = summary(rows)
    print(f"summary: {result}")
    out = opts.out or os.path.join(provenance.ROOT, "bench", "results",
                                   f"gelu_exact_{datetime.date.today():%Y%m%d}.json")
    provenance.write_json(out, {"threads": machine_cores(), "trials": opts.trials,
                                "rows": list(rows.values()), "summary": result}, stamp)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
