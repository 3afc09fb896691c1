"""The general space (search_space/cpu/general.py): computations no specific rule was
written for (a patch distance over a search window, a chain of two small contractions,
several outputs) get a rich space, and its candidates compute what the unscheduled
program computes; on CUDA the patch distance gets the tiled sketch (search_space/cuda/
tiling.py), emulated on the CPU and compiled with nvcc."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from support.cpu_cases import ROOT, inputs_for, run_module

SSD = os.path.join(ROOT, "examples", "windowed_ssd.py")
CHAIN = os.path.join(ROOT, "examples", "block_transform.py")


def _ssd_reference(x, r, s, p):
    out = np.zeros((r, r, s, s), np.float64)
    x = x.astype(np.float64)
    for dy in range(s):
        for dx in range(s):
            for u in range(p):
                for v in range(p):
                    d = x[u:u + r, v:v + r] - x[dy + u:dy + u + r, dx + v:dx + v + r]
                    out[:, :, dy, dx] += d * d
    return out


_SPACES = {}


def _space(path, name, args, target):
    key = (path, name, tuple(args))
    if key not in _SPACES:
        import autosched
        from search_space import generate_space

        (task,) = autosched.load_tasks(path, [name], args)
        _SPACES[key] = (task, generate_space(task, target))
    return _SPACES[key]


def test_windowed_reduction_gets_64_distinct_candidates(target):
    """The patch distance had 5 candidates (one row sketch and its unroll): the block's
    reads merge into one region of X, so no contraction rule took it."""
    _, space = _space(SSD, "windowed_ssd", ["R=16", "S=6", "P=4"], target)
    assert sorted(space.sketches) == ["default", "general", "rows"]
    rng = random.Random(0)
    keys = {space.sample(rng, "general")[0].key for _ in range(80)}
    assert len(keys) >= 64
    cand, _ = space.sample(random.Random(1), "general")
    specs = space.decision_specs(cand)
    # a vector axis among those both patches read contiguously, both reduce orders
    assert specs["ssd.vector"].options == ("v_j", "v_dx")
    assert specs["ssd.reduce_order"].options == ("v_u,v_v", "v_v,v_u")
    assert {"ssd.parallel", "ssd.unroll"} <= set(specs)


def test_windowed_candidates_are_correct(target):
    task, space = _space(SSD, "windowed_ssd", ["R=16", "S=6", "P=4"], target)
    (x,) = inputs_for(task, seed=3)
    want = _ssd_reference(x, 16, 6, 4)
    rng = random.Random(5)
    vectors = set()
    for _ in range(3):
        cand, mod = space.sample(rng, "general")
        vectors.add(cand.values()["ssd.vector"])
        got = run_module(mod, target, [x], task.outputs[-1])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=cand.dumps())
    assert vectors == {"v_j", "v_dx"}


def test_chain_producer_is_computed_at_a_tile_or_kept_separate(target):
    """T = C X then Y = T Cᵀ per block: T's place is a decision, both places compute Y."""
    task, space = _space(CHAIN, "block_transform", ["B=12"], target)
    assert "general" in space.sketches
    cand, mod = space.sample(random.Random(0), "general")
    # no axis of Y = T Cᵀ reads C contiguously: a vector along j reads a copy of Cᵀ
    assert space.decision_specs(cand)["Y.vector"].options == ("v_j",)
    assert 'T.sblock("C_global")' in mod.script()
    x, c = inputs_for(task, seed=2)
    want = np.einsum("ik,bkj,lj->bil", c, x, c)
    rng = random.Random(11)
    seen = {}
    for _ in range(60):
        cand, mod = space.sample(rng, "general")
        where = cand.values()["T.compute_at"]
        if where not in seen:
            seen[where] = (cand, mod)
    assert set(seen) == {"root", 0, 1}
    for where, (cand, mod) in sorted(seen.items(), key=str):
        # the root holds the copy of Cᵀ, Y's nest and, kept separate, T's own nest
        nests = [line for line in mod.script().splitlines() if line.startswith(" " * 8 + "for ")]
        assert len(nests) == (3 if where == "root" else 2), cand.dumps()
        got = run_module(mod, target, [x, c], task.outputs[-1])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=cand.dumps())


