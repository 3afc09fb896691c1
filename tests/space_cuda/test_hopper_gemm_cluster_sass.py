"""SASS of `wgmma` kernels launched in clusters of two for sm_90a: HGMMA, TMA loads
(UTMALDG) with A's boxes multicast (`UTMALDG.MULTICAST`), the consumers' arrivals on
the partner's barriers (`SYNCS.ARRIVE.TRANS64.RED`, the remote form), no local-memory
spills (STL / LDL), and the cluster launch tag in the library. Four fixed cluster-2
kernels built from the template (fp16 persistent 128 x 256 with two consumers, bf16
with one consumer and a K tail, an fp16 batch matmul, persistent, and a bf16 dense +
bias + GELU, 256 x 128) and two sampled cluster-2 candidates through the builder's
path (`space.apply` -> `build_job`), all compiled in one subprocess
(tests/support/sass_tools.py)."""
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
    import json, os, random, re, tempfile
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
        out = {k: ops.get(k, 0) for k in ("HGMMA", "UTMALDG", "STL", "LDL")}
        out["tag"] = b"clusterCtaIdx.x" in open(lib, "rb").read()
        names = sass.mnemonic_counts(lib)
        out["multicast"] = sass.count_named(names, "UTMALDG.MULTICAST")
        out["remote_arrive"] = sass.count_named(names, "SYNCS.ARRIVE.TRANS64.RED")
        return out

    out = []
    for path, name, args, cfg in fixed:
        task = load_tasks(path, names=[name] if name else None, arg_items=args)[0]
        found = hopper_task(task.func, target)
        func = hopper_gemm(found.shape, HopperConfig(*cfg), found.epilogue,
                           list(found.params))
        out.append(counts(tvm.IRModule({"main": func})))
    for path, args, count in sampled:
        space = generate_space(load_tasks(path, arg_items=args)[0], target)
        rng, got = random.Random(7), 0
        while got < count:
            cand, mod = space.sample(rng, sketch="wgmma")
            if cand.values()["wgmma.cluster"] == 2:
                assert space.check(mod) is None
                out.append(counts(space.apply(cand)))
                got += 1
    print("RESULT", json.dumps(out))
""")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cluster_kernels_compile_to_hgmma_and_tma_without_spills(tmp_path):
    skip_without_cuobjdump()
    fixed = [
        (str(EX / "matmul.py"), None, ["dtype=float16", "M=4096", "N=4096", "K=1024"],
         (128, 256, 64, 4, 2, 8, True, 2)),
        (str(EX / "matmul.py"), None, ["dtype=bfloat16", "M=1000", "N=600", "K=200"],
         (128, 64, 32, 3, 1, 4, False, 2)),
        (str(EX / "batch_matmul.py"), None,
         ["dtype=float16", "B=3", "M=1000", "N=512", "K=200"], (128, 128, 64, 4, 2, 8, True, 2)),
        (str(EX / "mixed_precision.py"), "dense_bias_gelu_mp",
         ["M=2000", "N=4096", "K=1024", "dtype=bfloat16"], (256, 128, 64, 4, 2, 8, False, 2)),
    ]
    sampled = [(str(EX / "matmul.py"), ["dtype=float16", "M=4000", "N=3000", "K=1024"], 2)]
    script = SCRIPT.replace("FIXED", repr(json.dumps(fixed))).replace(
        "SAMPLED", repr(json.dumps(sampled)))
    got = run_compile_script(script, tmp_path)
    assert len(got) == 6
    for ops in got:
        assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0, ops
        assert ops["STL"] == ops["LDL"] == 0, ops
        assert ops["tag"] is True and ops["multicast"] > 0, ops
        assert ops["remote_arrive"] > 0, ops
