"""Computations no specific rule was written for, tuned on llvm: the patch distance over
a search window (examples/windowed_ssd.py) and the chained 8x8 block transform
(examples/block_transform.py). Per workload: its sketches, the distinct candidates of
the general sketch in 256 seeded samples, the best tuned kernel (re-timed the way every
bench here times, its output checked against the unscheduled build) and its GFLOP/s
against the machine's measured FMA peak, with its arithmetic intensity (FLOP per byte
it must move to and from memory) beside it. GFLOP/s count the task's FLOPs as TVM
estimates them: the patch distance's (a - b) * (a - b) counts its subtraction twice,
4 FLOPs a step where 3 are needed.

    python bench/general_space.py [--trials 64] [--out bench/results/general_space_DATE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402
from peers import random_args, time_tvm  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = (("windowed_ssd.py", "windowed_ssd", []),
         ("block_transform.py", "block_transform", ["B=4096"]))
PEAK = os.path.join(ROOT, "bench", "results", "machine_peak.json")


def _bytes_moved(task) -> int:
    """Bytes of the inputs read once and the outputs written once: the least traffic."""
    return sum(_elems(t.shape) * _itemsize(t.dtype)
               for t in list(task.inputs) + list(task.outputs))


def _elems(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _itemsize(dtype) -> int:
    import numpy as np

    return np.dtype(str(dtype)).itemsize


def _distinct(space, sketch: str, samples: int = 256) -> int:
    rng = random.Random(0)
    return len({space.sample(rng, sketch)[0].key for _ in range(samples)})


def run_case(path, name, args, trials: int, seed: int, peak: float, work: str) -> dict:
    import numpy as np
    from search_space import Candidate, generate_space

    from autosched import TuneConfig, load_tasks, resolve_target, tune

    (task,) = load_tasks(os.path.join(ROOT, "examples", path), [name], args)
    target = resolve_target("llvm")
    space = generate_space(task, target)
    row = {"workload": name, "args": args, "flops": task.flops,
           "sketches": sorted(space.sketches)}
    if "general" in space.sketches:
        row["general_distinct_of_256"] = _distinct(space, "general")
    db = f"sqlite:///{work}/{name}.db"
    start = time.perf_counter()
    result = tune(os.path.join(ROOT, "examples", path), [name], args,
                  TuneConfig(target="llvm", trials=trials, seed=seed, db_url=db, work_dir=work))
    state = result.tasks[0]
    row.update(trials=state.trials, tune_s=round(time.perf_counter() - start, 1),
               failures=dict(state.failures))
    best = Candidate.from_json(state.best_record.candidate)
    vals = random_args(task)
    default_s, ref = time_tvm(task.mod, target.tvm(), vals)
    tuned_s, out = time_tvm(space.apply(best), target.tvm(), vals)
    n_in = len(task.inputs)
    for got, want in zip(out[n_in:], ref[n_in:]):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    moved = _bytes_moved(task)
    row.update(best_sketch=best.sketch, best_candidate=best.to_json(),
               default_ms=default_s * 1e3, tuned_ms=tuned_s * 1e3,
               gflops=task.flops / tuned_s / 1e9, peak_fraction=task.flops / tuned_s / 1e9 / peak,
               bytes_moved=moved, flop_per_byte=task.flops / moved)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak", default=PEAK, help="machine_peak.py's result for THIS machine "
                   "(the fractions of peak are read against it)")
    p.add_argument("--out", default=os.path.join(
        ROOT, "bench", "results", f"general_space_{time.strftime('%Y%m%d')}.json"))
    a = p.parse_args()
    stamp = provenance.stamp(seed=a.seed, trials=a.trials, peak=a.peak)
    print(provenance.header(stamp), flush=True)
    with open(a.peak) as f:
        peak_doc = json.load(f)
    peak = float(peak_doc["fma_peak_gflops"])
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for path, name, args in CASES:
            row = run_case(path, name, args, a.trials, a.seed, peak, work)
            rows.append(row)
            print(f"{name} {' '.join(args)}: sketches {row['sketches']}, "
                  f"{row.get('general_distinct_of_256', '-')} distinct general candidates "
                  f"of 256; best {row['best_sketch']} {row['tuned_ms']:.3f} ms "
                  f"(default {row['default_ms']:.2f} ms), {row['gflops']:.1f} GFLOP/s = "
                  f"{100 * row['peak_fraction']:.0f}% of {peak:.0f}; "
                  f"{row['flop_per_byte']:.2f} FLOP/byte", flush=True)
    provenance.write_json(a.out, {"peak_gflops": peak,
                                  "peak_machine": peak_doc["provenance"].get("machine"),
                                  "rows": rows}, stamp)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
