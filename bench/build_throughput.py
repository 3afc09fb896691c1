"""Candidates built per minute with 1 and with 2 build workers (`--workers`) on one CPU
operator of bench/ops.py: what `--build-workers` buys when builds are the bottleneck.

The same candidates (sampled from the operator's own search space with `--seed`) are
built by one `LocalBuilder` per worker count, the counts taking turns round by round so
that outside load hits each alike; each builder first builds one candidate per worker
untimed (its workers start and import TVM once a run, not once a batch). A round's rate
is the batch's candidates over its wall time; the JSON keeps every round, the median
rate per count, its ratio to the first count's, and the median seconds one build took
in its worker (the rate with perfect scaling is workers x 60 / that).

    python bench/build_throughput.py [--op matmul] [--arg M=512 ...] [--candidates 16]
        [--rounds 3] [--workers 1 2] [--seed 0] [--out bench/results/build_throughput.json]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402
from ops import EXAMPLES, OPS  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                   "build_throughput.json")


def candidates(task, target, n: int, seed: int) -> list:
    """`n` distinct candidates of the task's space that pass its limit check, as
    MeasureInputs (the default first)."""
    from search_space import generate_space

    from autosched.measure import MeasureInput

    space = generate_space(task, target)
    rng = random.Random(seed)
    default = space.default_candidate()
    picked = {} if default is None else {default.key: (default, space.apply(default))}
    for _ in range(50 * n):
        if len(picked) >= n:
            break
        cand, mod = space.sample(rng)
        if cand.key not in picked and not space.check(mod):
            picked[cand.key] = (cand, mod)
    return [MeasureInput(task, target, c, m) for c, m in list(picked.values())[:n]]


def timed_build(builder, inputs) -> dict:
    """Build `inputs` once: wall seconds, candidates per minute, how many built."""
    start = time.perf_counter()
    arts = builder.build(inputs)
    seconds = time.perf_counter() - start
    for art in arts:
        if art.ok:
            os.unlink(art.path)
    return {"seconds": seconds, "per_minute": len(inputs) / seconds * 60,
            "built": sum(a.ok for a in arts),
            "failed": sorted({a.error_kind for a in arts if not a.ok}),
            "build_seconds": [a.build_seconds for a in arts]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", default="matmul", choices=[op.name for op in OPS])
    ap.add_argument("--arg", action="append", default=[], metavar="K=V",
                    help="override a shape parameter of the operator")
    ap.add_argument("--candidates", type=int, default=16, help="builds per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    stamp = provenance.stamp(seed=args.seed)
    print(provenance.header(stamp), flush=True)
    from autosched import load_tasks, resolve_target
    from autosched.measure import LocalBuilder, MeasureSettings

    op = next(o for o in OPS if o.name == args.op)
    task = load_tasks(str(EXAMPLES / op.op_file), [op.workload],
                      list(op.args) + args.arg)[0]
    target = resolve_target("llvm")
    inputs = candidates(task, target, args.candidates, args.seed)
    rounds = {w: [] for w in args.workers}
    with tempfile.TemporaryDirectory() as work:
        builders = {w: LocalBuilder(MeasureSettings(build_workers=w),
                                    os.path.join(work, f"w{w}")) for w in args.workers}
        try:
            for w, builder in builders.items():  # start the workers, untimed
                timed_build(builder, inputs[:w])
            for r in range(args.rounds):
                for w, builder in builders.items():
                    rounds[w].append(timed_build(builder, inputs))
                    print(f"round {r}: {w} workers {rounds[w][-1]['per_minute']:.1f} "
                          "candidates/min", flush=True)
        finally:
            for builder in builders.values():
                builder.close()
    first = statistics.median(x["per_minute"] for x in rounds[args.workers[0]])
    rows = []
    for w in args.workers:
        rate = statistics.median(x["per_minute"] for x in rounds[w])
        one = statistics.median(s for x in rounds[w] for s in x["build_seconds"])
        rows.append({"workers": w, "per_minute": rate, "vs_first": rate / first,
                     "median_build_s": one, "rounds": rounds[w]})
        print(f"{task.name}: {w} build workers: {rate:.1f} candidates/min "
              f"({rate / first:.2f}x), one build {one:.2f} s", flush=True)
    provenance.write_json(args.out, {"op": task.name, "candidates": len(inputs),
                                     "rows": rows}, stamp)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
