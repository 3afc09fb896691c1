"""What isolation costs: autosched's measurer (build workers, a run worker, output
checks) against building and timing the same modules directly in this process.

For a batch of matmul tilings it reports the wall time per candidate of both ways and
the ratio of the latencies they report for each kernel (1.0 = isolation does not
change what is measured). The two ways alternate, twice each; the first measurer batch
includes starting its worker processes and computing the reference.

    PYTHONPATH=. python bench/measure_overhead.py [--size 256] [--candidates 12]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

NUMBER, REPEAT, MIN_REPEAT_MS = 10, 5, 50


def candidates(task, n):
    """Tilings of the matmul: (i tile, j tile) with the j tile vectorised."""
    from tvm import s_tir

    out = []
    for ti, tj in [(a, b) for a in (1, 4, 8, 16) for b in (4, 8, 16, 32, 64)][:n]:
        sch = s_tir.Schedule(task.mod)
        i, j, k = sch.get_loops(sch.get_sblock("C"))
        io, ii = sch.split(i, [None, ti])
        jo, ji = sch.split(j, [None, tj])
        sch.reorder(io, jo, k, ii, ji)
        sch.vectorize(ji)
        sch.parallel(io)
        out.append(sch.mod)
    return out


def isolated(task, target, mods, work_dir):
    from autosched.measure import MeasureInput, MeasureSettings, make_measurer

    settings = MeasureSettings(number=NUMBER, repeat=REPEAT, min_repeat_ms=MIN_REPEAT_MS,
                               build_workers=2)
    with make_measurer(settings, work_dir=work_dir) as m:
        while True:
            start = time.perf_counter()
            res = m.measure([MeasureInput(task, target, None, mod) for mod in mods])
            assert all(r.ok for r in res), [r.error_msg for r in res if not r.ok]
            yield time.perf_counter() - start, [r.median for r in res]


def in_process(task, target, mods):
    import numpy as np
    import tvm

    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.random.uniform(-1, 1, s.shape).astype(s.dtype), dev)
            for s in task.arg_specs]
    while True:
        start = time.perf_counter()
        meds = []
        for mod in mods:
            lib = tvm.compile(mod, target=target.tvm()).jit()
            lib["main"](*args)
            ev = lib.time_evaluator("main", dev, number=NUMBER, repeat=REPEAT,
                                    min_repeat_ms=MIN_REPEAT_MS)
            meds.append(statistics.median(ev(*args).results))
        yield time.perf_counter() - start, meds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--candidates", type=int, default=12)
    args = ap.parse_args()
    # the inputs are drawn from numpy's global generator, unseeded
    print(provenance.header(provenance.stamp(seed=None)), flush=True)
    from autosched import load_tasks, resolve_target

    here = os.path.dirname(os.path.abspath(__file__))
    s = args.size
    task = load_tasks(os.path.join(here, "..", "examples", "matmul.py"),
                      arg_items=[f"M={s}", f"N={s}", f"K={s}"])[0]
    target = resolve_target("llvm")
    mods = candidates(task, args.candidates)
    n = len(mods)
    with tempfile.TemporaryDirectory() as wd:
        a, b = isolated(task, target, mods, wd), in_process(task, target, mods)
        for batch in range(2):
            (t_iso, lat_iso), (t_dir, lat_dir) = next(a), next(b)
            ratios = [x / y for x, y in zip(lat_iso, lat_dir)]
            gmean = math.exp(statistics.fmean(math.log(r) for r in ratios))
            print(f"batch {batch}: {n} candidates of matmul {s}^3; wall per candidate: "
                  f"measurer {t_iso / n * 1e3:.0f} ms, in-process {t_dir / n * 1e3:.0f} ms; "
                  f"latency measurer/in-process geo-mean {gmean:.3f} "
                  f"[min {min(ratios):.3f}, max {max(ratios):.3f}]", flush=True)
        a.close()


if __name__ == "__main__":
    main()
