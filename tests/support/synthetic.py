"""Synthetic test device: a real matmul tiling sketch and a measurer whose latencies are an
analytic function of the decisions, so search and cost model run end to end in the real
tuning loop (`tune_tasks(..., measurer=SyntheticMeasurer(), space_factory=make_space)`)
without building kernels.

The landscape (`synthetic_latency`) rewards what a CPU matmul rewards, on a log scale:
a register tile of about 64 outputs (i3 * j3), a cache tile of about 2^10 outputs
(i2*i3 * j2*j3), an inner reduction tile of 8, vectorising a wide innermost loop,
enough parallel work, a moderate unroll and a cache-write buffer. Register tiles above
256 outputs fail with `run_error` (a failure region the model must learn to avoid).
It is deterministic and has one known optimum; it is not a claim about real hardware.
"""
from __future__ import annotations

import math

from autosched.measure import Measurer
from autosched.results import MeasureResult
from autosched.target import TargetSpec
from autosched.workload import WorkloadDef, make_task
from search_space import SearchSpace
from search_space.sketch import Sketch

LLVM = TargetSpec("llvm", {"kind": "llvm"}, {"device": "cpu", "model": "test"}, False)


def matmul_def(name: str = "matmul") -> WorkloadDef:
    def matmul(M=256, N=256, K=256):
        from tvm import te

        A = te.placeholder((M, K), name="A")
        B = te.placeholder((K, N), name="B")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return A, B, C

    return WorkloadDef(name, matmul, {"M": 256, "N": 256, "K": 256})


def matmul_task(M=256, N=256, K=256, name="matmul"):
    return make_task(matmul_def(name), {"M": M, "N": N, "K": K})


class MatmulTiling(Sketch):
    """Multi-level tiling S S R S R S (i, j four levels; k two), with choices of how many
    outer levels run in parallel, vectorisation, unroll depth and cache-write location."""

    name = "tile"

    def apply(self, sch, decide) -> None:
        block = sch.get_sblock("C")
        i, j, k = sch.get_loops(block)
        extents = [int(sch.get(lp).extent) for lp in (i, j, k)]
        ti = decide.tile("i", extents[0], 4, 16)
        tj = decide.tile("j", extents[1], 4, 64)
        tk = decide.tile("k", extents[2], 2, 16)
        i0, i1, i2, i3 = sch.split(i, list(ti))
        j0, j1, j2, j3 = sch.split(j, list(tj))
        k0, k1 = sch.split(k, list(tk))
        sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
        outer = sch.fuse(i0, j0, i1, j1) if decide.choice("parallel", (1, 2)) == 2 \
            else sch.fuse(i0, j0)
        sch.parallel(outer)
        if decide.choice("vectorize", (0, 1)):
            sch.vectorize(j3)
        unroll = decide.choice("unroll", (0, 16, 64))
        if unroll:
            sch.annotate(outer, "pragma_auto_unroll_max_step", unroll)
        where = decide.choice("cache_write", ("none", "inner", "outer"))
        if where != "none":
            cw = sch.cache_write(block, 0, "global")
            # "inner": just above the reduction loop k0, so C is written back once per tile
            sch.reverse_compute_at(cw, outer if where == "outer" else sch.get_loops(block)[-7])


class TilingRules:
    def sketches(self, task, target):
        return [MatmulTiling()]

    def check(self, mod, target):
        return None


def make_space(task, target=LLVM):
    """The space of `MatmulTiling` alone (a `space_factory` for the tuning loop)."""
    return SearchSpace(task, target, TilingRules())


def synthetic_latency(cand) -> MeasureResult:
    """Deterministic latency of a candidate of `MatmulTiling` (see module docstring)."""
    d = cand.values()
    i, j, k = d["i"], d["j"], d["k"]
    reg = i[3] * j[3]
    if reg > 256:
        return MeasureResult.failure("run_error", "register tile too large (synthetic)")
    cost = 0.6 * (math.log2(reg) - 6) ** 2
    cost += 0.3 * (math.log2(i[2] * i[3] * j[2] * j[3]) - 10) ** 2
    cost += 0.4 * (math.log2(k[1]) - 3) ** 2
    cost -= 1.0 if d["vectorize"] and j[3] >= 8 else 0.0
    par = i[0] * j[0] * (i[1] * j[1] if d["parallel"] == 2 else 1)
    cost += 1.5 if par < 4 else 0.0
    cost -= {0: 0.0, 16: 0.3, 64: 0.1}[d["unroll"]]
    cost -= {"none": 0.0, "inner": 0.4, "outer": 0.2}[d["cache_write"]]
    return MeasureResult(latencies=(1e-3 * 2.0 ** cost,))


class SyntheticMeasurer(Measurer):
    """A `Measurer` for the tuning loop: every candidate of `MatmulTiling` "measures" as
    `synthetic_latency` and the default as 1 s; nothing is built or run."""

    concurrency = 8

    def __init__(self):
        self.measured: list[tuple[str, str]] = []  # (task key, candidate key)

    def measure(self, inputs) -> list[MeasureResult]:
        self.measured += [(inp.task.key, inp.candidate.key) for inp in inputs]
        return [synthetic_latency(inp.candidate) if inp.candidate.sketch == "tile"
                else MeasureResult(latencies=(1.0,)) for inp in inputs]

    def hardware(self, target):
        """The target's own machine: nothing is measured anywhere."""
        return target.fingerprint

    def close(self) -> None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