TWO_OUTPUTS = """
from tvm import te
import autosched


@autosched.workload
def ssd_and_correlation(R=8, S=4, P=3, dtype="float32"):
    x = te.placeholder((R + S + P - 2, R + S + P - 2), name="X", dtype=dtype)

    def window(f, name):
        u = te.reduce_axis((0, P), name="u")
        v = te.reduce_axis((0, P), name="v")
        return te.compute((R, R, S, S), lambda i, j, dy, dx: te.sum(
            f(x[i + u, j + v], x[i + dy + u, j + dx + v]), axis=[u, v]), name=name)

    return x, window(lambda a, b: (a - b) * (a - b), "ssd"), window(lambda a, b: a * b, "corr")
"""


def test_two_outputs_each_get_a_tiled_parallel_nest(target, tmp_path):
    import autosched
    from search_space import generate_space

    path = tmp_path / "two_outputs.py"
    path.write_text(TWO_OUTPUTS)
    (task,) = autosched.load_tasks(str(path), ["ssd_and_correlation"], [])
    space = generate_space(task, target)
    assert "general" in space.sketches
    (x,) = inputs_for(task, seed=4)
    want_ssd = _ssd_reference(x, 8, 4, 3)
    x64 = x.astype(np.float64)
    want_corr = np.zeros_like(want_ssd)
    for dy, dx, u, v in np.ndindex(4, 4, 3, 3):
        want_corr[:, :, dy, dx] += x64[u:u + 8, v:v + 8] * x64[dy + u:dy + u + 8, dx + v:dx + v + 8]
    cand, mod = space.sample(random.Random(2), "general")
    assert {"ssd.vector", "corr.vector"} <= set(cand.values())
    import tvm

    rt = tvm.compile(mod, target=target.tvm()).jit()
    dev = tvm.cpu()
    bufs = [tvm.runtime.tensor(x, dev)] + [
        tvm.runtime.tensor(np.zeros((8, 8, 4, 4), "float32"), dev) for _ in range(2)]
    rt["main"](*bufs)
    np.testing.assert_allclose(bufs[1].numpy(), want_ssd, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bufs[2].numpy(), want_corr, rtol=1e-4, atol=1e-4)


def test_cuda_tiles_the_windowed_reduction_and_it_computes_right():
    """On CUDA the patch distance was a row reduction (its read regions merge X's two
    loads): the loads have reuse, so it gets the SSSRRSRS tiling with X staged."""
    from autosched.target import resolve_target
    from search_space import generate_space

    if shutil.which("g++") is None:
        pytest.skip("the CUDA emulator needs g++")
    from support import cuda_emulator

    cuda = resolve_target("cuda")
    task, space = _space(SSD, "windowed_ssd", ["R=8", "S=4", "P=3"], cuda)
    assert "tile" in space.sketches
    (x,) = inputs_for(task, seed=6)
    want = _ssd_reference(x, 8, 4, 3)
    rng = random.Random(3)
    for _ in range(2):
        cand, mod = space.sample(rng, "tile")
        assert space.check(mod) is None, cand.dumps()
        assert 'T.sblock("X_shared")' in mod.script()
        out = task.outputs[-1]
        got = cuda_emulator.emulate(mod, cuda, {"X": x}, {out.name: (out.shape, out.dtype)})
        np.testing.assert_allclose(got[out.name], want, rtol=1e-4, atol=1e-4,
                                   err_msg=cand.dumps())


DRY_RUN = textwrap.dedent("""
    import json, sys
    from autosched import dry_run_task, load_tasks, resolve_target
    (task,) = load_tasks(sys.argv[1], ["windowed_ssd"], ["R=16", "S=6", "P=4"])
    report = dry_run_task(task, resolve_target("cuda"), 2, seed=0, sketch="tile")
    print("RESULT", json.dumps({"compiled": report.compiled, "compiler": report.compiler,
                                "failures": report.first_errors}))
""")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_tiles_of_the_windowed_reduction_compile_for_sm_90():
    """In a subprocess: compiling registers TVM's CUDA runtime for good."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", DRY_RUN, SSD], env=env, capture_output=True,
                         text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == {"compiled": 2, "compiler": "nvcc",
                                                 "failures": []}
