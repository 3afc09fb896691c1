"""CUDA dry run of the search space: sample distinct candidates per operator, check
each against the target's limits and compile it the build worker's way (nvcc to a fatbin
for the target's arch; no GPU needed): `autosched.dry_run_task`, what
`autosched tune --target cuda --dry-run` does for every candidate.

    PYTHONPATH=. python bench/cuda_dry_run.py [--per-op 64] [--seed 0] [--json out.json]

Prints, per operator, how many sampled candidates pass `check`, how many of those
compile, the pass rate and the time spent (sampling, checking, compiling).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

from autosched import dry_run_task, load_tasks, resolve_target  # noqa: E402

OPS = ["matmul.py", "conv2d.py", "softmax.py", "dense_gelu.py", "batch_matmul.py"]
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples")


def row_of(report) -> dict:
    """The result file's row of one operator's DryRunReport."""
    return {"task": report.task.name, "sampled": report.generated,
            "pass_check": report.passed_check, "compiled": report.compiled,
            "rate": report.compiled / max(1, report.generated),
            "sample_s": round(report.seconds - report.check_seconds
                              - report.compile_seconds, 1),
            "check_s": round(report.check_seconds, 1),
            "compile_s": round(report.compile_seconds, 1),
            "by_sketch": dict(report.by_sketch), "failures": dict(report.messages)}


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
    rows = []
    for op in args.ops:
        for task in load_tasks(os.path.join(EXAMPLES, op)):
            row = row_of(dry_run_task(task, target, args.per_op, args.seed))
            rows.append(row)
            print(f"{row['task']:<55} {row['compiled']:>3}/{row['sampled']:<3} compile "
                  f"({row['pass_check']} pass check) rate {row['rate']:.1%}  "
                  f"sample {row['sample_s']}s check {row['check_s']}s "
                  f"compile {row['compile_s']}s  {row['by_sketch']}", flush=True)
            print("".join(f"    {k} x {msg[:160]}\n" for msg, k in row["failures"].items()),
                  end="")
    if args.json:
        provenance.write_json(args.json, {"target": target.config, "per_op": args.per_op,
                                          "seed": args.seed, "rows": rows}, stamp)
    return 0 if all(r["rate"] >= 0.9 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
