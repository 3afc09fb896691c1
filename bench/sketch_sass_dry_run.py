"""Per-sketch SASS dry run: for each case (a sketch, a workload of examples/ with its
arguments, the GPU archs, the SASS it must and must not hold), sample distinct candidates
of that sketch only, check each against the target's limits, compile it for every arch
with nvcc (a fatbin: SASS for exactly that arch, no GPU needed) and read its SASS:
`autosched.dry_run_task` with a `DeviceCodeCheck`.

    PYTHONPATH=. python bench/sketch_sass_dry_run.py [--per-op 64] [--seed 0]
        [--cases wgmma_matmul_fp16_odd ...] [--sketches wgmma tensor_core ...]
        [--json bench/results/sketch_sass_dry_run.json]

Candidates are sampled from the first arch's space and compiled for every arch of the
case. Per case: the compile rate (fits the limits and compiles for every arch) and the
pass rate (compiled, and for every arch its SASS holds each `require` opcode and none of
`forbid`: local memory, `STL`/`LDL`, is a spill). A name with modifiers counts the
instructions carrying them: `LDG.E.128` is a 128-bit global load. For the GEMM sketches
the block tile of every candidate (read from its decisions) is tallied, and how many
exceed 128x128 outputs. The bar: both rates at least 90% in every case, and, where
mma.sync cases run, a passing mma.sync candidate above 128x128. Exit 1 below the bar.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

from autosched import (  # noqa: E402
    DeviceCodeCheck,
    UserError,
    dry_run_task,
    load_tasks,
    resolve_target,
)

EXAMPLES = os.path.join(ROOT, "examples")
SPILLS = ("STL", "LDL")
BAR = 0.9
WIDE = 128 * 128    # outputs per block of the mma.sync space's former cap
# the opt-in dynamic shared memory per block: an A100's (sm_80, 163 KiB) and an
# H100's / H200's (sm_90a, 227 KiB)
DYNAMIC_SHARED = {"sm_80": 166912, "sm_90a": 232448}


@dataclass(frozen=True)
class Case:
    """One row: candidates of `sketch` for `workload` of examples/`op_file` at `args`,
    compiled for `archs` (sampled from the first's space)."""

    sketch: str
    op_file: str
    workload: str
    args: tuple[str, ...]
    archs: tuple[str, ...]
    require: tuple[str, ...]              # in the SASS of every arch
    forbid: tuple[str, ...] = SPILLS      # in the SASS of no arch
    count: tuple[str, ...] = ()           # only counted


def _hopper(workload: str, *args: str) -> Case:
    return Case("wgmma", "mixed_precision.py", workload, args, ("sm_90a",),
                ("HGMMA", "UTMALDG"), count=("STG",))


def _mma(workload: str, *args: str) -> Case:
    return Case("tensor_core", "mixed_precision.py", workload, args, ("sm_80", "sm_90a"),
                ("HMMA", "LDGSTS"), count=("LDSM", "STG.E.128"))


def _simt(op_file: str, workload: str, *args: str) -> Case:
    return Case("simt_gemm", op_file, workload, args, ("sm_80", "sm_90a"),
                ("FFMA", "LDG.E.128"), count=("LDS.128", "STG.E.128"))


def _rows(sketch: str, op_file: str, workload: str, *args: str, wide=True) -> Case:
    return Case(sketch, op_file, workload, args, ("sm_80", "sm_90a"),
                ("LDG.E.128",) if wide else (), count=("LDG", "LDS", "SHFL"))


CASES = {
    "wgmma_matmul_fp16_odd": _hopper("matmul_mp", "M=4000", "N=3000", "K=1024"),
    "wgmma_matmul_fp16_8192": _hopper("matmul_mp", "M=8192", "N=8192", "K=8192"),
    "wgmma_matmul_bf16_odd": _hopper("matmul_mp", "M=4000", "N=3000", "K=1024",
                                     "dtype=bfloat16"),
    "wgmma_matmul_bf16_8192": _hopper("matmul_mp", "M=8192", "N=8192", "K=8192",
                                      "dtype=bfloat16"),
    "wgmma_batch_matmul_fp16": _hopper("batch_matmul_mp", "B=32", "M=1024", "N=1024",
                                       "K=128"),
    "wgmma_dense_bias_gelu_fp16": _hopper("dense_bias_gelu_mp", "M=2048", "N=4096",
                                          "K=1024"),
    "mma_matmul_fp16_odd": _mma("matmul_mp", "M=4000", "N=3000", "K=1024"),
    "mma_matmul_bf16": _mma("matmul_mp", "M=2048", "N=2048", "K=2048", "dtype=bfloat16"),
    "mma_batch_matmul_fp16": _mma("batch_matmul_mp", "B=32", "M=1024", "N=1024", "K=128"),
    "mma_dense_bias_gelu_fp16": _mma("dense_bias_gelu_mp", "M=2048", "N=4096", "K=1024"),
    "mma_conv2d_nhwc_resnet50": _mma("conv2d_nhwc_mp", "N=8", "H=56", "W=56", "C=64",
                                     "F=64"),
    "simt_matmul_4096": _simt("matmul.py", "matmul", "M=4096", "N=4096", "K=4096"),
    "simt_matmul_odd": _simt("matmul.py", "matmul", "M=1000", "N=1500", "K=700"),
    "simt_batch_matmul": _simt("batch_matmul.py", "batch_matmul", "B=12", "M=128",
                               "N=128", "K=64"),
    "simt_dense_bias_gelu": _simt("dense_gelu.py", "dense_bias_gelu", "M=2048", "N=4096",
                                  "K=1024"),
    "rows_onchip_softmax_4096": _rows("rows_onchip", "softmax.py", "softmax", "M=4096",
                                      "N=4096"),
    "rows_onchip_layer_norm": _rows("rows_onchip", "softmax.py", "layer_norm", "M=8192",
                                    "N=1024"),
    "rows_onchip_rms_norm": _rows("rows_onchip", "conv_norm_ops.py", "rms_norm", "M=1024",
                                  "N=768"),
    "rows_onchip_softmax_grad": _rows("rows_onchip", "nn_ops.py", "softmax_grad", "M=4096",
                                      "N=1024"),
    "rows_onchip_layer_norm_grad_x": _rows("rows_onchip", "nn_ops.py", "layer_norm_grad_x",
                                           "M=4096", "N=1024"),
    # the older row sketches: the compile rate alone (scalar loads by design)
    "rows_fused_softmax_4096": _rows("rows_fused", "softmax.py", "softmax", "M=4096",
                                     "N=4096", wide=False),
    "rows_layer_norm": _rows("rows", "softmax.py", "layer_norm", "M=8192", "N=1024",
                             wide=False),
}


def _mma_tiles(d: dict) -> list:
    """Block tiles of a `tensor_core` candidate: per GEMM block, warps x 16 x 16
    fragments along M and N."""
    blocks = [k[:-len(".warps_m")] for k in d if k.endswith(".warps_m")]
    return [(d[f"{b}.warps_m"] * d[f"{b}.frags_m"] * 16,
             d[f"{b}.warps_n"] * d[f"{b}.frags_n"] * 16) for b in blocks]


def _simt_tiles(d: dict) -> list:
    blocks = [k[:-len(".block_m")] for k in d if k.endswith(".block_m")]
    return [(d[f"{b}.block_m"], d[f"{b}.block_n"]) for b in blocks]


# sketch -> its candidates' block tiles (BM, BN) from their decisions
BLOCK_TILES = {"tensor_core": _mma_tiles, "simt_gemm": _simt_tiles,
               "wgmma": lambda d: [(d["wgmma.bm"], d["wgmma.bn"])]}


def target_for(arch: str):
    return resolve_target(json.dumps({"kind": "cuda", "arch": arch,
                                      "max_dynamic_shared_memory_per_block":
                                      DYNAMIC_SHARED[arch]}))


def case_task(case: Case):
    tasks = load_tasks(os.path.join(EXAMPLES, case.op_file), [case.workload],
                       list(case.args))
    return tasks[0]


def sass_problem(case: Case, counts: dict) -> str:
    """"" when every arch's counts hold what `case` requires and none of what it forbids,
    else the first problem as a line."""
    for arch in case.archs:
        got = counts.get(arch, {})
        missing = [k for k in case.require if not got.get(k)]
        present = [k for k in case.forbid if got.get(k)]
        if missing or present:
            return f"{arch}: " + ", ".join([f"no {k}" for k in missing]
                                           + [f"{k} x{got[k]}" for k in present])
    return ""


def row_of(name: str, case: Case, report, n: int) -> dict:
    """The result file's row of one case from its DryRunReport: rates, per arch the
    fewest of each counted opcode among the compiled candidates, the block tiles, and
    each candidate (its JSON, its tile, its problem or "")."""
    sass_fail, tiles, wide, each = Counter(), {}, [0, 0], []
    minimum = {a: {} for a in case.archs}
    tile_of = BLOCK_TILES.get(case.sketch)
    for cand, failure, counts in report.candidates:
        problem = failure or sass_problem(case, counts)
        sass_fail[problem] += bool(problem and not failure)
        if not failure:
            for arch, got in counts.items():
                for k, v in got.items():
                    minimum[arch][k] = min(v, minimum[arch].get(k, v))
        found = tile_of(cand.values()) if tile_of else []
        for bm, bn in found:
            tally = tiles.setdefault(f"{bm}x{bn}", [0, 0])
            tally[0] += 1
            tally[1] += not problem
        if any(bm * bn > WIDE for bm, bn in found):
            wide[0] += 1
            wide[1] += not problem
        each.append({"candidate": cand.dumps(), "problem": problem,
                     **({"tiles": [f"{bm}x{bn}" for bm, bn in found]} if tile_of else {})})
    passed = sum(not c["problem"] for c in each)
    row = {"case": name, "sketch": case.sketch, "task": report.task.name,
           "archs": list(case.archs), "require": list(case.require),
           "forbid": list(case.forbid), "offered": True, "sampled": report.generated,
           "compiled": report.compiled, "compile_rate": report.compiled / max(1, n),
           "passed": passed, "rate": passed / max(1, n), "min": minimum,
           "sass_failures": {k: v for k, v in sass_fail.items() if v},
           "failures": dict(report.messages), "seconds": round(report.seconds, 1)}
    if report.generated < n:   # the sketch has fewer candidates, or failed to schedule
        row["failures"][f"{case.sketch}: {report.generated} distinct candidates sampled, "
                        f"not {n}"] = n - report.generated
    if tile_of:
        row["tiles"] = dict(sorted(tiles.items(), key=lambda kv: -kv[1][0]))
        row["above_128x128"] = wide   # [sampled, passed]
    row["candidates"] = each
    return row


def dry_run(name: str, n: int, seed: int) -> dict:
    """One case's row; a case whose task does not offer its sketch is a row with
    `offered` false (and fails the bar)."""
    case = CASES[name]
    check = DeviceCodeCheck(also_for=tuple(target_for(a) for a in case.archs[1:]),
                            count=tuple(dict.fromkeys(case.require + case.forbid
                                                      + case.count)))
    task = case_task(case)
    try:
        report = dry_run_task(task, target_for(case.archs[0]), n, seed,
                              sketch=case.sketch, device_code=check)
    except UserError as e:
        return {"case": name, "sketch": case.sketch, "task": task.name,
                "archs": list(case.archs), "offered": False, "sampled": 0, "compiled": 0,
                "compile_rate": 0.0, "passed": 0, "rate": 0.0, "failures": {str(e): 1}}
    return row_of(name, case, report, n)


def meets_bar(rows: list) -> bool:
    """Every case at least BAR compiled and passed, and a passing mma.sync candidate
    above 128x128 where mma.sync cases ran."""
    mma = [r for r in rows if r["sketch"] == "tensor_core" and r["offered"]]
    return (all(r["compile_rate"] >= BAR and r["rate"] >= BAR for r in rows)
            and (not mma or sum(r["above_128x128"][1] for r in mma) > 0))


def line_of(row: dict, n: int) -> str:
    """One printed line per case."""
    if not row["offered"]:
        return f"{row['case']:<32} not offered: {next(iter(row['failures']))}"
    mins = " ".join(f"{a}:" + ",".join(f"{k}>={v}" for k, v in m.items() if k in row["require"])
                    for a, m in row["min"].items())
    wide = (f"  >128x128 {row['above_128x128'][1]}/{row['above_128x128'][0]}"
            if "above_128x128" in row else "")
    return (f"{row['case']:<32} compiled {row['compiled']:>3}/{n} ({row['compile_rate']:.0%})"
            f"  pass {row['passed']:>3}/{n} ({row['rate']:.0%})  {mins}{wide}"
            f"  {row['seconds']}s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-op", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", nargs="*", choices=sorted(CASES), default=None)
    ap.add_argument("--sketches", nargs="*", default=None,
                    choices=sorted({c.sketch for c in CASES.values()}))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    names = [c for c in (args.cases or CASES)
             if args.sketches is None or CASES[c].sketch in args.sketches]
    if not names or args.per_op < 1:
        print("sketch SASS dry run: " + ("--per-op must be at least 1" if names else
                                         "no case left by --cases and --sketches"),
              file=sys.stderr)
        return 2
    stamp = provenance.stamp(seed=args.seed, argv=None if argv is None else [__file__, *argv])
    print(provenance.header(stamp), flush=True)
    rows = []
    for name in names:
        row = dry_run(name, args.per_op, args.seed)
        rows.append(row)
        print(line_of(row, args.per_op), flush=True)
        if row.get("tiles"):
            print("    tiles (sampled/passed): " + ", ".join(
                f"{t} {s}/{p}" for t, (s, p) in row["tiles"].items()))
        for msg, k in {**row["failures"], **row.get("sass_failures", {})}.items():
            if row["offered"]:
                print(f"    {k} x {msg[:160]}")
        if args.json:  # after each case: a long run leaves what it finished
            provenance.write_json(args.json, {"per_op": args.per_op, "seed": args.seed,
                                              "bar": BAR, "rows": rows}, stamp)
    ok = meets_bar(rows)
    wide = any(r["sketch"] == "tensor_core" for r in rows)
    print(f"bar ({BAR:.0%} compiled and passed per case"
          f"{', a passing mma.sync tile above 128x128' if wide else ''}): "
          f"{'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
