"""The register form of the `rows_onchip` sketch (search_space/cuda/rows_registers.py):
each thread loads its share of a row once, with 128-bit loads where the row allows,
into an array TVM keeps in registers, and computes the statistics and the output
from it.

Its kernels equal numpy in the emulator (softmax, layer norm, RMS norm, forward and
backward, rows that end inside a step included); the per-thread array is one
thread's share; fixed register-form candidates compile for sm_80 and sm_90a to SASS
with 128-bit loads, no local memory, and no shared memory where a warp holds the
row; and sampled candidates load their rows with LDG.E.128."""
from __future__ import annotations

import importlib.util
import random
import re
import shutil
import textwrap
from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SKETCH = "rows_onchip"
REG = {"rows.form": "two_pass", "rows.stage": "registers", "rows.unroll": 16}


def _rows():
    """The row workloads, their numpy references and the emulation helper
    (test_rows_one_pass.py)."""
    spec = importlib.util.spec_from_file_location("rows_cases", HERE / "test_rows_one_pass.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reg(threads: int, per_block: int, vector: int) -> dict:
    return dict(REG, **{"rows.threads": threads, "rows.per_block": per_block,
                        "rows.vector": vector})


# (workload, row length, decisions) on 7 rows: rows that end inside a step (199, 200,
# 201: the last step's extra threads idle), a row over two warps (statistics through
# shared memory), a last block holding fewer rows than the others
EMULATED = [("softmax", 199, _reg(32, 2, 1)), ("layer_norm", 200, _reg(32, 2, 4)),
            ("rms_norm", 201, _reg(64, 1, 1)), ("softmax_grad", 256, _reg(32, 2, 4)),
            ("layer_norm_grad_x", 199, _reg(64, 1, 1)), ("rms_norm_grad", 200, _reg(32, 2, 4))]


@pytest.mark.parametrize("name, row, decisions", EMULATED, ids=[c[0] for c in EMULATED])
def test_register_form_equals_numpy(cuda_emulator, name, row, decisions):
    _rows()._emulate(cuda_emulator, name, row, decisions)


def test_each_thread_keeps_its_share_only():
    """After TVM's lowering the copy of a row is S x V values per thread: 1024 floats
    over 64 threads in float4 are 4 steps of 4; 201 over 64 threads one by one are 4
    steps (the last one past the row for most threads); layer norm's backward keeps
    x and dy."""
    import tvm

    from search_space import generate_space
    from search_space.cuda.lowering import lower_for_check
    from search_space.tir import iter_nodes

    rows = _rows()
    target = rows._target()
    for name, row, decisions, want in (
            ("layer_norm", 1024, _reg(64, 1, 4), {"x_registers": 16}),
            ("rms_norm", 201, _reg(64, 1, 1), {"x_registers": 4}),
            ("layer_norm_grad_x", 1024, _reg(64, 1, 4), {"x_registers": 16, "dy_registers": 16})):
        mod = rows._apply(generate_space(rows._task(name, 64, row), target), decisions)
        func = lower_for_check(mod, target.tvm())
        sizes = {str(n.buffer.name): [int(e) for e in n.buffer.shape]
                 for n in iter_nodes(func.body) if isinstance(n, tvm.tirx.AllocBuffer)
                 and str(n.buffer.name).endswith("_registers")}
        assert sizes == {k: [v] for k, v in want.items()}, name


def test_registers_are_offered_while_a_share_fits():
    """`rows.stage` offers registers to the two-pass form while a thread's share of
    the rows read more than once takes at most 32 registers: softmax 1024 on a warp
    is 32 floats; layer norm's backward reads x and dy, 64 floats on a warp, 32 on
    two; softmax 8192 on 256 threads is 32, on a warp 256; never to the one-pass form."""
    from search_space import generate_space
    from search_space.decisions import Decider

    rows = _rows()
    target = rows._target()
    for name, row, fixed, stages in (
            ("softmax", 1024, {"rows.threads": 32}, ("registers", "shared", "global")),
            ("softmax", 1024, {"rows.threads": 32, "rows.form": "one_pass"},
             ("shared", "global")),
            ("layer_norm_grad_x", 1024, {"rows.threads": 32}, ("shared", "global")),
            ("layer_norm_grad_x", 1024, {"rows.threads": 64}, ("registers", "shared", "global")),
            ("softmax", 8192, {"rows.threads": 256}, ("registers", "shared", "global")),
            ("softmax", 8192, {"rows.threads": 32}, ("shared", "global"))):
        space = generate_space(rows._task(name, 64, row), target)
        decide = Decider(dict(fixed, **{"rows.form": fixed.get("rows.form", "two_pass")}),
                         rng=random.Random(0), strict=False)
        space.sketches[SKETCH].program(space.task.func, decide)
        assert decide.specs["rows.stage"].options == stages, (name, row, fixed)
        assert decide.made["rows.vector"] == 4


def test_a_register_row_over_several_warps_is_alone_in_its_block():
    """Several rows a block for a warp per row; one row a block where a row spans
    warps (its statistics pass through shared memory, rows_registers.py)."""
    import tvm
    from tvm import s_tir

    from search_space import generate_space
    from search_space.decisions import Decider

    rows = _rows()
    for threads, per_block in ((32, (1, 2, 4, 8, 16)), (64, (1,)), (256, (1,))):
        space = generate_space(rows._task("softmax", 64, 8192 if threads > 64 else 1024),
                               rows._target())
        sketch = space.sketches[SKETCH]
        decide = Decider(dict(REG, **{"rows.threads": threads}), rng=random.Random(0),
                         strict=False)
        program = sketch.program(space.task.func, decide)
        sketch.apply(s_tir.Schedule(tvm.IRModule({"main": program})), decide)
        assert decide.made["rows.stage"] == "registers"
        assert decide.specs["rows.per_block"].options == per_block, threads


# register-form candidates compiled for both archs: (workload, row, decisions)
FIXED = [("softmax", 1024, _reg(32, 4, 4)), ("layer_norm", 1024, _reg(64, 1, 4)),
         ("layer_norm_grad_x", 512, _reg(32, 2, 4)), ("rms_norm_grad", 1000, _reg(64, 1, 4)),
         ("softmax_grad", 1001, _reg(128, 1, 1))]
SAMPLED = ("layer_norm", 1024, 8)   # workload, row, candidates

COMPILE = textwrap.dedent("""
    import json, os, random, re, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    import tvm
    from autosched.measure.cuda import sass
    from autosched.measure.cuda.compiler import build_cuda
    from search_space import generate_space
    from test_rows_one_pass import _apply, _target, _task
    from test_rows_registers import FIXED, SAMPLED

    def build(target, mods):
        # every kernel in one module: one nvcc run; kernel i's SASS by its name
        funcs = {f"k{i}": m["main"].with_attr("global_symbol", f"k{i}")
                 for i, m in enumerate(mods)}
        lib = os.path.join(tempfile.mkdtemp(), "k.so")
        build_cuda(tvm.IRModule(funcs), target.config).executable.export_library(lib)
        parts = re.split(r"Function : (\\S+)", sass.dump_sass(lib))
        text = dict(zip(parts[1::2], parts[2::2]))
        return [text[f"k{i}_kernel"] for i in range(len(mods))]

    out = {"fixed": [], "sampled": []}
    for arch in ("sm_80", "sm_90a"):
        target = _target(arch)
        spaces = [generate_space(_task(n, 512, row), target) for n, row, _ in FIXED]
        mods = [_apply(s, d) for s, (_, _, d) in zip(spaces, FIXED)]
        seen = {}
        if arch == "sm_90a":   # the sampled candidates, in the same nvcc run
            name, row, n = SAMPLED
            space = generate_space(_task(name, 512, row), target)
            rng = random.Random(5)
            while len(seen) < n:
                cand, mod = space.sample(rng, sketch="rows_onchip")
                seen.setdefault(cand, mod)
        texts = build(target, mods + list(seen.values()))
        out["fixed"] += [{"arch": arch, "name": n, "check": s.check(m), "sass": t}
                         for (n, _, _), s, m, t in zip(FIXED, spaces, mods, texts)]
        out["sampled"] += [{"decisions": c.values(), "check": space.check(m), "sass": t}
                           for (c, m), t in zip(seen.items(), texts[len(mods):])]
    print("RESULT", json.dumps([out]))
""")

MEMORY = ("LDG", "STG", "LDS", "STS", "LDL", "STL")


def memory_ops(sass_text: str) -> dict:
    """Memory instructions by mnemonic, modifiers included (LDG.E.128.CONSTANT: a
    128-bit load through the read-only path)."""
    names = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)",
                       sass_text)
    return dict(Counter(n for n in names if n.split(".")[0] in MEMORY))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_register_form_sass():
    """The fixed candidates' memory instructions, exactly, on sm_80 and sm_90a (the
    same): float4 rows in (LDG.E.128: x, and gamma / beta / w shared by the rows)
    and out (STG.E.128); no local memory (the copies are registers); a row on one
    warp (softmax, layer norm's backward) touches no shared memory at all; a row
    over several warps combines each of its reductions through shared memory (3
    stores and 3 loads each: the warps' partial sums, the result, the statistic);
    an odd row loads and stores scalars. Of eight sampled layer-norm candidates (of
    every stage and form), all load with LDG.E.128 and none touches local memory."""
    from support.sass_tools import run_compile_script, skip_without_cuobjdump

    skip_without_cuobjdump()
    (result,) = run_compile_script(COMPILE, HERE)
    want = {
        "softmax": {"LDG.E.128.CONSTANT": 8, "STG.E.128": 8},
        "layer_norm": {"LDG.E.128.CONSTANT": 12, "STS": 6, "LDS": 6, "STG.E.128": 4},
        "layer_norm_grad_x": {"LDG.E.128.CONSTANT": 12, "STG.E.128": 4},
        "rms_norm_grad": {"LDG.E.128.CONSTANT": 12, "LDG.E.CONSTANT": 16, "STS": 6, "LDS": 6,
                          "STG.E.128": 4},
        "softmax_grad": {"LDG.E.CONSTANT": 16, "STS": 3, "LDS": 3, "STG.E": 8}}
    assert [(r["arch"], r["name"]) for r in result["fixed"]] == [
        (arch, name) for arch in ("sm_80", "sm_90a") for name, _, _ in FIXED]
    for r in result["fixed"]:
        assert r["check"] is None
        assert memory_ops(r["sass"]) == want[r["name"]], (r["arch"], r["name"])
        assert "SHFL" in r["sass"]     # the reductions' warp shuffles
    sampled = result["sampled"]
    assert len(sampled) == SAMPLED[2] and all(r["check"] is None for r in sampled)
    wide = [r for r in sampled if any(k.startswith("LDG.E.128") for k in memory_ops(r["sass"]))]
    assert len(wide) == 8, [r["decisions"] for r in sampled if r not in wide]
    assert all(not {"LDL", "STL"} & {k.split(".")[0] for k in memory_ops(r["sass"])}
               for r in sampled)
