"""Wgmma kernels compiled for sm_90a and their SASS read, for the Hopper sketch's SASS
tests: fixed kernels built from the template at given configurations, and kernels sampled
from the sketch's space (those whose decisions match what the test asks) built through the
builder's path like every candidate (`space.apply` -> `build_job`). The compiles run in one
subprocess (`sass_tools.run_compile_script`)."""
from __future__ import annotations

import json
import textwrap

from .sass_tools import run_compile_script

SCRIPT = textwrap.dedent("""
    import json, os, random, sys, tempfile
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
    fixed, sampled = json.loads(sys.argv[2]), json.loads(sys.argv[3])

    def read(mod):
        lib = os.path.join(tempfile.mkdtemp(), "k.so")
        reply = build_job({"mod": tvm.ir.save_json(mod), "out": lib,
                           "target": target.config, "kind": "cuda"})
        assert reply["ok"], reply
        return {"mnemonics": dict(sass.mnemonic_counts(lib)),
                "cluster_tag": b"clusterCtaIdx.x" in open(lib, "rb").read()}

    def task_of(path, name, args):
        return load_tasks(path, names=[name] if name else None, arg_items=args)[0]

    out = []
    for path, name, args, cfg in fixed:
        found = hopper_task(task_of(path, name, args).func, target)
        func = hopper_gemm(found.shape, HopperConfig(*cfg), found.epilogue,
                           list(found.params))
        out.append(read(tvm.IRModule({"main": func})))
    for path, name, args, count, seed, want in sampled:
        space = generate_space(task_of(path, name, args), target)
        rng, got = random.Random(seed), 0
        while got < count:
            cand, mod = space.sample(rng, sketch="wgmma")
            if all(cand.values()[k] == v for k, v in want.items()):
                assert space.check(mod) is None
                out.append(read(space.apply(cand)))
                got += 1
    print("RESULT", json.dumps(out))
""")


def hopper_sass(fixed: list, sampled: list, tmp_path) -> list[dict]:
    """Per kernel, in order: {"mnemonics": SASS mnemonic -> count, "cluster_tag": whether
    the library carries a cluster launch}. `fixed`: (op file, workload or None, --arg
    items, HopperConfig fields); `sampled`: (op file, workload or None, --arg items, how
    many, seed, {decision: value} a sample must have)."""
    return run_compile_script(SCRIPT, tmp_path, json.dumps(fixed), json.dumps(sampled))


def counts(kernel: dict, *names: str) -> dict:
    """name -> how many instructions of `kernel` it names (an opcode, or one with
    modifiers: `sass.count_named`)."""
    from autosched.measure.cuda.sass import count_named

    return {n: count_named(kernel["mnemonics"], n) for n in names}


def mnemonics_of(kernel: dict, opcode: str) -> list[str]:
    """The distinct mnemonics of `opcode` in `kernel`, sorted (e.g. ["STG.E.64"])."""
    return sorted(n for n in kernel["mnemonics"] if n.split(".")[0] == opcode)
