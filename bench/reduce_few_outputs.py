"""Reductions to few outputs, tuned, against torch and against the memory bandwidth.

Two rows, both from examples/reductions.py (tuned on llvm with `--trials` trials each):

* `norm_bmn` 1x1024x1024 (Ansor's norm row: sqrt(sum(A^2)) per batch) side by side with
  torch.linalg.vector_norm over dims (1, 2), at the same thread count, alternating the
  two (autosched.runtime.interleaved) so that load from other jobs hits both alike;
* `matrix_sum` 4096x4096 fp32 to one value, against the read bandwidth measured in the
  same run: torch's sum of a buffer far larger than the last-level cache (STREAM-like:
  bytes read over the time), best of several runs.

Every latency comes with its GB/s (the input's bytes over the time). Targets: the norm
within 1.2x of torch; the sum at 80% or more of the measured bandwidth.

    PYTHONPATH=. python bench/reduce_few_outputs.py [--trials 64] [--threads N]
        [--rounds 7] [--sum M=4096,N=4096] [--bandwidth-mib 512]
        [--out bench/results/reduce_few_outputs_<date>.json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

OPS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                   "reductions.py")
SETTLE_S = 0.1   # lets the other runtime's spinning workers park between batches


def _time(fn, calls: int) -> float:
    """Milliseconds per call over `calls` calls, after one warm-up call."""
    time.sleep(SETTLE_S)
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e3


def read_bandwidth(mib: int, repeat: int) -> float:
    """GB/s of torch summing a `mib` MiB fp32 buffer (best of `repeat` runs)."""
    import torch

    x = torch.ones(mib * (1 << 20) // 4, dtype=torch.float32)
    x.sum()
    best = min(_time(lambda: x.sum(), 1) for _ in range(repeat))
    return x.numel() * 4 / best / 1e6


def tune_best(workload: str, args: list[str], trials: int, seed: int, work_dir: str):
    """Tune one workload; returns (task, best candidate, the scheduled module)."""
    from search_space import Candidate, generate_space

    from autosched import TuneConfig, resolve_target, tune

    config = TuneConfig(target="llvm", trials=trials, seed=seed, work_dir=work_dir,
                        db_url=f"sqlite:///{work_dir}/{workload}.db")
    (state,) = tune(OPS, [workload], args, config).tasks
    cand = Candidate.from_json(state.best_record.candidate)
    space = generate_space(state.task, resolve_target("llvm"))
    return state.task, cand, space.apply(cand)


def compare(task, mod, torch_fn, rounds: int, seed: int) -> dict:
    """Ours and (when given) torch's milliseconds (median over interleaved rounds) and
    whether the two agree."""
    import torch
    import tvm

    from autosched import resolve_target
    from autosched.runtime import interleaved

    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, task.inputs[0].shape).astype(task.inputs[0].dtype)
    out = task.outputs[-1]
    ours = tvm.compile(mod, target=resolve_target("llvm").tvm()).jit()["main"]
    bufs = [tvm.runtime.tensor(x), tvm.runtime.tensor(np.zeros(out.shape, out.dtype))]
    ours(*bufs)
    want = {"norm_bmn": lambda: np.sqrt((x.astype(np.float64) ** 2).sum(axis=(1, 2))),
            "matrix_sum": lambda: x.astype(np.float64).sum().reshape(1)}[task.workload]()
    mine = lambda: ours(*bufs)  # noqa: E731
    calls = max(1, int(50 / max(_time(mine, 3), 1e-3)))   # about 50 ms a batch
    timers = {"ours": lambda: _time(mine, calls)}
    if torch_fn is not None:
        tx = torch.from_numpy(x)
        timers["torch"] = lambda: _time(lambda: torch_fn(tx), calls)
    seconds = interleaved(timers, rounds)
    row = {name: statistics.median(v) for name, v in seconds.items()}
    row["ours_matches_float64"] = bool(np.allclose(bufs[-1].numpy(), want, rtol=1e-4))
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None, help="default: the machine's cores")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bandwidth-mib", type=int, default=512)
    ap.add_argument("--sum", default="M=4096,N=4096", metavar="M=..,N=..",
                    help="matrix_sum's shape (a sum larger than the last-level cache reads "
                         "memory, not cache: e.g. M=16384,N=16384 is 1 GiB)")
    ap.add_argument("--out", default=None)
    opts = ap.parse_args()
    stamp = provenance.stamp(seed=opts.seed)
    print(provenance.header(stamp), flush=True)
    from autosched import machine_cores

    threads = opts.threads or machine_cores()
    os.environ["TVM_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    bandwidth = read_bandwidth(opts.bandwidth_mib, 5)
    print(f"read bandwidth (torch sum of {opts.bandwidth_mib} MiB, {threads} threads): "
          f"{bandwidth:.1f} GB/s", flush=True)
    rows = []
    cases = [("norm_bmn", ["B=1", "M=1024", "N=1024"],
              lambda t: torch.linalg.vector_norm(t, dim=(1, 2))),
             ("matrix_sum", opts.sum.split(","), None)]
    with tempfile.TemporaryDirectory(prefix="reduce-few-") as work:
        for workload, args, torch_fn in cases:
            task, cand, mod = tune_best(workload, args, opts.trials, opts.seed, work)
            row = compare(task, mod, torch_fn, opts.rounds, opts.seed)
            moved = int(np.prod(task.inputs[0].shape)) * np.dtype(task.inputs[0].dtype).itemsize
            row.update({"workload": workload, "args": args, "sketch": cand.sketch,
                        "candidate": cand.to_json(), "bytes": moved,
                        "ours_ms": row.pop("ours")})
            row["ours_gb_per_s"] = moved / row["ours_ms"] / 1e6
            row["ours_of_bandwidth"] = row["ours_gb_per_s"] / bandwidth
            line = (f"{workload}({','.join(args)}): ours {row['ours_ms']:.3f} ms "
                    f"{row['ours_gb_per_s']:.1f} GB/s ({row['ours_of_bandwidth']:.0%} of "
                    f"{bandwidth:.1f}) [{cand.sketch}]")
            if "torch" in row:
                row["torch_ms"] = row.pop("torch")
                row["torch_gb_per_s"] = moved / row["torch_ms"] / 1e6
                row["ours_over_torch"] = row["ours_ms"] / row["torch_ms"]
                line += (f" | torch {row['torch_ms']:.3f} ms {row['torch_gb_per_s']:.1f} GB/s"
                         f" | ours/torch {row['ours_over_torch']:.2f}")
            print(line + ("" if row["ours_matches_float64"] else " | DIFFERS from float64"),
                  flush=True)
            rows.append(row)
    out = opts.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"reduce_few_outputs_{time.strftime('%Y-%m-%d')}.json")
    provenance.write_json(out, {"threads": threads, "trials": opts.trials,
                                "read_bandwidth_gb_per_s": bandwidth,
                                "bandwidth_method": f"torch.sum of {opts.bandwidth_mib} MiB "
                                                    "fp32, best of 5",
                                "rows": rows}, stamp)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
