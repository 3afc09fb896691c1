"""Quality of the CPU search space: random samples per operator, built and run.

For each task: the unscheduled build (time and reference output), then N random
candidates of our space: share that build, share that match the reference
(rtol 1e-4), best and median time, and sample+apply time per candidate.

    PYTHONPATH=. python bench/space_cpu_quality.py [--samples 64] [--ops matmul,conv2d]
        [--arg M=128 ...] [--sketch tile_pack] [--cpu-time] [--log samples.jsonl]

On a machine shared with other jobs use --cpu-time (one thread, the process's CPU
time): wall-clock then mostly measures the share of the cores the run got.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

OPS = {"matmul": "examples/matmul.py", "batch_matmul": "examples/batch_matmul.py",
       "conv2d": "examples/conv2d.py", "softmax": "examples/softmax.py",
       "dense_gelu": "examples/dense_gelu.py"}


def _inputs(task, rng):
    return [rng.standard_normal(t.shape).astype(t.dtype) for t in task.inputs]


CPU_TIME = False  # --cpu-time: measure the process's CPU time, one thread


def _cpu_time_ms(func, bufs, budget_s=0.2) -> float:
    """CPU time of one call (min over 3 batches): robust on a machine shared with
    other jobs, where wall time mostly measures the share of the cores we got."""
    import resource

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    best = float("inf")
    for _ in range(3):
        n, t0 = 0, cpu()
        while cpu() - t0 < budget_s or n == 0:
            func(*bufs)
            n += 1
        best = min(best, (cpu() - t0) / n)
    return best * 1e3


def run(mod, target, args, repeat_ms=40):
    """Build, run once for the output, then time (median of 3 repeats) in ms."""
    import tvm

    rt = tvm.compile(mod, target=target).jit()
    dev = tvm.cpu()
    bufs = [tvm.runtime.tensor(a, dev) for a in args]
    if CPU_TIME:
        rt["main"](*bufs)
        return _cpu_time_ms(rt["main"], bufs), bufs[-1].numpy()
    t0 = time.perf_counter()
    rt["main"](*bufs)
    once = time.perf_counter() - t0
    if once > 0.05:  # slow kernel: one more run is enough to time it
        t0 = time.perf_counter()
        rt["main"](*bufs)
        return (time.perf_counter() - t0) * 1e3, bufs[-1].numpy()
    ev = rt.time_evaluator("main", dev, number=1, repeat=3, min_repeat_ms=repeat_ms)
    return float(np.median(ev(*bufs).results)) * 1e3, bufs[-1].numpy()


def evaluate(task, target, samples: int, seed: int, sketch: str | None, log=None):
    from search_space import InvalidCandidate, generate_space

    space = generate_space(task, target)
    rng = np.random.default_rng(seed)
    ins = _inputs(task, rng)
    out = np.zeros(task.outputs[-1].shape, task.outputs[-1].dtype)
    base_ms, ref = run(task.mod, target.tvm(), ins + [out.copy()])
    prng = random.Random(seed)
    times, ok, built, apply_ms, best = [], 0, 0, [], None
    for _ in range(samples):
        t0 = time.perf_counter()
        try:
            cand, mod = space.sample(prng, sketch)
        except InvalidCandidate as e:
            print("  sample failed:", e)
            continue
        apply_ms.append((time.perf_counter() - t0) * 1e3)
        try:
            ms, got = run(mod, target.tvm(), ins + [out.copy()])
        except Exception as e:  # noqa: BLE001 - a build failure is what we count
            print("  build/run failed:", cand.dumps(), str(e).splitlines()[-1][:200])
            continue
        built += 1
        if log is not None:
            log.write(json.dumps({"task": task.name, "ms": ms, "cand": cand.to_json()}) + "\n")
            log.flush()
        if np.allclose(got, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max()))):
            ok += 1
            times.append(ms)
            if best is None or ms < best[0]:
                best = (ms, cand)
        else:
            print("  WRONG:", cand.dumps())
    return base_ms, times, built, ok, apply_ms, best


def main():
    import autosched
    from autosched import load_op_file, resolve_target

    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--arg", action="append")
    ap.add_argument("--sketch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log", help="write every measured candidate to this JSONL file")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by CPU time on one thread (for a shared, busy machine)")
    opts = ap.parse_args()
    stamp = provenance.stamp(seed=opts.seed)
    print(provenance.header(stamp), flush=True)
    if opts.cpu_time:
        global CPU_TIME
        CPU_TIME = True
        os.environ["TVM_NUM_THREADS"] = "1"  # read when TVM's thread pool starts
    target = resolve_target("llvm")
    log = open(opts.log, "a") if opts.log else None
    if log is not None:  # one line per run: the log is appended to
        log.write(json.dumps({"provenance": stamp}) + "\n")
    for op in opts.ops.split(","):
        known = {k for d in load_op_file(OPS[op]).values() for k in d.params}
        items = [a for a in opts.arg or () if a.split("=")[0] in known]
        for task in autosched.load_tasks(OPS[op], arg_items=items):
            base, times, built, ok, apply_ms, best = evaluate(task, target, opts.samples,
                                                              opts.seed, opts.sketch, log)
            n = len(apply_ms)
            print(f"{task.name}: unscheduled {base:.2f} ms | built {built}/{n} correct {ok}/{n}"
                  f" | best {min(times):.3f} ms ({base / min(times):.0f}x)"
                  f" median {statistics.median(times):.2f} ms"
                  f" | sample+apply {statistics.median(apply_ms):.1f} ms/cand")
            print("   best:", best[1].dumps())


if __name__ == "__main__":
    main()
