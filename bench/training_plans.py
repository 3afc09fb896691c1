"""Training plans against torch.compile's memory-budget partitioner, side by side, one run:
the measured choice of autosched.runtime.choose on the bench's models.

    flock /tmp/autosched-bench.lock python bench/training_plans.py [--models gpt,mlp]
        [--tune-trials 720] [--json bench/results/training_plans_cpu.json] [--png ...]
        [--device cuda --clock wall] [--model-file my_model.py ...]

Per model (GPT: 5 pre-norm blocks, width 192, 6 x 96 tokens; a residual MLP: 4 blocks,
width 192, hidden 768, 512 rows; gpt_gpu, for a GPU: 6 blocks, width 1024, 8 x 512 tokens;
fp32; and any model file of `autosched plan`'s kind given with --model-file), choose()
builds and measures in the same run the candidates autosched/runtime/candidates.py lists
(eager; compile@b for the partitioner budgets; plan@p and plan+compile@p for p in
{100, 60, 40, 25}%, plan+compile also at the candidate budgets; memeff+partitioner@b;
the all-kept anchors), and chooses per budget on the odd timing rounds (plan*@p,
plan+compile*@p) what the even rounds report. With --tune-trials N the model's
training-step operators are tuned first (`autosched tune-model --train`, N trials over
all tasks) and exported; plan+kernels@p and kernels+partitioner@b then run on them.

This script adds the bench's reading: each plan's prediction error, also with the drift
since profiling taken out (its predicted time scaled by its anchor's measured time over
the all-kept step its profile predicted), and the bars per model (training_plans_report:
saved bytes within budget, prediction within 10%, no plan slower than the plan for a
smaller budget, the chosen point's ratio to torch.compile's fastest point at equal or
lower saved bytes).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import model_library
import provenance
from training_plans_report import anchored_error, drifts, plot, report, verdicts

from autosched.model import backend as model_backend
from autosched.model import load_model_file
from autosched.runtime import ChoiceOptions, PlanOptions, UserError, choose, parse_budget

PLAN_BUDGETS = ("100%", "60%", "40%", "25%")
CLOCKS = ("cpu", "thread", "wall")
MODELS = {   # examples/<name>.py: make_model(**first), make_inputs(**second)
    "gpt": ({"n_layer": 5, "d_model": 192, "n_head": 4, "seq_len": 96},
            {"batch": 6, "seq_len": 96}),
    "mlp": ({"n_layer": 4, "width": 192, "hidden": 768}, {"batch": 512, "width": 192}),
    # GPU-sized (the device check's): offload's copies now compete with real compute
    "gpt_gpu": ({"n_layer": 6, "d_model": 1024, "n_head": 16, "seq_len": 512},
                {"batch": 8, "seq_len": 512}),
}
EXAMPLES = {"gpt_gpu": "gpt"}   # the example a model name other than its own runs


def run_model(name, path: Path, args, work: Path) -> list[dict]:
    """The measured choice on one model file, as the bench's rows."""
    spec = load_model_file(str(path))
    model = spec.model.to(args.device)
    inputs = tuple(x.to(args.device) for x in spec.inputs)
    options = ChoiceOptions(
        plan=PlanOptions(allow_offload=args.device != "cpu", repeats=args.repeats,
                         clock=args.clock),
        compile=True, rounds=args.rounds, steps=args.steps,
        kernels_backend=tuned_backend(path, work / name, args) if args.tune_trials else None,
        candidate_budgets=tuple(args.candidate_budgets),
        log=lambda line: print(line, flush=True))
    result = choose(model, inputs, list(PLAN_BUDGETS), spec.loss_fn, options)
    for profile in [result.profiles[0], *result.profiles[1], *result.profiles[2]]:
        print_once_costs(name, profile)
    rows = [{"model": name, **r} for r in result.points]
    drift = drifts(rows)
    for (method, layout), (point, x) in drift.items():
        t = next(r["time_s"] for r in rows if r["point"] == point)
        print(f"{name}: {point} measured {t * 1e3:.1f} ms, profiled (all kept, for {method}"
              f"{f' on layout {layout}' if layout else ''}) {t / x * 1e3:.1f} ms "
              f"(drift x{x:.3f})", flush=True)
    for row in rows:
        if "budget_bytes" in row:
            row.update(anchored_error(row, drift))
    return rows + [{"model": name, **r} for r in result.chosen]


def print_once_costs(name: str, profile) -> None:
    """The costs `profile` found paid once for any layer under an action, if any."""
    if not profile.once_costs:
        return
    kind = (f"compiled ({profile.compiled_with}, layout {profile.layout})"
            if profile.compiled_with else "eager")
    costs = ", ".join(f"{'/'.join(sorted(c.actions))} {c.time_s * 1e3:.1f} ms"
                      f" (±{c.spread_s * 1e3:.1f})" for c in profile.once_costs)
    print(f"{name}: {kind} profile's once costs: {costs}", flush=True)


