"""Tensor-core dry run: sample distinct `tensor_core` candidates per operator, check each
against the target's limits, compile it for each arch with nvcc (fatbin, SASS for
exactly that arch; no GPU needed) and count the tensor-core instructions in its SASS:
`autosched.dry_run_task` with a `DeviceCodeCheck`.

    PYTHONPATH=. python bench/tensor_core_dry_run.py [--per-op 64] [--archs sm_80 sm_90a]
        [--cases matmul_fp16_odd ...] [--seed 0] [--json out.json]

A candidate passes when it fits the target, compiles for every arch, and its SASS holds
`HMMA` (mma.sync) and `LDGSTS` (cp.async: every candidate of the sketch pipelines).
Also counted: passing candidates whose SASS touches local memory (`STL`/`LDL`: spills).
The bar: at least 90% of the sampled candidates pass, per operator.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

from autosched import DeviceCodeCheck, dry_run_task, load_tasks, resolve_target  # noqa: E402

OP_FILE = os.path.join(ROOT, "examples", "mixed_precision.py")
# name -> (workload, --arg items)
CASES = {
    "matmul_fp16_odd": ("matmul_mp", ["M=4000", "N=3000", "K=1024"]),
    "matmul_bf16": ("matmul_mp", ["M=2048", "N=2048", "K=2048", "dtype=bfloat16"]),
    "batch_matmul_fp16": ("batch_matmul_mp", ["B=32", "M=1024", "N=1024", "K=128"]),
    "dense_bias_gelu_fp16": ("dense_bias_gelu_mp", ["M=2048", "N=4096", "K=1024"]),
    "conv2d_nhwc_resnet50": ("conv2d_nhwc_mp", ["N=8", "H=56", "W=56", "C=64", "F=64"]),
}
# the opt-in maximum of an A100 (sm_80: 163 KiB); the H200's is 227 KiB
DYNAMIC_SHARED = 166912


def target_for(arch: str):
    return resolve_target(json.dumps({"kind": "cuda", "arch": arch,
                                      "max_dynamic_shared_memory_per_block": DYNAMIC_SHARED}))


def case_task(case: str):
    workload, args = CASES[case]
    return next(t for t in load_tasks(OP_FILE, arg_items=args) if t.workload == workload)


def dry_run(case: str, n: int, seed: int, archs) -> dict:
    check = DeviceCodeCheck(also_for=tuple(target_for(a) for a in archs[1:]),
                            require=("HMMA", "LDGSTS"), count=("LDSM", "STL", "LDL"))
    report = dry_run_task(case_task(case), target_for(archs[0]), n, seed,
                          sketch="tensor_core", device_code=check)
    return {"case": case, "task": report.task.name, "sampled": report.generated,
            "passed": report.compiled, "rate": report.compiled / max(1, n),
            "hmma_min": min((c[archs[0]]["HMMA"] for c in report.sass), default=0),
            "with_local_memory": sum(any(k["STL"] or k["LDL"] for k in c.values())
                                     for c in report.sass),
            "seconds": round(report.seconds, 1), "failures": dict(report.messages)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-op", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--archs", nargs="+", default=["sm_80", "sm_90a"])
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    stamp = provenance.stamp(seed=args.seed, argv=None if argv is None else [__file__, *argv])
    print(provenance.header(stamp), flush=True)
    rows = []
    for case in args.cases:
        row = dry_run(case, args.per_op, args.seed, args.archs)
        rows.append(row)
        print(f"{case:<24} {row['passed']:>3}/{args.per_op} pass ({row['rate']:.0%}) "
              f"min HMMA {row['hmma_min']}, {row['with_local_memory']} with STL/LDL  "
              f"{row['seconds']}s", flush=True)
        print("".join(f"    {k} x {msg[:160]}\n" for msg, k in row["failures"].items()), end="")
        if args.json:  # after each case: a long run leaves what it finished
            provenance.write_json(args.json, {"archs": args.archs, "per_op": args.per_op,
                                              "seed": args.seed, "rows": rows}, stamp)
    return 0 if all(r["rate"] >= 0.9 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
