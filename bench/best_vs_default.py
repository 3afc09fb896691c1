"""The best recorded kernel of an op file's workloads against the unscheduled build and
torch, timed the same way as every bench here (time_evaluator number=10, repeat=5,
min_repeat_ms=50; torch median of 7x10 calls, 2 threads), after checking its output.

    python bench/best_vs_default.py --op matmul [--db sqlite:///logs/autosched.db]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402
from ops import OPS, torch_fn  # noqa: E402
from peers import random_args, time_tvm, torch_time  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="matmul", choices=[o.name for o in OPS])
    p.add_argument("--db", default="sqlite:///logs/autosched.db")
    a = p.parse_args()
    print(provenance.header(provenance.stamp(seed=0)), flush=True)  # random_args' seed
    import numpy as np
    import torch
    from search_space import SPACE_VERSION, Candidate, generate_space

    from autosched import current_versions, open_database, resolve_target

    op = next(o for o in OPS if o.name == a.op)
    task, target = op.task(), resolve_target("llvm")
    with open_database(a.db) as db:
        best = db.best(task.key, target.key, target.hardware_key, current_versions(SPACE_VERSION))
        trials = len(db.records(task_key=task.key))
    if best is None:
        print(f"no record for {task.name} in {a.db}")
        return 2
    mod = generate_space(task, target).apply(Candidate.from_json(best.candidate))
    args = random_args(task, positive=op.positive)
    n_in = len(task.inputs)
    default_s, ref = time_tvm(task.mod, target.tvm(), args)
    tuned_s, out = time_tvm(mod, target.tvm(), args)
    for got, want in zip(out[n_in:], ref[n_in:]):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    torch_s = torch_time(torch_fn(task), [torch.from_numpy(x) for x in args[:n_in]])
    print(f"{task.name}: {trials} records, best sketch {best.candidate['sketch']}")
    print(f"default {default_s * 1e3:.2f} ms | tuned {tuned_s * 1e3:.3f} ms "
          f"({default_s / tuned_s:.1f}x faster, {task.flops / tuned_s / 1e9:.1f} GFLOP/s) | "
          f"torch {torch_s * 1e3:.3f} ms (tuned/torch {tuned_s / torch_s:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
