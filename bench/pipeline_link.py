"""The point-to-point link pipeline plans assume by default: torch.distributed with gloo
between two processes on this host (loopback), measured with
autosched.runtime.pipeline.measure_link (send tensors of 1 KiB to 16 MiB, fit a line:
latency = intercept, bandwidth = 1 / slope), several times, the median kept.

    python bench/pipeline_link.py [--runs 3] [--out bench/results/pipeline_link_gloo.json]

The product's default (autosched/runtime/pipeline/link.py, GLOO_LOOPBACK) is this
result, rounded. On a shared 2-core machine the numbers move with the load: the
load average is in the provenance.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                   "pipeline_link_gloo.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    stamp = provenance.stamp(seed=None)
    print(provenance.header(stamp), flush=True)
    from autosched.runtime.pipeline import measure_link

    runs = [measure_link("gloo") for _ in range(args.runs)]
    for r in runs:
        print(f"bandwidth {r.bytes_per_s / 1e9:.3f} GB/s  latency {r.latency_s * 1e6:.1f} us")
    result = {"backend": "gloo", "hosts": "one host, loopback, 2 processes",
              "runs": [r.to_json() for r in runs],
              "median_bytes_per_s": statistics.median(r.bytes_per_s for r in runs),
              "median_latency_s": statistics.median(r.latency_s for r in runs)}
    provenance.write_json(args.out, result, stamp)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
