"""The `rows_onchip` CUDA sketch (search_space/cuda/rows_onchip.py): memory-bound row
kernels (softmax, layer norm, RMS norm, forward and backward) as one kernel per row
block, the row staged in shared memory with 128-bit loads.

Its kernels equal numpy in the emulator (tests/support/cuda_emulator.py) at small
shapes, odd row lengths included; its samples fit the target; candidates compile with
nvcc for sm_80 and sm_90a, and float32 layer norms and softmax with vector width 4 load
their rows with LDG.E.128."""
from __future__ import annotations

import json
import random
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SKETCH = "rows_onchip"
EPS = 1e-5


def _target(arch: str = "sm_90"):
    from autosched.target import resolve_target

    return resolve_target(json.dumps({"kind": "cuda", "arch": arch}))


def _rms_norm(M=6, N=200, dtype="float32"):
    from tvm import te

    x = te.placeholder((M, N), name="x", dtype=dtype)
    w = te.placeholder((N,), name="w", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    sq = te.compute((M,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="sq")
    y = te.compute((M, N), lambda i, j: x[i, j] * te.rsqrt(sq[i] / N + te.const(EPS, dtype))
                   * w[j], name="y")
    return x, w, y


def _rms_norm_grad(M=6, N=200, dtype="float32"):
    """dx = rstd * (g - xhat * mean_j(g * xhat)), g = dy * w, xhat = x * rstd."""
    from tvm import te

    x = te.placeholder((M, N), name="x", dtype=dtype)
    w = te.placeholder((N,), name="w", dtype=dtype)
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    sq = te.compute((M,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="sq")
    rstd = te.compute((M,), lambda i: te.rsqrt(sq[i] / N + te.const(EPS, dtype)), name="rstd")
    k2 = te.reduce_axis((0, N), name="k2")
    dot = te.compute((M,), lambda i: te.sum(dy[i, k2] * w[k2] * x[i, k2] * rstd[i], axis=k2),
                     name="dot")
    dx = te.compute((M, N), lambda i, j: rstd[i] * (dy[i, j] * w[j]
                                                    - x[i, j] * rstd[i] * dot[i] / N), name="dx")
    return x, w, dy, dx


def _task(name: str, M: int, N: int, dtype: str = "float32"):
    from autosched.workload import WorkloadDef, load_tasks, make_task

    local = {"rms_norm": _rms_norm, "rms_norm_grad": _rms_norm_grad}
    if name in local:
        args = {"M": M, "N": N, "dtype": dtype}
        return make_task(WorkloadDef(name, local[name], dict(args)), args)
    args = [f"M={M}", f"N={N}", f"dtype={dtype}"]
    return next(t for t in load_tasks(str(ROOT / "examples" / "nn_ops.py"), arg_items=args)
                if t.workload == name)


def _numpy(name: str, a: dict) -> np.ndarray:
    if name == "softmax_grad":
        y, dy = a["y"].astype(np.float64), a["dy"].astype(np.float64)
        return y * (dy - (dy * y).sum(axis=1, keepdims=True))
    x = a["x"].astype(np.float64)
    n = x.shape[1]
    if name == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + EPS)
    if name == "layer_norm":
        return (x - mean) * rstd * a["gamma"] + a["beta"]
    if name == "layer_norm_grad_x":
        g, xhat = a["dy"] * a["gamma"], (x - mean) * rstd
        return rstd * (g - g.mean(axis=1, keepdims=True)
                       - xhat * (g * xhat).mean(axis=1, keepdims=True))
    rrms = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + EPS)
    if name == "rms_norm":
        return x * rrms * a["w"]
    g, xhat = a["dy"] * a["w"], x * rrms
    assert name == "rms_norm_grad"
    return rrms * (g - xhat * (g * xhat).sum(axis=1, keepdims=True) / n)


def _apply(space, decisions: dict):
    from search_space.candidate import Candidate

    return space.apply(Candidate.make(SKETCH, decisions))


# a warp per row, two rows a block, float4, staged; and an odd row (vector 1) over two
# warps, with a predicated last step
CASES = [(200, {"rows.form": "two_pass", "rows.threads": 32, "rows.per_block": 2,
                "rows.vector": 4, "rows.stage": "shared", "rows.unroll": 16}),
         (199, {"rows.form": "two_pass", "rows.threads": 64, "rows.per_block": 1,
                "rows.vector": 1, "rows.stage": "shared", "rows.unroll": 0})]
# the one-pass statistics: staged float4 rows, a warp a row; odd rows over two warps read
# from global memory, the last step's extra threads dropping what they load; float4 rows
# loaded from global memory into registers step by step
ONE_PASS = [(200, dict(CASES[0][1], **{"rows.form": "one_pass"})),
            (199, dict(CASES[1][1], **{"rows.form": "one_pass", "rows.stage": "global"})),
            (200, dict(CASES[0][1], **{"rows.form": "one_pass", "rows.stage": "global"}))]


def _emulate(cuda_emulator, name, row, decisions):
    from search_space import generate_space

    task = _task(name, 7, row)   # 7 rows: the last block of two rows holds one
    target = _target()
    space = generate_space(task, target)
    mod = _apply(space, decisions)
    assert space.check(mod) is None
    rng = np.random.default_rng(row)
    inputs = {s.name: rng.standard_normal(s.shape).astype("float32") for s in task.inputs}
    if "y" in inputs:   # softmax_grad takes the softmax output
        inputs["y"] = _numpy("softmax", {"x": inputs["y"]}).astype("float32")
    if "x" in inputs:   # rows far from 0: the one-pass moments must not cancel
        inputs["x"] += 100
    (out,) = task.outputs
    got = cuda_emulator.emulate(mod, target, inputs, {out.name: (out.shape, out.dtype)})
    np.testing.assert_allclose(got[out.name], _numpy(name, inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name, case", [
    ("softmax", 0), ("softmax_grad", 1), ("layer_norm", 1), ("layer_norm_grad_x", 0),
    ("rms_norm", 0), ("rms_norm_grad", 1)])
def test_emulated_kernel_equals_numpy(cuda_emulator, name, case):
    """Each kernel forward and backward, one in each case (the emulator is slow)."""
    _emulate(cuda_emulator, name, *CASES[case])


@pytest.mark.parametrize("name, case", [("softmax", 1), ("softmax", 2), ("layer_norm", 0),
                                        ("layer_norm_grad_x", 1)])
def test_emulated_one_pass_equals_numpy(cuda_emulator, name, case):
    _emulate(cuda_emulator, name, *ONE_PASS[case])


def test_one_pass_is_offered_where_the_math_allows():
    """Softmax's max / sum of exp and a norm's mean / variance have a one-pass form
    for lanes that fit the row; RMS norm (one statistic) and softmax's backward (one
    dot product) have nothing to fuse."""
    import tvm
    from tvm import s_tir

    from search_space import generate_space
    from search_space.decisions import Decider

    for name, row, fixed, forms in (
            ("softmax", 4096, {}, ("two_pass", "one_pass")),
            ("layer_norm_grad_x", 199, {}, ("two_pass", "one_pass")),
            ("layer_norm", 100, {"rows.vector": 4}, ("two_pass",)),   # 32 x 4 lanes > row
            ("rms_norm", 4096, {}, ("two_pass",)),
            ("softmax_grad", 4096, {}, ("two_pass",))):
        space = generate_space(_task(name, 64, row), _target())
        sketch = space.sketches[SKETCH]
        fixed = dict(fixed, **{"rows.stage": "global"})   # (registers rewrite the program)
        decide = Decider(fixed, rng=random.Random(0), strict=False)
        program = sketch.program(space.task.func, decide)
        assert decide.specs["rows.form"].options == forms, name
        assert (program is space.task.func) == (decide.made["rows.form"] == "two_pass")
        sketch.apply(s_tir.Schedule(tvm.IRModule({"main": program})), decide)


def test_one_kernel_stages_each_reused_input_once():
    """Layer norm's backward reads x and dy in four reductions and the output: both are
    staged (x_shared, dy_shared), gamma (shared by all rows) is not, and the whole
    program is one kernel."""
    import tvm

    from search_space import generate_space
    from search_space.cuda.limits import kernel_usage
    from search_space.cuda.lowering import lower_for_check
    from search_space.tir import iter_nodes

    task = _task("layer_norm_grad_x", 6, 200)
    target = _target()
    mod = _apply(generate_space(task, target), CASES[0][1])
    func = lower_for_check(mod, target.tvm())
    assert len(kernel_usage(func)) == 1
    shared = sorted(str(n.buffer.name) for n in iter_nodes(func.body)
                    if isinstance(n, tvm.tirx.AllocBuffer) and str(n.buffer.scope()) == "shared"
                    and str(n.buffer.name).endswith("_shared"))
    assert shared == ["dy_shared", "x_shared"]


def test_decisions_fit_the_row_and_the_target():
    """The vector width is the widest that divides the row and holds 16 bytes at most,
    of the widest value the kernel computes with (the example layer norm computes
    float16 rows in float32; the RMS norm here stays in float16); samples all pass
    check."""
    from search_space import generate_space
    from search_space.decisions import Decider

    for name, row, dtype, width in (
            ("layer_norm", 199, "float32", 1), ("layer_norm", 1024, "float32", 4),
            ("layer_norm", 1022, "float32", 2), ("layer_norm", 1024, "float16", 4),
            ("rms_norm", 1024, "float16", 8), ("rms_norm", 100, "float16", 4)):
        space = generate_space(_task(name, 64, row, dtype), _target())
        decide = Decider(rng=random.Random(0))
        space.sketches[SKETCH].program(space.task.func, decide)
        # one option, the widest (rows_onchip.py: `rows.vector`)
        assert decide.specs["rows.vector"].options == (width,), (name, row, dtype)
    space = generate_space(_task("softmax", 512, 4096), _target())
    rng = random.Random(3)
    for _ in range(12):
        cand, mod = space.sample(rng, sketch=SKETCH)
        assert space.check(mod) is None, cand.dumps()
        d = cand.values()
        assert d["rows.threads"] * d["rows.per_block"] <= 1024


COMPILE = textwrap.dedent("""
    import json, os, re, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from autosched.measure.cuda import sass
    from autosched.measure.cuda.compiler import build_cuda
    from test_rows_one_pass import _apply, _target, _task
    from search_space import generate_space

    LN = {"rows.form": "two_pass", "rows.threads": 64, "rows.per_block": 2,
          "rows.vector": 4, "rows.stage": "shared", "rows.unroll": 16}
    ONE = dict(LN, **{"rows.form": "one_pass"})
    GLOBAL = dict(ONE, **{"rows.stage": "global"})
    ODD = {"rows.form": "two_pass", "rows.threads": 256, "rows.per_block": 1,
           "rows.vector": 1, "rows.stage": "shared", "rows.unroll": 0}
    out = []
    for arch in ("sm_80", "sm_90a"):
        target = _target(arch)
        for name, row, d in (("layer_norm", 1024, LN), ("layer_norm", 1024, ONE),
                             ("softmax", 1024, GLOBAL), ("softmax_grad", 1001, ODD)):
            space = generate_space(_task(name, 512, row), target)
            mod = _apply(space, d)
            lib = os.path.join(tempfile.mkdtemp(), "k.so")
            build_cuda(mod, target.config).executable.export_library(lib)
            text = sass.dump_sass(lib)
            wide = re.findall(r"\\b((?:LDG|STG|STS)\\.[A-Z0-9.]*)", text)
            out.append({"arch": arch, "name": name, "form": d["rows.form"],
                        "stage": d["rows.stage"],
                        "check": space.check(mod), "counts": dict(sass.opcode_counts(lib)),
                        "wide": sorted(set(wide))})
    print("RESULT", json.dumps(out))
""")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_candidates_compile_with_128_bit_loads():
    """In a subprocess (a process that compiled CUDA keeps TVM's CUDA runtime
    registered). `opcode_counts` names an instruction by the part before its first dot
    (`LDG.E.128` counts as `LDG`), so the widths are read from the SASS text."""
    from support.sass_tools import run_compile_script, skip_without_cuobjdump

    skip_without_cuobjdump()
    rows = run_compile_script(COMPILE, Path(__file__).parent)
    assert [(r["arch"], r["name"], r["form"], r["stage"]) for r in rows] == [
        (arch, *case) for arch in ("sm_80", "sm_90a")
        for case in (("layer_norm", "two_pass", "shared"), ("layer_norm", "one_pass", "shared"),
                     ("softmax", "one_pass", "global"), ("softmax_grad", "two_pass", "shared"))]
    for r in rows:
        assert r["check"] is None
        assert "LDG.E.128" not in r["counts"] and r["counts"].get("LDG", 0) > 0, r
        assert r["counts"].get("SHFL", 0) > 0, r      # the row reductions' warp shuffles
        assert r["counts"].get("STL", 0) == r["counts"].get("LDL", 0) == 0, r
        if r["name"] != "softmax_grad":   # float4 rows in, float4 rows out
            # read-only inputs load through the non-coherent path: LDG.E.128.CONSTANT
            assert any(w.startswith("LDG.E.128") for w in r["wide"]), r
            assert "STG.E.128" in r["wide"], r
            # staged as float4 (the one-pass softmax from global memory: into registers)
            assert ("STS.128" in r["wide"]) == (r["stage"] == "shared"), r
        else:                           # an odd row: scalar accesses only
            assert not any(w.endswith(".128") for w in r["wide"]), r
