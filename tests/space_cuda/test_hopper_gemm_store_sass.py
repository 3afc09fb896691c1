"""SASS of `wgmma` kernels writing back through TMA stores (`wgmma.store` = "tma") for
sm_90a: HGMMA, TMA loads (UTMALDG) and TMA stores (UTMASTG), the staging writes as
shared-memory stores of a pair each (32-bit `STS` for 16-bit outputs, `STS.64` for
fp32), no global stores (STG) and no local-memory spills (STL / LDL). Five fixed
candidates built from the template (fp16 out with edge tiles; fp32 out, persistent
with more tiles than SMs; bf16 dense + bias + GELU with ragged edges; an fp16 batch
matmul, persistent, in clusters of two; a bf16 cluster-2 GEMM with one consumer) and
two sampled "tma" candidates through the builder's path (`space.apply` -> `build_job`),
all compiled in one subprocess (tests/support/sass_tools.py)."""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.support.sass_tools import run_compile_script, skip_without_cuobjdump

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"

SCRIPT = textwrap.dedent("""
    import json, os, random, tempfile
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
        ops = sass.opcode_counts(lib)
        out = {k: ops.get(k, 0) for k in ("HGMMA", "UTMALDG", "UTMASTG", "STG", "STL",
                                          "LDL")}
        names = sass.mnemonic_counts(lib)
        out["sts"] = sorted(n for n in names if n.split(".")[0] == "STS")
        return out

    out = []
    for path, name, args, cfg in fixed:
        task = load_tasks(path, names=[name] if name else None, arg_items=args)[0]
        found = hopper_task(task.func, target)
        func = hopper_gemm(found.shape, HopperConfig(*cfg), found.epilogue,
                           list(found.params))
        out.append(counts(tvm.IRModule({"main": func})))
    for path, name, args, count in sampled:
        task = load_tasks(path, names=[name] if name else None, arg_items=args)[0]
        space = generate_space(task, target)
        rng, got = random.Random(11), 0
        while got < count:
            cand, mod = space.sample(rng, sketch="wgmma")
            if cand.values()["wgmma.store"] == "tma":
                assert space.check(mod) is None
                out.append(counts(space.apply(cand)))
                got += 1
    print("RESULT", json.dumps(out))
""")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_tma_store_kernels_compile_to_utmastg_without_spills(tmp_path):
    skip_without_cuobjdump()
    mp = str(EX / "mixed_precision.py")
    fixed = [
        (str(EX / "matmul.py"), None, ["dtype=float16", "M=1000", "N=600", "K=256"],
         (128, 128, 64, 4, 2, 8, False, 1, "tma")),
        (mp, "matmul_mp", ["M=4096", "N=4096", "K=1024", "dtype=float16"],
         (128, 128, 64, 4, 2, 8, True, 1, "tma")),
        (mp, "dense_bias_gelu_mp", ["M=2000", "N=1000", "K=1024", "dtype=bfloat16"],
         (128, 128, 64, 4, 2, 8, False, 1, "tma")),
        (str(EX / "batch_matmul.py"), None,
         ["dtype=float16", "B=3", "M=1000", "N=512", "K=200"],
         (128, 128, 64, 3, 2, 8, True, 2, "tma")),
        (str(EX / "matmul.py"), None, ["dtype=bfloat16", "M=1000", "N=504", "K=200"],
         (128, 64, 32, 4, 1, 4, False, 2, "tma")),
    ]
    sampled = [(mp, "dense_bias_gelu_mp", ["M=1000", "N=600", "K=256", "dtype=float16"], 2)]
    script = SCRIPT.replace("FIXED", repr(json.dumps(fixed))).replace(
        "SAMPLED", repr(json.dumps(sampled)))
    got = run_compile_script(script, tmp_path)
    assert len(got) == 7
    for ops in got:
        assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0 and ops["UTMASTG"] > 0, ops
        assert ops["STG"] == ops["STL"] == ops["LDL"] == 0, ops
    assert [ops["sts"] for ops in got] == [["STS"], ["STS.64"], ["STS"], ["STS"], ["STS"],
                                           ["STS"], ["STS"]]