def tuned_backend(path: Path, work: Path, args):
    """autosched.model.backend over the model's training-step kernels, tuned now with
    `autosched tune-model --train` (--tune-trials over all tasks) on the threads torch
    gets, and exported (only kernels that beat torch's baseline)."""
    cpu = not args.device.startswith("cuda")
    target = f'{{"kind": "llvm", "num-cores": {args.threads}}}' if cpu else "cuda"
    if (work / "train" / "model_ops.json").is_file():      # an earlier run's, same --work-dir
        print(f"using the library tuned and exported earlier in {work / 'train'}", flush=True)
        return model_backend(work / "train")
    library = model_library.tune_and_export(
        path, work, args.tune_trials, f"sqlite:///{work}/tuning.db", train=True,
        target=target, env={"TVM_NUM_THREADS": str(args.threads)})
    return model_backend(library)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt,mlp", help=f"comma-separated, of {sorted(MODELS)}")
    ap.add_argument("--model-file", action="append", default=[], metavar="PATH",
                    help="also run this model file (make_model, make_inputs, optionally "
                         "loss_fn, as for `autosched plan`), named by its file's stem; "
                         "repeatable; --models '' runs only these")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: a shared machine's other load does not stall "
                         "OpenMP barriers)")
    ap.add_argument("--repeats", type=int, default=5, help="profile runs per layer and action")
    ap.add_argument("--rounds", type=int, default=40,
                    help="interleaved timing rounds: choices use the odd ones, the "
                         "report the even ones")
    ap.add_argument("--steps", type=int, default=1,
                    help="steps per point a round (one: a burst of outside load lasting "
                         "a round reaches one sample of each point, not several)")
    ap.add_argument("--clock", default="cpu", choices=CLOCKS,
                    help="cpu: process CPU time, robust on a shared machine (default)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (offload then allowed)")
    ap.add_argument("--tune-trials", type=int, default=0,
                    help="tune each model's training-step operators with autosched "
                         "tune-model (this many trials over all tasks) and add the "
                         "compiled points on the kernels that beat torch (0: none)")
    ap.add_argument("--work-dir", help="model files, tuning databases and kernel "
                                       "libraries (default: a temporary folder); a "
                                       "library exported there by an earlier run is used "
                                       "again")
    ap.add_argument("--candidate-budgets", default=",".join(ChoiceOptions.candidate_budgets),
                    help="compiled plans made only as candidates of the measured choice "
                         "(comma-separated percentages; '' for none)")
    ap.add_argument("--json", help="write the rows and verdicts here")
    ap.add_argument("--png", help="write the Pareto plot here")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    if unknown := [n for n in names if n not in MODELS]:
        print(f"--models: unknown {unknown}; known: {sorted(MODELS)}", file=sys.stderr)
        return 2
    args.candidate_budgets = [b for b in args.candidate_budgets.split(",") if b]
    try:
        for b in args.candidate_budgets:
            parse_budget(b, 1)
    except UserError as e:
        print(f"--candidate-budgets: {e}", file=sys.stderr)
        return 2
    if problem := model_file_problem(names, args.model_file):
        print(f"--model-file: {problem}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: torch sees no GPU here", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and args.clock != "wall":
        print("--device cuda: a CPU clock does not see GPU time; use --clock wall",
              file=sys.stderr)
        return 2
    if args.tune_trials < 0:
        print("--tune-trials must be >= 0", file=sys.stderr)
        return 2
    stamp = provenance.stamp(seed=0, argv=None if argv is None else [__file__, *argv],
                             threads=args.threads)
    print(provenance.header(stamp), flush=True)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))   # the kernels' pool
    with tempfile.TemporaryDirectory(prefix="training_plans-") as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            return run_models(names, args, work, stamp)
        except UserError as e:         # a model file that does not load: one line
            print(f"error: {e}", file=sys.stderr)
            return 2


def model_files(names, files, work: Path) -> dict[str, Path]:
    """{name: model file}: the named models of MODELS written into `work`, then the
    user's files (named by their stem)."""
    paths = {n: model_library.write_model(work, n, *MODELS[n], example=EXAMPLES.get(n))
             for n in names}
    for f in files:
        paths[Path(f).stem] = Path(f).resolve()
    return paths


def model_file_problem(names, files) -> str | None:
    """Why the --model-file arguments cannot run (None: they can)."""
    stems = [Path(f).stem for f in files]
    if missing := [f for f in files if not Path(f).is_file()]:
        return f"no such file {missing[0]}"
    if clash := sorted({s for s in stems if stems.count(s) > 1 or s in names}):
        return f"two models named {clash[0]!r} (a model is named by its file's stem)"
    if not names and not files:
        return "no model to run (--models is empty)"
    return None


def run_models(names, args, work: Path, stamp) -> int:
    rows = []
    for n, path in model_files(names, args.model_file, work).items():
        # results written after each model: a long run keeps its part
        rows += run_model(n, path, args, work)
        report([r for r in rows if r["model"] == n])
        result = verdicts(rows)
        print(f"{n}: {result[n]}", flush=True)
        if args.json:
            provenance.write_json(args.json, {"rows": rows, "verdicts": result}, stamp)
        if args.png:
            plot(rows, args.png, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
