"""CUDA dry run of the search space: sample distinct candidates per operator, check
each against the target's limits and compile it the build worker's way
(`measure.cuda_compile`: nvcc to a fatbin for the target's arch; no GPU needed).

    PYTHONPATH=. python bench/cuda_dry_run.py [--per-op 64] [--seed 0] [--json out.json]

Prints, per operator, how many sampled candidates pass `check`, how many of those
compile, the pass rate and the time spent (sampling, checking, compiling). This is
what `autosched tune --target cuda --dry-run` does for every candidate.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402
from autosched.measure.cuda_compile import CudaCompileError, build_cuda  # noqa: E402
from autosched.target import resolve_target  # noqa: E402
from autosched.workload import load_tasks  # noqa: E402
from search_space import InvalidCandidate, generate_space  # noqa: E402

OPS = ["matmul.py", "conv2d.py", "softmax.py", "dense_gelu.py", "batch_matmul.py"]


def distinct_samples(space, n: int, rng: random.Random):
    """Up to `n` distinct candidates (the decision-free default counts once)."""
    seen, out = set(), []
    for _ in range(n * 8):
        if len(out) == n:
            break
        try:
            cand, mod = space.sample(rng)
        except InvalidCandidate:
            continue
        if cand not in seen:
            seen.add(cand)
            out.append((cand, mod))
    return out


def dry_run(task, target, n: int, seed: int) -> dict:
    space = generate_space(task, target)
    t0 = time.perf_counter()
    samples = distinct_samples(space, n, random.Random(seed))
    t_sample = time.perf_counter() - t0
    checked = compiled = 0
    t_check = t_compile = 0.0
    failures, per_sketch = Counter(), Counter()
    for cand, mod in samples:
        t1 = time.perf_counter()
        reason = space.check(mod)
        t_check += time.perf_counter() - t1
        if reason is not None:
            failures["check: " + reason.split(";")[0]] += 1
            continue
        checked += 1
        t1 = time.perf_counter()
        try:
            build_cuda(mod, target.config)
            ok, msg = True, ""
        except CudaCompileError as e:
            ok, msg = False, str(e)
        t_compile += time.perf_counter() - t1
        if ok:
            compiled += 1
            per_sketch[cand.sketch] += 1
        else:
            failures[msg[:120]] += 1
    return {"task": task.name, "sampled": len(samples), "pass_check": checked,
            "compiled": compiled, "rate": compiled / max(1, len(samples)),
            "sample_s": round(t_sample, 1), "check_s": round(t_check, 1),
            "compile_s": round(t_compile, 1), "by_sketch": dict(per_sketch),
            "failures": dict(failures)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-op", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ops", nargs="*", default=OPS)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    stamp = provenance.stamp(seed=args.seed, argv=None if argv is None else [__file__, *argv])
    print(provenance.header(stamp), flush=True)
    target = resolve_target("cuda")
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    rows = []
    for op in args.ops:
        for task in load_tasks(os.path.join(root, op)):
            row = dry_run(task, target, args.per_op, args.seed)
            rows.append(row)
            print(f"{row['task']:<55} {row['compiled']:>3}/{row['sampled']:<3} compile "
                  f"({row['pass_check']} pass check) rate {row['rate']:.1%}  "
                  f"sample {row['sample_s']}s check {row['check_s']}s "
                  f"compile {row['compile_s']}s  {row['by_sketch']}", flush=True)
            for msg, k in row["failures"].items():
                print(f"    {k} x {msg}")
    if args.json:
        provenance.write_json(args.json, {"target": target.config, "per_op": args.per_op,
                                          "seed": args.seed, "rows": rows}, stamp)
    return 0 if all(r["rate"] >= 0.9 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
