"""The H200 device check, in one call on the GPU machine (Python 3.12, torch, CUDA; no TVM
compiler): everything it needs was built here by `prepare.py` into `bench/gpu/carry/`.

    python bench/gpu/device_check.py --out $OUT [--budget-s 540]

1. every case bundle measured by `python -m autosched.measure.bundle DIR` (TVM's runtime
   libraries and the cp312 tvm-ffi wheel from the carry), then torch's kernel for the
   same operator on the same inputs (cuBLAS / cuDNN, CUDA events, L2 flushed): the best
   latency of our round, torch's, and the ratio;
2. the fault bundle: a kernel that reads 1 GiB out of bounds, then correct kernels,
   through the same runner: the first must be its own run_error, the rest measured;
3. the torch-op library (linear + its gradient kernels) called as torch ops on a
   non-default stream and under autograd, against torch;
4. `bench/training_plans.py --device cuda` (plans against torch.compile's memory-budget
   partitioner; offload to pinned host memory for real, torch.cuda.max_memory_allocated
   per point) on the repository's GPT and a GPU-sized one (`--training-models`);
5. `bench/runtime_plans.py --device cuda` (plans against hand-written checkpointing);

and writes `device_check.json` into --out after every step (the benches' JSON, plot and
log beside it). Each step has its share of the budget, stops at it keeping what it
finished, and records its own error, so one failing step does not cost the others.
Without a GPU it checks the carry, says where it stops and exits 3.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent)]        # cases, carry; then provenance

import carry  # noqa: E402
import provenance  # noqa: E402
from bounded import run_bounded  # noqa: E402
from cases import CASES, TORCH_PEERS  # noqa: E402


def bundle_results(bundle: Path) -> dict:
    """candidate id -> result (MeasureResult JSON) of a measured bundle."""
    out = {}
    for f in sorted((bundle / "results").glob("*.json")):
        data = json.loads(f.read_text())
        if "result" in data:
            out[f.stem] = data["result"]
    return out


def best_of(results: dict) -> tuple[str | None, float | None]:
    ok = {cid: statistics.median(r["latencies"]) for cid, r in results.items()
          if r.get("latencies") and not r.get("error_kind")}
    if not ok:
        return None, None
    cid = min(ok, key=ok.get)
    return cid, ok[cid]


def measure_bundle(bundle: Path, env: dict, timeout: float) -> dict:
    return run_bounded([sys.executable, "-m", "autosched.measure.bundle", str(bundle)], timeout,
                       env=env)


def case_inputs(bundle: Path) -> list:
    """The inputs the bundle's candidates were judged on (its task's reference data)."""
    from autosched.measure import load_reference

    manifest = json.loads((bundle / "manifest.json").read_text())
    (task,) = manifest["tasks"].values()
    ref = load_reference(str(bundle / task["reference"]))
    if ref is None:
        raise RuntimeError(f"{bundle.name}: no reference data after measuring")
    return ref.arrays()[0]


def check_case(case, env: dict, timeout: float) -> dict:
    from torch_peers import peer_latency

    bundle = carry.CARRY / "bundles" / case.name
    row = {"case": case.name, "workload": case.workload, "args": case.args,
           "measure": measure_bundle(bundle, env, timeout)}
    results = bundle_results(bundle)
    kinds = [r.get("error_kind") or "ok" for r in results.values()]
    row["results"] = {k: kinds.count(k) for k in sorted(set(kinds))}
    row["best_candidate"], row["autosched_s"] = best_of(results)
    row["torch"] = peer_latency(TORCH_PEERS[case.torch_peer], case_inputs(bundle))
    if row["autosched_s"]:
        row["ratio_vs_torch"] = row["autosched_s"] / row["torch"]["median_s"]
    return row


def check_faults(env: dict, prepared: dict, timeout: float) -> dict:
    bundle = carry.CARRY / "bundles" / "faults"
    row = {"measure": measure_bundle(bundle, env, timeout)}
    results = bundle_results(bundle)
    poisoned = prepared["poisoned_candidate"]
    bad = results.get(poisoned, {})
    rest = [r for cid, r in results.items() if cid != poisoned]
    row.update(poisoned=bad, others=[r.get("error_kind") or "ok" for r in rest],
               passed=bad.get("error_kind") == "run_error"
               and bool(rest) and all(not r.get("error_kind") for r in rest))
    return row


def check_torch_ops() -> dict:
    """linear + gradients as torch ops, on a side stream and under autograd."""
    import torch
    import torch.nn.functional as F

    import autosched.torch as at

    lib = at.load_library(carry.CARRY / "torch_lib")
    m, n, k = 512, 1024, 768
    stream = torch.cuda.Stream()
    g = torch.Generator(device="cuda").manual_seed(0)
    with torch.cuda.stream(stream):
        # made on the side stream right before the call: an op that ran on another
        # stream would race with these writes
        x = torch.randn(m, k, device="cuda", generator=g).requires_grad_()
        w = torch.randn(n, k, device="cuda", generator=g).requires_grad_()
        b = torch.randn(n, device="cuda", generator=g).requires_grad_()
        y = torch.ops.autosched.linear(x, w, b)
        y.square().sum().backward()
    stream.synchronize()
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y2 = F.linear(x2, w2, b2)
    y2.square().sum().backward()
    errors = {name: float((a - r).abs().max() / r.abs().max())
              for name, a, r in (("y", y, y2), ("grad_x", x.grad, x2.grad),
                                 ("grad_w", w.grad, w2.grad), ("grad_b", b.grad, b2.grad))}
    return {"ops": sorted(lib.ops), "relative_errors": errors,
            "passed": all(e < 1e-3 for e in errors.values())}


def check_bench(script: str, args: list[str], out_dir: Path, env: dict,
                timeout: float) -> dict:
    """bench/`script` --device cuda --clock wall ARGS --json OUT/<name>_cuda.json; its log
    in OUT/<name>_cuda.log. The bench writes its JSON as it goes (after each model), so
    a run stopped at the limit keeps what it finished."""
    name = Path(script).stem
    path = out_dir / f"{name}_cuda.json"
    cmd = [sys.executable, f"bench/{script}", "--device", "cuda", "--clock", "wall", *args,
           "--json", str(path)]
    row = run_bounded(cmd, timeout, log=out_dir / f"{name}_cuda.log", env=env)
    if path.exists():
        data = json.loads(path.read_text())
        row.update({k: data[k] for k in ("rows", "verdicts") if k in data})
    return row


def device_info() -> dict:
    import platform

    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, capability=list(torch.cuda.get_device_capability()),
                    sm_count=p.multi_processor_count, memory=p.total_memory)
    return info


def step(report: dict, name: str, fn, *args) -> None:
    """One step into report["results"][name]; the report is written after every step,
    so a call stopped at its limit keeps the steps it finished."""
    start = time.monotonic()
    results = report.setdefault("results", {})
    try:
        results[name] = fn(*args)
    except Exception as e:  # one step's failure is recorded; the others still run
        results[name] = {"error": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc()[-3000:]}
    results[name]["step_seconds"] = time.monotonic() - start
    provenance.write_json(Path(report["out_dir"]) / "device_check.json",
                          {k: v for k, v in report.items() if k != "provenance"},
                          report["provenance"])
    print(f"{name}: {time.monotonic() - start:.0f} s", flush=True)


def preflight() -> dict:
    """What the carry holds; raises when something prepare.py makes is missing."""
    prepared = json.loads((carry.CARRY / "prepared.json").read_text())
    for name in prepared["cases"] + ["faults"]:
        if not (carry.CARRY / "bundles" / name / "manifest.json").exists():
            raise SystemExit(f"carry: bundle {name} is missing; run prepare.py")
    for lib in carry.RUNTIME_LIBS:
        if not (carry.CARRY / "runtime" / "tvm" / "lib" / lib).exists():
            raise SystemExit(f"carry: {lib} is missing; run prepare.py")
    return prepared


# Each step's share of --budget-s, by weight over the steps chosen (a kernel case took
# 31-36 s on the H200, the training-plans bench about 4 min a model; faults and torch_ops
# take seconds, and their fixed limits).
WEIGHTS = {"case": 3, "training_plans": 16, "runtime_plans": 8}
BENCH_STEPS = ("faults", "torch_ops", "training_plans", "runtime_plans")


def chosen_steps(spec: str | None, cases: list) -> list[str]:
    """The step names --steps picks, in running order: the benches first, then the
    kernel cases (the open issue's bench is not starved by slow kernel rounds)."""
    names = ["training_plans", *(c.name for c in cases), "faults", "torch_ops",
             "runtime_plans"]
    if spec is None:
        return names
    wanted = spec.split(",")
    if unknown := sorted(set(wanted) - set(names)):
        raise ValueError(f"--steps: unknown {unknown}; known: {names}")
    return [n for n in names if n in wanted]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="the whole check's seconds, shared by weight: each kernel case "
                         f"{WEIGHTS['case']}, training plans {WEIGHTS['training_plans']}, "
                         f"runtime plans {WEIGHTS['runtime_plans']}")
    ap.add_argument("--steps", help="comma-separated step names (default: all): the cases "
                                    "of cases.py, " + ", ".join(BENCH_STEPS))
    ap.add_argument("--training-models", default="gpt_gpu,gpt",
                    help="--models of bench/training_plans.py")
    args = ap.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    prepared = preflight()
    cases = {c.name: c for c in CASES if c.name in prepared["cases"]}
    try:
        steps = chosen_steps(args.steps, list(cases.values()))
    except ValueError as e:
        ap.error(str(e))
    print(carry.describe(), flush=True)
    report = {"provenance": provenance.stamp(seed=prepared["provenance"]["seed"],
                                             argv=argv and [__file__, *argv]),
              "prepared": prepared, "device": device_info(), "out_dir": str(out_dir),
              "steps": steps}
    if not report["device"]["cuda_available"]:
        print("device check: the carry is complete; no GPU here, so it stops before "
              "measuring (run it on the GPU machine)")
        return 3
    env = carry.unpack_on_device()
    sys.path[:0] = [p for p in env["PYTHONPATH"].split(os.pathsep) if p]
    os.environ["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"]
    weights = {n: WEIGHTS["case"] if n in cases else WEIGHTS.get(n, 0) for n in steps}
    seconds = {n: args.budget_s * w / sum(weights.values()) for n, w in weights.items()}
    for name in steps:
        if name in cases:
            step(report, name, check_case, cases[name], env, seconds[name])
        elif name == "faults":
            step(report, name, check_faults, env, prepared, 30)
        elif name == "torch_ops":
            step(report, name, check_torch_ops)
        elif name == "training_plans":
            # no candidate budgets: their compiles would spend the step's device time
            step(report, name, check_bench, "training_plans.py",
                 ["--models", args.training_models, "--candidate-budgets", "",
                  "--png", str(out_dir / "training_plans_cuda.png")], out_dir, env,
                 seconds[name])
        else:
            step(report, name, check_bench, "runtime_plans.py", [], out_dir, env,
                 seconds[name])
    for name in (n for n in steps if n in cases):
        r = report["results"][name]
        if "ratio_vs_torch" in r:
            print(f"{name}: autosched {r['autosched_s'] * 1e3:.3f} ms, torch "
                  f"{r['torch']['median_s'] * 1e3:.3f} ms, ratio {r['ratio_vs_torch']:.2f}")
        else:
            print(f"{name}: {r.get('error') or r.get('results')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
