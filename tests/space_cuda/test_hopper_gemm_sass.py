"""SASS of the wgmma sketch's fused kernels (dense + bias + GELU and other epilogues) for
sm_90a: HGMMA, TMA loads (UTMALDG), no local-memory spills (STL / LDL), and the
write-back's column pairs as one store each (32-bit `STG.E` for 16-bit outputs, 64-bit
`STG.E.64` for fp32), no 16-bit stores.

Two fixed candidates (the largest accumulator tiles: 128 x 256 and 256 x 128 with two
consumer warpgroups, fp16 persistent and bf16) are built from the kernel template; sampled ones go
through the builder's path like every candidate (`space.apply` -> `build_job`). The
compiles run in one subprocess (tests/support/sass_tools.py)."""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.support.sass_tools import run_compile_script, skip_without_cuobjdump

ROOT = Path(__file__).resolve().parents[2]
MP = str(ROOT / "examples" / "mixed_precision.py")
RESIDUAL = textwrap.dedent('''
    from tvm import te

    import autosched


    @autosched.workload
    def residual(M=999, N=600, K=256):
        R = te.placeholder((M, N), name="R", dtype="float32")
        A = te.placeholder((M, K), name="A", dtype="float16")
        B = te.placeholder((N, K), name="B", dtype="float16")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(
            A[i, k].astype("float32") * B[j, k].astype("float32"), axis=k), name="C")
        y = te.compute((M, N), lambda i, j: te.max(C[i, j] + R[i, j], 0.0), name="y")
        return R, A, B, y
''')

SCRIPT = textwrap.dedent("""
    import json, os, random, re, sys, tempfile
    import tvm
    from autosched.measure.cuda import sass
    from autosched.measure.builder import build_job
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from search_space import generate_space
    from search_space.cuda.hopper_gemm import hopper_gemm
    from search_space.cuda.hopper_gemm_layout import HopperConfig
    from search_space.cuda.hopper_gemm_sketch import hopper_task

    target = resolve_target(json.dumps({"kind": "cuda", "arch": "sm_90a"}))
    fixed, sampled = json.loads(FIXED), json.loads(SAMPLED)

    def counts(mod):
        lib = os.path.join(tempfile.mkdtemp(), "k.so")
        reply = build_job({"mod": tvm.ir.save_json(mod), "out": lib,
                           "target": target.config, "kind": "cuda"})
        assert reply["ok"], reply
        text = sass.dump_sass(lib)
        ops = {k: len(re.findall(r"\\b" + k + r"[ .]", text))
               for k in ("HGMMA", "UTMALDG", "STL", "LDL")}
        ops["stores"] = sorted(set(re.findall(r"\\b(STG[.A-Z0-9]*) ", text)))
        return ops

    out = []
    for path, name, args, cfg in fixed:
        task = load_tasks(path, names=[name], arg_items=args)[0]
        found = hopper_task(task.func, target)
        func = hopper_gemm(found.shape, HopperConfig(*cfg), found.epilogue,
                           list(found.params))
        out.append(counts(tvm.IRModule({"main": func})))
    for path, name, args, count in sampled:
        space = generate_space(load_tasks(path, names=[name], arg_items=args)[0], target)
        rng = random.Random(3)
        for _ in range(count):
            cand, mod = space.sample(rng, sketch="wgmma")
            assert space.check(mod) is None
            out.append(counts(space.apply(cand)))
    print("RESULT", json.dumps(out))
""")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_fused_epilogue_kernels_compile_to_hgmma_tma_and_paired_stores(tmp_path):
    """Fixed: dense + bias + GELU fp16 (128 x 256, persistent: 256 tiles on 132
    blocks) and bf16 (256 x 128), both with two consumers; sampled: two of dense + bias
    + GELU fp16 with edge tiles, and one of a residual add + ReLU with fp32 output and
    the residual the first parameter."""
    skip_without_cuobjdump()
    residual = tmp_path / "residual.py"
    residual.write_text(RESIDUAL)
    gelu, big = "dense_bias_gelu_mp", ["M=2000", "N=4096", "K=1024"]
    fixed = [(MP, gelu, [*big, "dtype=float16"], (128, 256, 64, 4, 2, 8, True)),
             (MP, gelu, [*big, "dtype=bfloat16"], (256, 128, 64, 4, 2, 8, False))]
    sampled = [(MP, gelu, ["M=1000", "N=600", "K=256", "dtype=float16"], 2),
               (str(residual), "residual", [], 1)]
    script = SCRIPT.replace("FIXED", repr(json.dumps(fixed))).replace(
        "SAMPLED", repr(json.dumps(sampled)))
    got = run_compile_script(script, tmp_path)
    assert len(got) == 5
    for ops in got:
        assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0, ops
        assert ops["STL"] == ops["LDL"] == 0, ops
    assert [ops["stores"] for ops in got] == [["STG.E"]] * 4 + [["STG.E.64"]]
