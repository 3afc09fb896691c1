"""bench/machine_peak.py's kernels compute what they claim (the peak it reports is a
peak of real work): the FMA chains and the streaming triad and copy, on small sizes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from support.modules import load_by_path

peak = load_by_path(Path(__file__).resolve().parents[2] / "bench" / "machine_peak.py",
                    "bench_machine_peak")


def test_fma_chains_give_the_closed_form(target):
    import tvm

    x0 = np.random.default_rng(1).uniform(0.5, 1.5, (2, 3, 8)).astype("float32")
    for iters in (1, 700):
        rt = peak.build(peak.fma_kernel(2, 3, 8, iters), target)
        out = tvm.runtime.tensor(np.zeros_like(x0))
        rt["main"](tvm.runtime.tensor(x0), out)
        np.testing.assert_allclose(out.numpy(), peak.fma_reference(x0, iters), rtol=2e-4)
    # the count matters: 700 steps are not 1
    assert not np.allclose(peak.fma_reference(x0, 700), peak.fma_reference(x0, 1), rtol=1e-2)


def test_fma_chains_are_fused_vector_instructions(target):
    """Each unrolled chain is one vector FMA instruction (not a multiply and an add)."""
    rt = peak.build(peak.fma_kernel(1, 8, 16, 1000), target)
    assert rt.inspect_source("asm").count("vfmadd") >= 8


def test_stream_kernels(target):
    import tvm

    n = 4 * 8 * 16
    rng = np.random.default_rng(2)
    b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(2))
    out = tvm.runtime.tensor(np.zeros(n, "float32"))
    peak.build(peak.stream_kernel(n, 4, 16, triad=True), target)["main"](
        tvm.runtime.tensor(b), tvm.runtime.tensor(c), out)
    np.testing.assert_allclose(out.numpy(), b + 3 * c, rtol=1e-6, atol=1e-6)
    peak.build(peak.stream_kernel(n, 4, 16, triad=False), target)["main"](
        tvm.runtime.tensor(b), out)
    np.testing.assert_array_equal(out.numpy(), b)
