"""`split_reduce` (search_space/cpu/split_reduction.py): reductions to few outputs split
across cores and vector lanes compute what numpy computes, on odd sizes, several reduce
axes, sum / max / min and several dtypes, and their schedules have the parallel chunks
and vector lanes their decisions name."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

import autosched
from search_space import Candidate, generate_space
from search_space.tir import iter_nodes

OPS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "reductions.py")


def _task(workload: str, *args: str):
    (task,) = autosched.load_tasks(OPS, [workload], list(args))
    return task


def _inputs(task, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for t in task.inputs:
        if t.dtype.startswith("int"):
            out.append(rng.integers(-1000, 1000, t.shape).astype(t.dtype))
        else:   # positive: a sum of many terms keeps its relative error small
            out.append(rng.uniform(0.0, 1.0, t.shape).astype(t.dtype))
    return out


def _run(mod, target, task, inputs) -> np.ndarray:
    import tvm

    lib = tvm.compile(mod, target=target.tvm()).jit()
    out = task.outputs[-1]
    bufs = [tvm.runtime.tensor(x) for x in inputs]
    bufs.append(tvm.runtime.tensor(np.zeros(out.shape, out.dtype)))
    lib["main"](*bufs)
    return bufs[-1].numpy()


REFERENCES = {
    "norm_bmn": lambda a: np.sqrt((a.astype(np.float64) ** 2).sum(axis=(1, 2))),
    "matrix_sum": lambda a: a.astype(np.float64).sum(keepdims=True).reshape(1),
    "vector_sum": lambda a: a.astype(np.float64).sum(keepdims=True),
    "max_abs": lambda a: np.abs(a).max(axis=(1, 2)),
    "column_min": lambda a: a.min(axis=0),
}

CASES = [   # workload, arguments, relative tolerance (0: exact)
    ("norm_bmn", ("B=1", "M=64", "N=96"), 1e-5),
    ("norm_bmn", ("B=3", "M=33", "N=65", "dtype=float64"), 1e-12),
    ("vector_sum", (), 1e-5),                                # 1000003: nothing divides it
    ("vector_sum", ("N=100003", "dtype=int32"), 0),
    ("matrix_sum", ("M=4095", "N=4097"), 1e-4),              # rows no vector divides
    ("matrix_sum", ("M=256", "N=512", "dtype=float64"), 1e-12),
    ("max_abs", (), 0),                                      # max, producer inlined
    ("column_min", (), 0),                                   # min over the outer axis
]


@pytest.mark.parametrize("workload, args, rtol", CASES)
def test_split_candidates_match_numpy(target, workload, args, rtol):
    task = _task(workload, *args)
    space = generate_space(task, target)
    assert "split_reduce" in space.sketches
    inputs = _inputs(task)
    want = REFERENCES[workload](*inputs)
    rng = random.Random(7)
    seen = set()
    while len(seen) < 2:
        cand, mod = space.sample(rng, "split_reduce")
        if cand in seen:
            continue
        seen.add(cand)
        got = _run(mod, target, task, inputs)
        assert got.dtype == np.dtype(task.outputs[-1].dtype)
        if rtol:
            np.testing.assert_allclose(got, want, rtol=rtol, err_msg=cand.dumps())
        else:
            np.testing.assert_array_equal(got, want, err_msg=cand.dumps())


def _loops(mod, kind: str) -> list[int]:
    from tvm import tirx

    return sorted(int(n.extent) for n in iter_nodes(mod["main"].body)
                  if isinstance(n, tirx.For) and n.kind == getattr(tirx.ForKind, kind))


def test_decisions_shape_the_schedule(target):
    from search_space import vector_lanes

    lanes = vector_lanes(target, "float32")
    cores = int(target.config["num-cores"])
    space = generate_space(_task("norm_bmn"), target)
    cand = Candidate("split_reduce", (("sq.chunks", 2 * cores), ("sq.lanes", 2 * lanes),
                                      ("sq.unroll", 0)))
    mod = space.apply(cand)
    # one parallel loop over the chunks; vectors of partials: each chunk's (initialised,
    # updated), then the chunks' added lane by lane (initialised, updated)
    assert _loops(mod, "PARALLEL") == [2 * cores]
    assert _loops(mod, "VECTORIZED") == [2 * lanes] * 4
    # each chunk runs 1024 * 1024 / (chunks x lanes) steps, the combine one step per
    # chunk, then adds the lanes of one vector
    serial = [e for e in _loops(mod, "SERIAL") if e > 1]   # not the batch loops of one
    assert serial == sorted([1024 * 1024 // (4 * cores * lanes), 2 * cores, 2 * lanes])


def test_offered_only_for_few_outputs(target):
    few = generate_space(_task("norm_bmn", "B=1"), target)
    many = generate_space(_task("norm_bmn", "B=64", "M=32", "N=1024"), target)
    assert "split_reduce" in few.sketches
    assert "split_reduce" not in many.sketches
    # a reduce extent too short to fill the cores' vectors is not split
    assert "split_reduce" not in generate_space(_task("vector_sum", "N=64"), target).sketches
