"""Build, here, everything the H200 device check carries (`bench/gpu/carry/`), and say
how big it is.

    python bench/gpu/prepare.py [--trials 8] [--cases matmul_fp32_1024,...]

For each case of `cases.py` a bundle round (`autosched tune --runner bundle:DIR`, the
H200 target) of `--trials` candidates; the fault bundle: candidates of `scale`, the
first replaced by a kernel that reads 1 GiB past its input; a torch-op library (linear
with its three gradient kernels) of the space's default schedules; the runtime-only TVM
package and the cp312 tvm-ffi wheel (carry.py); and `carry/prepared.json` with the
provenance of all of it. Ends with the carried size: the device call takes 64 MiB.
Then: `python bench/gpu/device_check.py` on the GPU machine (see README.md).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(HERE))

import carry  # noqa: E402
import provenance  # noqa: E402
from cases import CASES, H200_TARGET  # noqa: E402

WORK = HERE / "work"            # the database of the bundle rounds (not carried)
FAULT_CANDIDATES = 3
TORCH_LIB_OPS = ("linear", "linear_grad_x", "linear_grad_w", "linear_grad_b")
TORCH_LIB_ARGS = ["M=512", "N=1024", "K=768"]


def tune_into_bundle(op_file: str, workloads: list[str], args: list[str], trials: int,
                     bundle: Path, seed: int) -> list[str]:
    """One bundle round of `trials` candidates; returns the command it ran."""
    cmd = [sys.executable, "-m", "autosched", "tune", str(ROOT / op_file),
           "--target", json.dumps(H200_TARGET), "--trials", str(trials),
           "--batch-size", str(trials), "--runner", f"bundle:{bundle}",
           "--db", f"sqlite:///{WORK / 'prepare.db'}", "--work-dir", str(WORK),
           "--seed", str(seed)]
    for w in workloads:
        cmd += ["--workload", w]
    for a in args:
        cmd += ["--arg", a]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0 or not (bundle / "manifest.json").exists():
        raise SystemExit(f"building {bundle.name} failed: {out.stderr.strip()[-2000:]}")
    return cmd


def poison_first_candidate(bundle: Path) -> str:
    """Replace the library of the round's first built candidate by the out-of-bounds
    kernel (same signature); returns its candidate id."""
    import tvm

    from fault_ops import out_of_bounds

    from autosched.measure import build_cuda
    from autosched import resolve_target
    from search_space.cuda import GpuLimits, reference_schedule

    manifest = json.loads((bundle / "manifest.json").read_text())
    first = next(c for c in manifest["candidates"] if c.get("lib"))
    size = int(manifest["tasks"][first["task_key"]]["args"]["N"])
    limits = GpuLimits.of(resolve_target(json.dumps(H200_TARGET)))
    wild = reference_schedule(tvm.IRModule({"main": out_of_bounds(size)}), limits)
    build = build_cuda(wild, H200_TARGET)
    build.executable.export_library(str(bundle / first["lib"]))
    return first["id"]


def build_torch_library(out: Path) -> None:
    """linear and its gradients, default schedules, for the torch-op check."""
    from autosched import KernelChoice, load_instances, make_task, resolve_target, write_library
    from search_space import generate_space

    target = resolve_target(json.dumps(H200_TARGET))
    pairs = load_instances(str(ROOT / "examples" / "nn_ops.py"), list(TORCH_LIB_OPS),
                           TORCH_LIB_ARGS)
    tasks = [make_task(d, a) for d, a in pairs]
    choices = [KernelChoice(generate_space(t, target).default_candidate().to_json())
               for t in tasks]
    write_library(tasks, choices, target, str(out), [d.meta for d, _ in pairs])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=8,
                    help="candidates per case (a case may set its own)")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    stamp = provenance.stamp(seed=args.seed, argv=None if argv is None else [__file__, *argv])
    chosen = [c for c in CASES if not args.cases or c.name in args.cases.split(",")]
    for path in (carry.CARRY / "bundles", carry.CARRY / "torch_lib", WORK):
        shutil.rmtree(path, ignore_errors=True)
    WORK.mkdir(parents=True)
    carry.pack_runtime()
    carry.fetch_tvm_ffi_wheel()
    commands = {}
    for case in chosen:
        bundle = carry.CARRY / "bundles" / case.name
        commands[case.name] = tune_into_bundle(case.op_file, [case.workload], case.arg_items(),
                                               case.trials or args.trials, bundle, args.seed)
        print(f"{case.name}: bundle built", flush=True)
    faults = carry.CARRY / "bundles" / "faults"
    commands["faults"] = tune_into_bundle("bench/gpu/fault_ops.py", ["scale"], ["N=65536"],
                                          FAULT_CANDIDATES, faults, args.seed)
    poisoned = poison_first_candidate(faults)
    build_torch_library(carry.CARRY / "torch_lib")
    prepared = {"provenance": stamp, "cases": [c.name for c in chosen],
                "trials": {c.name: c.trials or args.trials for c in chosen},
                "target": H200_TARGET, "commands": commands, "poisoned_candidate": poisoned,
                "torch_library": {"ops": TORCH_LIB_OPS, "args": TORCH_LIB_ARGS,
                                  "schedules": "the space's default candidates"}}
    (carry.CARRY / "prepared.json").write_text(json.dumps(prepared, indent=1) + "\n")
    print(carry.describe())
    return 0 if carry.carried_bytes() <= carry.LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
