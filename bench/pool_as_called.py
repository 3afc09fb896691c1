"""Kernels as a model calls them, on each thread pool: record, called alone, called
alternating with torch's operator (issue: CPU kernels inside a PyTorch process).

    flock /tmp/autosched-bench.lock python bench/pool_as_called.py MODEL_FILE --db URL
          [--train] [--pools openmp,tvm-yield,tvm] [-o bench/results/pool_as_called.json]

The model's tasks must be tuned already (`autosched tune-model MODEL_FILE --db URL`):
their records are then the tuner's as-called times (a candidate timed through a torch op,
on the kernel pool, each call after torch's operator; docs/models.md), made on the pool
`AUTOSCHED_KERNEL_POOL` named when tuning (openmp by default). For each pool, as a user
runs it, `autosched export-model --time-all` twice with that pool set: `--decide-on
records` times every task's kernel through the op the compiled model calls alone,
`--decide-on side-by-side` times the same call alternating with torch's operator, one
call of each in turn on the same inputs (the whole-step check is off: this bench is
about single calls). Per task and pool: record ms, alone ms, alternating ms, torch's
alternating ms, and alternating / record; per pool the geometric mean of that ratio and
how many tasks are within 10% of their record.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import provenance
from model_library import cli

from autosched.model import read_choices

POOLS = ("openmp", "tvm-yield", "tvm")


def _timed(path: str, train: bool, db: str, out: Path, pool: str, decide_on: str) -> dict:
    flags = ["--train"] if train else []
    cli("export-model", path, *flags, "--db", db, "-o", str(out), "--decide-on", decide_on,
        "--time-all", "--step-check", "off", env={"AUTOSCHED_KERNEL_POOL": pool})
    return {c.task_key: c for c in read_choices(out) if c.call_s is not None}


def measure_pool(path: str, train: bool, db: str, work: Path, pool: str) -> list[dict]:
    """One row per task timed under `pool`."""
    alone = _timed(path, train, db, work / pool / "alone", pool, "records")
    beside = _timed(path, train, db, work / pool / "alternating", pool, "side-by-side")
    rows = []
    for key, c in alone.items():
        b = beside.get(key)
        if b is None:
            continue
        rows.append({"workload": c.workload, "params": c.params, "count": c.count,
                     "record_ms": c.kernel_s * 1e3, "alone_ms": c.call_s * 1e3,
                     "alternating_ms": b.call_s * 1e3,
                     "torch_alternating_ms": b.torch_call_s * 1e3,
                     "torch_baseline_ms": c.torch_s * 1e3,
                     "alternating_over_record": b.call_s / c.kernel_s})
    return rows


def summary(rows: list[dict]) -> dict:
    ratios = [r["alternating_over_record"] for r in rows]
    if not ratios:
        return {"tasks": 0}
    return {"tasks": len(ratios),
            "geomean_alternating_over_record": math.exp(sum(map(math.log, ratios))
                                                        / len(ratios)),
            "within_10pct_of_record": sum(1 for x in ratios if x <= 1.10),
            "kernel_beats_torch_alternating": sum(
                1 for r in rows if r["alternating_ms"] < r["torch_alternating_ms"])}


def _print(pool: str, rows: list[dict]) -> None:
    print(f"\n== pool {pool}")
    print(f"{'task':44s} {'record':>8s} {'alone':>8s} {'altern.':>8s} {'torch':>8s} "
          f"{'alt/rec':>7s}")
    for r in rows:
        shape = ",".join(f"{k}={v}" for k, v in r["params"].items() if k != "dtype")
        print(f"{r['workload'] + '(' + shape + ')':44.44s} {r['record_ms']:8.3f} "
              f"{r['alone_ms']:8.3f} {r['alternating_ms']:8.3f} "
              f"{r['torch_alternating_ms']:8.3f} {r['alternating_over_record']:7.2f}")
    print(summary(rows))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_file")
    p.add_argument("--db", required=True)
    p.add_argument("--train", action="store_true")
    p.add_argument("--pools", default=",".join(POOLS))
    p.add_argument("-o", "--output", default=str(ROOT / "bench/results/pool_as_called.json"))
    args = p.parse_args()
    pools = [x for x in args.pools.split(",") if x]
    stamp = provenance.stamp(seed=0)
    print(provenance.header(stamp))
    result = {"model_file": args.model_file, "model_source": Path(args.model_file).read_text(),
              "train": args.train, "pools": {}}
    with tempfile.TemporaryDirectory() as work:
        for pool in pools:
            rows = measure_pool(args.model_file, args.train, args.db, Path(work), pool)
            result["pools"][pool] = {"rows": rows, "summary": summary(rows)}
            _print(pool, rows)
    provenance.write_json(args.output, result, stamp, indent=1)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
