"""This machine's physical limits, measured with our own TVM kernels: the fp32 FMA peak
and the memory bandwidth that kernel times are read against.

* FMA peak: every worker thread runs `chains` independent chains of vector FMAs
  (x = x * m + b, a full SIMD register each) on values held in registers; enough chains
  hide the FMA latency on both FMA ports. Counted as 2 flops per lane per FMA.
* Bandwidth: a streaming triad a = b + s * c and a copy a = b, parallel and vectorised,
  over buffers far bigger than the last-level cache. Bytes counted as STREAM does
  (reads + writes, no write-allocate traffic).

    PYTHONPATH=. python bench/machine_peak.py [--threads 2] [--mib 512] [--out FILE.json]

Each figure is the best of `--repeat` timed runs (a peak is a best case).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance

# x * MUL + ADD tends to 1 and stays finite for any length; both are exact in float32, so
# the float32 result is the exact one up to about 1024 roundings (relative 1.2e-4)
MUL, ADD = 1 - 2.0 ** -10, 2.0 ** -10


def fma_kernel(workers: int, chains: int, lanes: int, iters: int):
    """PrimFunc f(x0, out) with x0, out of shape (workers, chains, lanes): each worker
    applies `iters` FMAs to each of its chains (registers: the chains are unrolled and
    the lanes vectorised, so nothing is loaded or stored inside the loop)."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def fma(x0: T.Buffer((workers, chains, lanes), "float32"),
            out: T.Buffer((workers, chains, lanes), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for w in T.parallel(workers):
            acc = T.sblock_alloc_buffer((chains, lanes), "float32", scope="local")
            for c in T.unroll(chains):
                for v in T.vectorized(lanes):
                    acc[c, v] = x0[w, c, v]
            for _ in range(iters):
                for c in T.unroll(chains):
                    for v in T.vectorized(lanes):
                        acc[c, v] = acc[c, v] * T.float32(MUL) + T.float32(ADD)
            for c in T.unroll(chains):
                for v in T.vectorized(lanes):
                    out[w, c, v] = acc[c, v]
    return fma


def fma_reference(x0: np.ndarray, iters: int) -> np.ndarray:
    """What `iters` steps of x * MUL + ADD give, in closed form (float64)."""
    m = MUL ** iters
    return x0.astype(np.float64) * m + ADD * (1 - m) / (1 - MUL)


def stream_kernel(n: int, chunks: int, lanes: int, triad: bool):
    """PrimFunc f(b, c, a) (triad: a = b + 3 * c) or f(b, a) (copy), n float32 each,
    split into `chunks` parallel chunks of vectorised loops."""
    from tvm.script import tirx as T

    per = n // chunks
    assert per * chunks == n and per % lanes == 0, "n must split into whole vectors"

    @T.prim_func(s_tir=True)
    def triad_fn(b: T.Buffer((n,), "float32"), c: T.Buffer((n,), "float32"),
                 a: T.Buffer((n,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for p in T.parallel(chunks):
            for i in range(per // lanes):
                for v in T.vectorized(lanes):
                    a[p * per + i * lanes + v] = b[p * per + i * lanes + v] \
                        + T.float32(3.0) * c[p * per + i * lanes + v]

    @T.prim_func(s_tir=True)
    def copy_fn(b: T.Buffer((n,), "float32"), a: T.Buffer((n,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for p in T.parallel(chunks):
            for i in range(per // lanes):
                for v in T.vectorized(lanes):
                    a[p * per + i * lanes + v] = b[p * per + i * lanes + v]
    return triad_fn if triad else copy_fn


def build(func, target):
    import tvm

    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()).jit()


def best_seconds(rt, args, repeat: int) -> float:
    """The fastest of `repeat` single calls (after one warm-up call)."""
    import tvm

    ev = rt.time_evaluator("main", tvm.cpu(), number=1, repeat=repeat)
    rt["main"](*args)
    return float(min(ev(*args).results))


def measure_fma(target, threads: int, lanes: int, chains: int, iters: int, repeat: int):
    import tvm

    x0 = np.random.default_rng(0).uniform(0.5, 1.5, (threads, chains, lanes)).astype("float32")
    rt = build(fma_kernel(threads, chains, lanes, iters), target)
    args = [tvm.runtime.tensor(x0), tvm.runtime.tensor(np.zeros_like(x0))]
    secs = best_seconds(rt, args, repeat)
    flops = 2.0 * threads * chains * lanes * iters
    ok = np.allclose(args[1].numpy(), fma_reference(x0, iters), rtol=1e-3)
    return {"chains": chains, "lanes": lanes, "iters": iters, "seconds": secs,
            "gflops": flops / secs / 1e9, "correct": bool(ok)}


def measure_stream(target, threads: int, lanes: int, mib: int, triad: bool, repeat: int):
    import tvm

    n = (mib << 20) // 4 // (threads * 8 * lanes) * (threads * 8 * lanes)
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(n, dtype=np.float32) for _ in range(2 if triad else 1)]
    rt = build(stream_kernel(n, threads * 8, lanes, triad), target)
    args = [tvm.runtime.tensor(x) for x in ins] + [tvm.runtime.tensor(np.zeros(n, "float32"))]
    secs = best_seconds(rt, args, repeat)
    want = ins[0] + np.float32(3.0) * ins[1] if triad else ins[0]
    # a fused multiply-add rounds once: equal to numpy up to one rounding
    ok = np.allclose(args[-1].numpy(), want, rtol=1e-6, atol=1e-6)
    moved = 4.0 * n * (len(ins) + 1)
    return {"kernel": "triad" if triad else "copy", "mib_per_buffer": n * 4 / 2**20,
            "seconds": secs, "gb_per_s": moved / secs / 1e9, "correct": bool(ok)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mib", type=int, default=512, help="size of each stream buffer")
    ap.add_argument("--iters", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", help="write the result as JSON here")
    opts = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(opts.threads)  # read when TVM's pool starts
    from autosched import resolve_target
    from search_space import vector_lanes

    target = resolve_target("llvm")
    lanes = vector_lanes(target)
    stamp = provenance.stamp(seed=0, threads=opts.threads, target=target.key)
    print(provenance.header(stamp), flush=True)
    fma = [measure_fma(target, opts.threads, lanes, c, opts.iters, opts.repeat)
           for c in (8, 12, 16, 24)]
    stream = [measure_stream(target, opts.threads, lanes, opts.mib, t, opts.repeat)
              for t in (True, False)]
    for row in fma:
        print(f"fma  {row['chains']:2d} chains x {lanes} lanes: {row['gflops']:7.1f} GFLOP/s"
              f" {'ok' if row['correct'] else 'WRONG'}")
    for row in stream:
        print(f"{row['kernel']:5s} {row['mib_per_buffer']:.0f} MiB/buffer: "
              f"{row['gb_per_s']:6.1f} GB/s {'ok' if row['correct'] else 'WRONG'}")
    result = {"fma_peak_gflops": max(r["gflops"] for r in fma),
              "bandwidth_gb_per_s": max(r["gb_per_s"] for r in stream),
              "fma": fma, "stream": stream}
    print(f"peak: {result['fma_peak_gflops']:.1f} GFLOP/s fp32, "
          f"{result['bandwidth_gb_per_s']:.1f} GB/s")
    if opts.out:
        provenance.write_json(opts.out, result, stamp)
    if not all(r["correct"] for r in fma + stream):
        sys.exit(1)


if __name__ == "__main__":
    main()
