"""Best CPU candidates of our space against torch (MKL / oneDNN), side by side.

Takes the JSONL log written by `space_cpu_quality.py --log` (or any JSONL of
{"task": name, "cand": candidate JSON}, or the records `autosched db best --json`
prints), picks each task's best candidate, and times it against torch's equivalent
op in the same process, alternating the two so that load from other jobs hits both
alike, each batch after a pause that lets the other runtime's spinning workers park.
Wall-clock, `--threads` threads each. With `--peak` (a `machine_peak.py
--out` file) each kernel's bytes moved per second (its arguments read and written
once) are set against the measured memory bandwidth; `--out` writes the rows as JSON.

    PYTHONPATH=. python bench/space_cpu_vs_torch.py LOG.jsonl [--threads 2] [--rounds 7]
        [--peak bench/results/machine_peak.json] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402
from peers import SETTLE_S  # noqa: E402
from autosched.runtime import interleaved  # noqa: E402

OPS = {"matmul": "examples/matmul.py", "batch_matmul": "examples/batch_matmul.py",
       "conv2d": "examples/conv2d.py", "depthwise_conv2d": "examples/conv2d.py",
       "softmax": "examples/softmax.py", "layer_norm": "examples/softmax.py",
       "dense_bias_gelu": "examples/dense_gelu.py"}


def torch_op(task, tensors):
    """Torch's own kernel for the example workloads (inputs as torch tensors)."""
    import torch
    import torch.nn.functional as F

    a = task.args
    table = {
        "matmul": lambda x, y: x @ y,
        "batch_matmul": torch.bmm,
        "conv2d": lambda d, w: F.conv2d(d, w, padding=a["pad"]),
        "depthwise_conv2d": lambda d, w: F.conv2d(d, w.unsqueeze(1), padding=a["pad"],
                                                  groups=a["C"]),
        "softmax": lambda x: torch.softmax(x, 1),
        "layer_norm": lambda x, g, b: F.layer_norm(x, (a["N"],), g, b, a["eps"]),
        "dense_bias_gelu": lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),
    }
    fn = table[task.workload]
    return lambda: fn(*tensors)


def _time(fn, calls: int) -> float:
    time.sleep(SETTLE_S)  # the other runtime's spinning workers park
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e3


def compare(task, cand, space, target, rounds: int):
    import torch
    import tvm

    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(t.shape).astype(t.dtype) for t in task.inputs]
    out = np.zeros(task.outputs[-1].shape, task.outputs[-1].dtype)
    dev = tvm.cpu()
    ours = tvm.compile(space.apply(cand), target=target.tvm()).jit()["main"]
    base = tvm.compile(task.mod, target=target.tvm()).jit()["main"]
    bufs = [tvm.runtime.tensor(x, dev) for x in ins + [out]]
    theirs = torch_op(task, [torch.from_numpy(x) for x in ins])
    ours(*bufs)
    want = theirs().numpy()
    ok = np.allclose(bufs[-1].numpy(), want, rtol=1e-4, atol=1e-4 * max(1, np.abs(want).max()))
    mine = lambda: ours(*bufs)  # noqa: E731
    calls = max(1, int(50 / max(_time(mine, 3), 1e-3)))  # about 50 ms a batch
    seconds = interleaved({"ours": lambda: _time(mine, calls),
                           "torch": lambda: _time(theirs, calls)}, rounds)
    t_base = _time(lambda: base(*bufs), 1)
    return statistics.median(seconds["ours"]), statistics.median(seconds["torch"]), t_base, ok


def _as_logged(row: dict) -> dict:
    """A record printed by `autosched db best --json` as a log row; other rows as they are."""
    if "candidate" not in row:
        return row
    args = ",".join(f"{k}={v}" for k, v in row["args"].items())
    lat = row["result"]["latencies"]
    return {"task": f"{row['workload']}({args})", "cand": row["candidate"],
            "ms": statistics.median(lat) * 1e3}


def _bytes(task) -> int:
    """Bytes of the kernel's arguments: each read or written once."""
    return sum(int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize
               for t in task.inputs + task.outputs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--peak", help="a machine_peak.py --out file: report GB/s against it")
    ap.add_argument("--out", help="write the rows as JSON here")
    opts = ap.parse_args()
    stamp = provenance.stamp(seed=0)  # the inputs' rng
    print(provenance.header(stamp), flush=True)
    bandwidth = None
    if opts.peak:
        with open(opts.peak) as f:
            bandwidth = json.load(f)["bandwidth_gb_per_s"]
    os.environ["TVM_NUM_THREADS"] = str(opts.threads)
    import torch

    import autosched
    from autosched import resolve_target
    from search_space import Candidate, generate_space

    torch.set_num_threads(opts.threads)
    target = resolve_target("llvm")
    best = {}
    for line in open(opts.log):
        row = _as_logged(json.loads(line))
        if "provenance" in row:  # the line each space_cpu_quality.py run starts with
            continue
        if "ms" in row and (row["task"] not in best or row["ms"] < best[row["task"]]["ms"]):
            best[row["task"]] = row
        elif "ms" not in row:
            best[row["task"]] = row
    rows = []
    for name, row in best.items():
        workload, _, rest = name.partition("(")
        items = [kv for kv in rest.rstrip(")").split(",") if kv]
        (task,) = autosched.load_tasks(OPS[workload], [workload], items)
        space = generate_space(task, target)
        cand = Candidate.from_json(row["cand"])
        ours, theirs, base, ok = compare(task, cand, space, target, opts.rounds)
        moved = _bytes(task)
        rows.append({"task": name, "sketch": cand.sketch, "candidate": cand.to_json(),
                     "ours_ms": ours, "torch_ms": theirs, "ours_over_torch": ours / theirs,
                     "unscheduled_ms": base, "matches_torch": bool(ok), "bytes": moved,
                     "ours_gb_per_s": moved / ours / 1e6, "torch_gb_per_s": moved / theirs / 1e6})
        rate = ""
        if bandwidth:
            rate = (f" | ours {moved / ours / 1e6:.1f} GB/s ({moved / ours / 1e6 / bandwidth:.0%}"
                    f" of {bandwidth:.1f}), torch {moved / theirs / 1e6:.1f} GB/s")
        print(f"{name}: ours {ours:.3f} ms | torch {theirs:.3f} ms | ours/torch "
              f"{ours / theirs:.2f} | unscheduled {base:.1f} ms | "
              f"{'matches torch' if ok else 'DIFFERS from torch'} | {cand.sketch}{rate}",
              flush=True)
    if opts.out:
        provenance.write_json(opts.out, {"bandwidth_gb_per_s": bandwidth, "rows": rows}, stamp)


if __name__ == "__main__":
    main()
