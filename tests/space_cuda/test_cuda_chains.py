"""Chains of contractions and multi-output computations in the CUDA space.

A block transform (T = C X, then Y = T Cᵀ per 8x8 block) gets the decision
`T.compute_at`: T as its own kernel ("root"), or computed inside Y's thread block at its
block tile ("block") or at its reduction tile ("reduce_tile"), kept in shared memory.
Every placement is sampled, fits the target, computes the right values (the CUDA
emulator runs the kernels on the CPU) and compiles for sm_90a. A reduction with two
outputs keeps both accumulators in registers and writes each output once; a te.compute
with two outputs and an argmax (two outputs of one cross-thread reduction) bind every
block and compute both outputs."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK_TRANSFORM = str(ROOT / "examples" / "block_transform.py")
PLACEMENTS = ("root", "block", "reduce_tile")
SM90A = {"kind": "cuda", "arch": "sm_90a"}


def _two_sums(M=16, N=32, K=24):
    """One reduction, two outputs: S0 = A B and S1 = (A * A) B."""
    import tvm
    from tvm import te

    pair_sum = te.comm_reducer(lambda x, y: (x[0] + y[0], x[1] + y[1]),
                               lambda t0, t1: (tvm.tirx.const(0, t0), tvm.tirx.const(0, t1)),
                               name="pair_sum")
    a = te.placeholder((M, K), name="A")
    b = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    s0, s1 = te.compute((M, N), lambda i, j: pair_sum(
        (a[i, k] * b[k, j], a[i, k] * a[i, k] * b[k, j]), axis=k), name="S")
    return a, b, s0, s1


def _pair_map(M=16, N=24):
    """One te.compute with two outputs (TVM makes a block of each)."""
    from tvm import te

    x = te.placeholder((M, N), name="X")
    t, q = te.compute((M, N), lambda i, j: (te.tanh(x[i, j]), x[i, j] * x[i, j] + 1.0),
                      name="pair")
    return x, t, q


def _argmax(M=8, N=40):
    """The index and value of each row's maximum: two outputs of one reduction."""
    import tvm
    from tvm import te

    def combine(x, y):
        keep = x[1] >= y[1]
        return tvm.tirx.Select(keep, x[0], y[0]), tvm.tirx.Select(keep, x[1], y[1])

    argmax = te.comm_reducer(combine, lambda t0, t1: (tvm.tirx.const(-1, t0),
                                                      te.min_value(t1)), name="argmax")
    v = te.placeholder((M, N), name="A")
    k = te.reduce_axis((0, N), name="k")
    at, best = te.compute((M,), lambda i: argmax((k.var, v[i, k]), axis=k), name="T")
    return v, at, best


WORKLOADS = {"two_sums": _two_sums, "pair_map": _pair_map, "argmax": _argmax}


def make(name: str, **args):
    """The task of a workload of this file, or of the block transform example."""
    from autosched.workload import definition, load_tasks, make_task

    if name == "block_transform":
        return load_tasks(BLOCK_TRANSFORM, arg_items=[f"{k}={v}" for k, v in args.items()])[0]
    return make_task(definition(WORKLOADS[name], name=name), args)


def _target():
    from autosched.target import resolve_target

    return resolve_target(json.dumps(SM90A))


def by_placement(space, seed: int, tries: int = 64) -> dict:
    """The first sampled `tile` candidate of each `T.compute_at` placement."""
    import random

    rng, out = random.Random(seed), {}
    for _ in range(tries):
        cand, mod = space.sample(rng, sketch="tile")
        out.setdefault(cand.values()["T.compute_at"], (cand, mod))
        if len(out) == len(PLACEMENTS):
            break
    return out


def _buffer_names(task) -> tuple[list[str], list[str]]:
    """The kernel-argument names of the inputs and outputs (as the kernels name them)."""
    names = [str(p) for p in task.mod["main"].params]
    return names[:len(task.inputs)], names[len(task.inputs):]


def _emulate(emulator, task, mod, inputs: list) -> list:
    ins, outs = _buffer_names(task)
    got = emulator.emulate(mod, _target(), dict(zip(ins, inputs)),
                           {n: (s.shape, s.dtype) for n, s in zip(outs, task.outputs)})
    return [got[n] for n in outs]


def _source(mod) -> str:
    import tvm

    from autosched.measure.cuda.compiler import cuda_source

    return cuda_source(tvm.compile(mod, target=_target().tvm()))


@pytest.fixture(scope="module")
def small_chain():
    """The block transform on 2 blocks, its space, one candidate per placement."""
    from search_space import generate_space

    task = make("block_transform", B=2)
    space = generate_space(task, _target())
    return task, space, by_placement(space, seed=3)


def test_every_placement_is_sampled_and_fits_the_target(distinct_samples):
    from search_space import generate_space

    space = generate_space(make("block_transform"), _target())
    assert sorted(space.sketches) == ["default", "simple", "simt_gemm", "tile"]
    samples = distinct_samples(space, 24, seed=0, sketch="tile")
    assert len(samples) == 24
    seen = set()
    for cand, mod in samples:
        d = cand.values()
        seen.add(d["T.compute_at"])
        assert space.check(mod) is None, cand.dumps()
        # T tiled as its own kernel only at the root; attached, Y reads it unstaged
        own = {k for k in d if k.startswith("T.")} - {"T.compute_at"}
        assert bool(own) == (d["T.compute_at"] == "root"), cand.dumps()
        assert ("Y.T.vector" in d) == (d["T.compute_at"] == "root"), cand.dumps()
    assert seen == set(PLACEMENTS)


