"""The model path on the GPU: the GPT-style and ResNet-style examples in bf16, their
training step tuned on the device, against torch, and the training plans on CUDA.

Two device calls, the staging of the closed-loop run (stage.py; bench/gpu/README.md,
"The model path on the GPU"):

    python bench/gpu/stage.py pack                               # here
    python bench/gpu/stage.py unpack-compiler                    # call 1, carry: stage1
    python bench/gpu/model_path.py --out $OUT --budget-s 480     # call 2, carry: stage2

Call 2 re-executes itself under `stage.staged_env` (the whole tuner, TVM's compiler
included) and then runs its steps, each a child process stopped at its share of
`--budget-s` (what a step leaves unspent goes to the steps after it):

- `e2e_gpt`, `e2e_resnet`: bench/model_e2e.py on the example at its GPU size in
  `--dtype` (bf16), the training step: `autosched tune-model --train --target cuda` with
  the local runner (`--trials` over all tasks) and export-model, then eager, inductor,
  inductor max-autotune and autosched's backend, each with and without CUDA graphs, and
  the per-operator table; the GPT also with its bucketed capture against recompiling
  per shape at three sequence lengths. After each, `$OUT/gpu_records.jsonl` is exported
  again from the run's database (closed_loop.export_records);
- `training_plans`: bench/training_plans.py --device cuda --clock wall (our plans
  against torch.compile's memory-budget partitioner, offload to pinned host memory).

`$OUT/model_path.json` (provenance, the staged commit, the plan of steps, every step's
row with its child's JSON) is rewritten after every step, so a call stopped at its limit
returns what it measured; each child also rewrites its own JSON as it goes. `--rehearse`
runs the same steps on this CPU (target llvm, fp32, tiny sizes, a few trials, no
max-autotune), which is how the script is checked without a GPU; `--dry-run` prints the
plan of steps and stops.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent)]        # closed_loop, stage; then provenance

import closed_loop  # noqa: E402
from bounded import run_bounded  # noqa: E402
from stage import STAGED  # noqa: E402

STEPS = {"e2e_gpt": 4.0, "e2e_resnet": 3.0, "training_plans": 3.0}   # step: weight
DEVICE = {"device": "cuda", "dtype": "bf16", "size": "gpu", "rounds": 10, "calls": 5,
          "peers": "eager,inductor,max-autotune,autosched", "training_models": "gpt_gpu"}
REHEARSAL = {"device": "cpu", "dtype": "fp32", "size": "tiny", "rounds": 2, "calls": 1,
             "peers": "eager,inductor,autosched", "training_models": ""}
TINY_MLP = ({"n_layer": 2, "width": 32, "hidden": 64}, {"batch": 16, "width": 32})


class ModelPathRun(closed_loop.Run):
    """closed_loop's report of steps, written to `out/model_path.json`."""

    def write(self) -> None:
        import provenance

        provenance.write_json(self.out / "model_path.json", self.report, self.stamp)


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=480.0,
                    help="seconds for every step together (their shares by weight)")
    ap.add_argument("--steps", help=f"comma-separated, of {', '.join(STEPS)} (default: all)")
    ap.add_argument("--trials", type=int,
                    help="tune-model trials a model (over all its tasks; default 48, "
                         "rehearsal 4)")
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"),
                    help="the models' dtype (default bf16; rehearsal fp32: llvm builds no "
                         "bf16 matmul of the tensor-core kind)")
    ap.add_argument("--training-models", help="bench/training_plans.py --models (default "
                    "gpt_gpu; rehearsal: a tiny MLP model file)")
    ap.add_argument("--plans-tune-trials", type=int, default=0,
                    help="training_plans.py --tune-trials: its plans also on the GPT's "
                         "tuned training-step kernels (0: none; tuning takes the step's time)")
    ap.add_argument("--rehearse", action="store_true",
                    help="no GPU: the same steps on this CPU, tiny sizes, few trials")
    ap.add_argument("--dry-run", action="store_true", help="print the plan of steps, stop")
    args = ap.parse_args(argv)
    names = args.steps.split(",") if args.steps else list(STEPS)
    if unknown := sorted(set(names) - set(STEPS)):
        ap.error(f"unknown step(s) {unknown}; known: {list(STEPS)}")
    if args.budget_s <= 0:
        ap.error(f"--budget-s must be > 0, got {args.budget_s}")
    if args.trials is not None and args.trials < 1:
        ap.error(f"--trials must be >= 1, got {args.trials}")
    if args.plans_tune_trials < 0:
        ap.error(f"--plans-tune-trials must be >= 0, got {args.plans_tune_trials}")
    args.step_names = [n for n in STEPS if n in names]
    return args


def settings(args) -> dict:
    """What the steps run with: the device's defaults or the rehearsal's, then flags."""
    s = dict(REHEARSAL if args.rehearse else DEVICE,
             trials=args.trials or (4 if args.rehearse else 48))
    if args.dtype:
        s["dtype"] = args.dtype
    if args.training_models is not None:
        s["training_models"] = args.training_models
    db = "model_path_rehearsal.db" if args.rehearse else "model_path.db"
    s["db"] = f"sqlite:///{closed_loop.RUN_DIR / db}"
    return s


