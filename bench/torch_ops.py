"""Time each kernel of a library called as a torch op, side by side with eager torch.

For every kernel of the library (forward and backward workloads) this reports, in the same
run: the op through `torch.ops.autosched.<workload>` (dispatch, checks, output allocation
included), the bare kernel call with preallocated outputs (so the difference is the
wrapper's overhead), and the workload's torch reference in eager mode. Ratios are
op / torch: below 1 the tuned kernel wins.

    python bench/torch_ops.py --library mlp_kernels [--number 20] [--repeat 7] [--json out.json]

The references are the op file's `torch_reference` functions; for examples/nn_ops.py run
from the repository root (examples/ is put on sys.path).
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402


def median_seconds(fn, number: int, repeat: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def _reference(entry):
    spec = entry.meta.get("torch_reference")
    if not spec:
        return None
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def bench_kernel(lib, entry, number: int, repeat: int) -> dict:
    from autosched.torch import bound_kernels

    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(s.shape, generator=g, dtype=getattr(torch, s.dtype))
              for s in entry.inputs]
    outputs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype)) for s in entry.outputs]
    op = lib[entry.workload]
    kernels = bound_kernels(entry.workload)
    raw = kernels.variants[kernels.match(inputs)].function
    ref = _reference(entry)
    row = {"symbol": entry.symbol, "workload": entry.workload, "args": entry.args,
           "tuned_latency_s": entry.latency_s,
           "op_s": median_seconds(lambda: op(*inputs), number, repeat),
           "kernel_s": median_seconds(lambda: raw(*inputs, *outputs), number, repeat)}
    if ref is not None:
        row["torch_s"] = median_seconds(lambda: ref(*inputs), number, repeat)
        row["op_over_torch"] = row["op_s"] / row["torch_s"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--library", required=True)
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    # inputs come from torch.Generator().manual_seed(0) in bench_kernel
    stamp = provenance.stamp(seed=0, argv=None if argv is None else [__file__, *argv])
    print(provenance.header(stamp), flush=True)
    sys.path.insert(0, str(ROOT / "examples"))
    import autosched.torch

    lib = autosched.torch.load_library(args.library)
    rows = [bench_kernel(lib, e, args.number, args.repeat) for e in lib.manifest.kernels]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; times in microseconds")
    print(f"{'kernel':<28}{'op':>10}{'kernel':>10}{'overhead':>10}{'torch':>10}{'op/torch':>10}")
    for r in rows:
        torch_us = f"{r['torch_s'] * 1e6:10.1f}" if "torch_s" in r else f"{'-':>10}"
        ratio = f"{r['op_over_torch']:10.2f}" if "torch_s" in r else f"{'-':>10}"
        print(f"{r['symbol']:<28}{r['op_s'] * 1e6:10.1f}{r['kernel_s'] * 1e6:10.1f}"
              f"{(r['op_s'] - r['kernel_s']) * 1e6:10.1f}{torch_us}{ratio}")
    if args.json:
        provenance.write_json(args.json, {"rows": rows}, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