def test_a_block_placement_fits_small_shared_memory_by_construction(distinct_samples):
    """T over Y's whole reduction (64 wide) in shared memory: Y's tile is chosen so
    that it fits 4 KiB."""
    from autosched.target import resolve_target
    from search_space import generate_space

    target = resolve_target(json.dumps({**SM90A, "max_shared_memory_per_block": 4096}))
    space = generate_space(make("block_transform", B=16, N=64), target)
    samples = distinct_samples(space, 16, seed=1, sketch="tile")
    assert {c.values()["T.compute_at"] for c, _ in samples} == set(PLACEMENTS)
    assert [space.check(m) for _, m in samples] == [None] * len(samples)


def test_each_placement_computes_the_block_transform(small_chain, cuda_emulator):
    task, space, cands = small_chain
    assert sorted(cands) == sorted(PLACEMENTS)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 8)).astype("float32")
    c = rng.standard_normal((8, 8)).astype("float32")
    want = np.einsum("ik,bkj,lj->bil", c, x, c)
    for where, (cand, mod) in sorted(cands.items()):
        assert space.check(mod) is None
        src = _source(mod)
        kernels = cuda_emulator.kernel_signatures(src)
        # one kernel when T is computed in Y's block, T's own kernel first otherwise
        assert len(kernels) == (2 if where == "root" else 1), cand.dumps()
        # T goes through global memory (a kernel argument) only from its own kernel
        assert (re.search(r"\bT_ptr\b", src) is not None) == (where == "root")
        (y,) = _emulate(cuda_emulator, task, mod, [x, c])
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4, err_msg=cand.dumps())


def test_two_outputs_of_one_reduction_accumulate_in_registers(cuda_emulator):
    import random

    from search_space import generate_space

    task = make("two_sums")
    space = generate_space(task, _target())
    cand, mod = space.sample(random.Random(0), sketch="tile")
    assert space.check(mod) is None
    src = _source(mod)
    for out in ("S_v0_ptr[", "S_v1_ptr["):   # stored once from registers, never read
        lines = [ln.strip() for ln in src.splitlines() if out in ln]
        assert lines and all(ln.startswith(out) and ln.count(out) == 1 for ln in lines)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 24)).astype("float32")
    b = rng.standard_normal((24, 32)).astype("float32")
    s0, s1 = _emulate(cuda_emulator, task, mod, [a, b])
    np.testing.assert_allclose(s0, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s1, (a * a) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name, sketch", [("pair_map", "simple"), ("argmax", "rows")])
def test_multi_output_computations_bind_every_block(cuda_emulator, name, sketch):
    import random

    from search_space import generate_space

    task = make(name)
    space = generate_space(task, _target())
    cand, mod = space.sample(random.Random(0), sketch=sketch)
    assert space.check(mod) is None   # no block left on the host
    rng = np.random.default_rng(2)
    x = rng.standard_normal(task.inputs[0].shape).astype("float32")
    first, second = _emulate(cuda_emulator, task, mod, [x])
    if name == "pair_map":
        np.testing.assert_allclose(first, np.tanh(x), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(second, x * x + 1, rtol=1e-6)
    else:
        np.testing.assert_array_equal(first, np.argmax(x, axis=1))
        np.testing.assert_array_equal(second, x.max(axis=1))


BUILD = textwrap.dedent("""
    import json, os, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from autosched.measure.cuda import fatbin
    from autosched.measure.cuda.compiler import build_cuda
    from search_space import Candidate, generate_space
    import test_cuda_chains as t

    library = os.path.join(tempfile.mkdtemp(), "k.so")
    for name, args, cand in json.loads(sys.argv[2]):
        space = generate_space(t.make(name, **args), t._target())
        build = build_cuda(space.apply(Candidate.from_json(cand)), t.SM90A)
        build.executable.export_library(library)
        print("BUILT", name, cand["decisions"].get("T.compute_at", cand["sketch"]),
              ",".join(e.arch for e in fatbin.library_entries(library)), build.compiler)
""")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_placements_and_multi_outputs_compile_for_sm_90a(small_chain):
    """nvcc in a subprocess (a process that compiled CUDA keeps TVM's CUDA runtime)."""
    import random

    from search_space import generate_space

    _, _, cands = small_chain
    jobs = [["block_transform", {"B": 2}, cands[p][0].to_json()] for p in PLACEMENTS]
    task = make("two_sums")
    cand, _ = generate_space(task, _target()).sample(random.Random(0), sketch="tile")
    jobs.append(["two_sums", {}, cand.to_json()])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", BUILD, str(Path(__file__).parent),
                          json.dumps(jobs)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    built = [ln.split()[1:] for ln in out.stdout.splitlines() if ln.startswith("BUILT ")]
    assert built == [["block_transform", p, "sm_90a", "nvcc"] for p in PLACEMENTS] + \
        [["two_sums", "tile", "sm_90a", "nvcc"]]