def commands(args, s: dict, out: Path) -> dict[str, list[str]]:
    """Each step's command (run from the repository root)."""
    py = sys.executable
    cmds = {}
    for model in ("gpt", "resnet"):
        cmds[f"e2e_{model}"] = [
            py, "bench/model_e2e.py", "--models", model, "--modes", "train",
            "--device", s["device"], "--dtype", s["dtype"], "--size", s["size"],
            "--trials", str(s["trials"]), "--rounds", str(s["rounds"]),
            "--calls", str(s["calls"]), "--peers", s["peers"], "--db", s["db"],
            "--work-dir", str(closed_loop.RUN_DIR / "model_path" / model),
            "-o", str(out / f"model_e2e_{model}.json")]
    plans = [py, "bench/training_plans.py", "--device", s["device"], "--clock", "wall",
             "--models", s["training_models"], "--json", str(out / "training_plans.json")]
    if args.plans_tune_trials:
        plans += ["--tune-trials", str(args.plans_tune_trials),
                  "--work-dir", str(closed_loop.RUN_DIR / "model_path" / "plans")]
    if args.rehearse:
        plans += ["--model-file", str(closed_loop.RUN_DIR / "model_path" / "bench_mlp.py"),
                  "--rounds", "2", "--repeats", "1", "--candidate-budgets", ""]
    else:
        plans += ["--png", str(out / "training_plans.png")]
    cmds["training_plans"] = plans
    return {n: cmds[n] for n in args.step_names}


def main(argv=None) -> int:
    args = parse(argv)
    s = settings(args)
    out = Path(args.out)
    cmds = commands(args, s, out)
    if args.dry_run:
        for name, cmd in cmds.items():
            print(f"{name} (weight {STEPS[name]:g}): {' '.join(cmd)}")
        return 0
    if os.environ.get(STAGED) != "1" and not args.rehearse:
        import stage

        return stage.reexec_staged(__file__, "model path", argv)
    return run(args, s, cmds, out)


def run(args, s: dict, cmds: dict, out: Path) -> int:
    import provenance

    out.mkdir(parents=True, exist_ok=True)
    (closed_loop.RUN_DIR / "model_path").mkdir(parents=True, exist_ok=True)
    stamp = provenance.stamp(seed=0, argv=[__file__, *sys.argv[1:]])
    stamp["staged_commit"] = closed_loop.staged_commit()
    run_ = ModelPathRun(out, stamp, {"settings": s, "budget_s": args.budget_s,
                                     "commands": {n: " ".join(c[1:]) for n, c in cmds.items()}})
    started = time.monotonic()
    if not args.rehearse:
        facts = run_.step("device", device_facts)
        if "error" in facts:
            print("model path: no usable GPU here; run it on the GPU machine, or --rehearse")
            return 3
    else:
        import model_library   # the training plans' tiny model file

        model_library.write_model(closed_loop.RUN_DIR / "model_path", "mlp", *TINY_MLP)
    left = list(cmds)
    for name in cmds:
        spent = time.monotonic() - started
        weight = sum(STEPS[n] for n in left)
        seconds = max(30.0, (args.budget_s - spent) * STEPS[name] / weight)
        run_.step(name, child_step, name, cmds[name], seconds, out)
        left.remove(name)
        if name.startswith("e2e_"):
            run_.step(f"export/{name}", closed_loop.export_records, s["db"], out)
    run_.report["summary"] = summary(run_.report["steps"])
    run_.write()
    for line in run_.report["summary"]:
        print(line)
    return 0


def device_facts() -> dict:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA GPU")
    p = torch.cuda.get_device_properties(0)
    return {"name": p.name, "sm_count": p.multi_processor_count,
            "capability": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 1),
            "torch": torch.__version__, "cuda": torch.version.cuda}


def child_step(name: str, cmd: list[str], seconds: float, out: Path) -> dict:
    """One step's child within `seconds`; its JSON (what it wrote so far) in the row."""
    row = run_bounded(cmd, seconds, out / f"{name}.log")
    path = Path(cmd[cmd.index("-o" if "-o" in cmd else "--json") + 1])
    row["time_share_s"] = round(seconds)
    if path.exists():
        try:
            row["result"] = json.loads(path.read_text())
        except ValueError:
            row["result"] = {"error": "its JSON was cut while being written"}
    return row


def summary(steps: dict) -> list[str]:
    """A line per model: each peer's median step time and its ratio to inductor's."""
    lines = []
    for name, row in steps.items():
        models = (row.get("result") or {}).get("models", {}) if name.startswith("e2e_") else {}
        for model, r in models.items():
            peers = (r.get("train_step") or {}).get("peers", {})
            base = peers.get("inductor", {}).get("median_s")
            parts = [f"{p} {v['median_s'] * 1e3:.3f} ms"
                     + (f" ({v['median_s'] / base:.2f}x inductor)" if base else "")
                     if "median_s" in v else f"{p} -" for p, v in peers.items()]
            lines.append(f"{model} train_step: " + "; ".join(parts))
        if row.get("killed_at_limit"):
            lines.append(f"{name}: stopped at its {row.get('time_share_s')} s share")
    return lines


if __name__ == "__main__":
    sys.exit(main())
