"""Training plans against torch.compile's memory-budget partitioner, side by side, one run.

    flock /tmp/autosched-bench.lock python bench/training_plans.py [--models gpt,mlp]
        [--tune-trials 720] [--json bench/results/training_plans_cpu.json] [--png ...]
        [--device cuda --clock wall] [--model-file my_model.py ...]

Per model (GPT: 5 pre-norm blocks, width 192, 6 x 96 tokens; a residual MLP: 4 blocks,
width 192, hidden 768, 512 rows; gpt_gpu, for a GPU: 6 blocks, width 1024, 8 x 512 tokens;
fp32; and any model file of `autosched plan`'s kind given with --model-file), measured in
the same run:

* eager           the model as it is
* compile@b       torch.compile with AOTAutograd's activation_memory_budget = b,
                  b in {1, 0.8, 0.6, 0.4, 0.25, 0.1, 0} (AOTAutograd's knapsack partitioner)
* plan@p          our plan for p of eager's saved-activation bytes, p in {100, 60, 40, 25}%,
                  applied eagerly (autosched.runtime.apply)
* plan+compile@p  a plan compiled (compiled_plans.compile_planned: applied for
                  compilation, a checkpointed layer after a selective one joined to its
                  region), at the default budget; solved again with the limit moved by
                  the compiled graph's measured error (below the budget where it measures
                  over, above where it leaves part unused: fit_by_measurement)
* plan+compile@c  as plan+compile@p, c in {80, 50, 33, 20}% (--candidate-budgets): only
                  candidates of the measured choice below, no ratio of their own
* memeff+partitioner@b  every memory-efficient form (compiled_plans.hybrid_actions) and
                  AOTAutograd's partitioner at budget b over the rest, b in {1 .. 0.1}
* with --tune-trials N: the model's training-step operators tuned first (`autosched
  tune-model --train`, N trials over all tasks, on as many threads as torch gets) and
  exported (`autosched export-model --train`: the kernels that beat torch's baseline);
  then compiled with autosched.torch.backend on that library:
  plan+kernels@p  our plan solved on a profile compiled on the kernels, compiled on them
  kernels+partitioner@b  the kernels and AOTAutograd's partitioner at budget b
* plan@keep, plan+compile@keep/L  every layer kept, as the eager profile timed it,
                  and compiled as the compiled profile of layout L timed it
                  (plan+kernels@keep/L likewise): the anchors their plans are read
                  against for the machine's drift since profiling (below)
* plan*@p, plan+compile*@p  the measured choice (measured_choice.py): at each budget the
                  fastest eager plan that fits it, and the fastest compiled candidate
                  (plan+compile, memeff+partitioner, plan+kernels, kernels+partitioner,
                  or compile@b itself: the choice is never slower than the partitioner)
                  that fits it; chosen on the odd timing rounds, reported on the even
                  ones

Per point: saved-activation bytes (saved-tensor hooks around one forward: they see the
compiled graph's saved tensors too), the median step time over interleaved rounds, the
gradients' largest error relative to eager, on CUDA torch.cuda.max_memory_allocated, and
for plans the predicted step time. Eager plans are solved on the eager profile, compiled
plans on the compiled one (profile_model(compile=True): every layer and action timed
compiled, then again inside the whole compiled model, per group of identical layers). The
table reports, per plan+compile point, its time over torch.compile's fastest point at
equal or lower saved bytes; and the bars: saved bytes within budget, prediction within
10%, no plan slower than the plan for a smaller budget. A prediction is read twice: as it
is, and with the drift since profiling taken out (its time scaled by its anchor's
measured time over the all-kept step its profile predicted: plan@keep for eager plans,
the anchor of its own layout for compiled ones). On the shared 2-core VM the same model's
step moves by half within minutes (ResNet shape, eager: 28.6, 42.3 and 30.6 ms over one
run of 240 rounds), so an absolute prediction carries the machine's state at profiling.
Compiling takes most of the run (about 25 s a point on two cores).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import model_library
import provenance
from runtime_plans import grad_error
from training_plans_points import CANDIDATE_BUDGETS, build_points, measure
from training_plans_report import (anchored_error, consistent_rows, drifts, plot,
                                   report, verdicts)

from autosched.errors import UserError
from autosched.runtime.compiled_plans import allow_recompiles, layouts_worth_trying
from autosched.runtime.model_profile import profile_model
from autosched.runtime.modelfile import load_model_file
from autosched.runtime.prediction import predict
from autosched.runtime.training_step import CLOCKS, parameter_grads, training_step
from autosched.runtime.units import format_bytes, parse_budget

MODELS = {   # examples/<name>.py: make_model(**first), make_inputs(**second)
    "gpt": ({"n_layer": 5, "d_model": 192, "n_head": 4, "seq_len": 96},
            {"batch": 6, "seq_len": 96}),
    "mlp": ({"n_layer": 4, "width": 192, "hidden": 768}, {"batch": 512, "width": 192}),
    # GPU-sized (the device check's): offload's copies now compete with real compute
    "gpt_gpu": ({"n_layer": 6, "d_model": 1024, "n_head": 16, "seq_len": 512},
                {"batch": 8, "seq_len": 512}),
}
EXAMPLES = {"gpt_gpu": "gpt"}   # the example a model name other than its own runs


def run_model(name, path: Path, args, kernels, work: Path) -> list[dict]:
    tuned = tuned_backend(path, work / name, args) if args.tune_trials else None
    spec = load_model_file(str(path))
    model, loss_fn = spec.model.to(args.device), spec.loss_fn
    inputs = tuple(x.to(args.device) for x in spec.inputs)
    backends = ["inductor"] + ([tuned] if tuned is not None else [])
    started = time.monotonic()
    def profiled(backend=None, layout="inductor"):
        return profile_model(model, inputs, loss_fn, allow_offload=args.device != "cpu",
                             repeats=args.repeats, clock=args.clock, kernels=kernels,
                             compile=backend is not None, backend=backend or "inductor",
                             layout=layout)
    # eager, then compiled per backend: one profile per layout worth trying
    profiles = [profiled(), *([profiled(b, layout) for layout in layouts_worth_trying(
        model, inputs, b)] for b in backends)]
    print(f"{name}: profiled eager and compiled ({', '.join(map(str, backends))}, layouts "
          f"{'/'.join(p.layout for p in profiles[1])}) in "
          f"{time.monotonic() - started:.0f} s; eager saves "
          f"{format_bytes(profiles[0].keep_saved_bytes)}", flush=True)
    for profile in [profiles[0], *(p for compiled in profiles[1:] for p in compiled)]:
        print_once_costs(name, profile)
    points = build_points(model, inputs, loss_fn, profiles, kernels, tuned,
                          args.candidate_budgets)
    saved, chosen_on, reported = measure(points, inputs, loss_fn, args.rounds, args.steps,
                                         args.clock)
    times = {k: statistics.median(v) for k, v in reported.items()}
    ref = parameter_grads(model, inputs, loss_fn)
    drift = drifts(profiled_kept(profiles), {k: info for k, (_, info) in points.items()},
                   times)
    for (method, layout), (point, x) in drift.items():
        print(f"{name}: {point} measured {times[point] * 1e3:.1f} ms, profiled (all kept, "
              f"for {method}{f' on layout {layout}' if layout else ''}) "
              f"{times[point] / x * 1e3:.1f} ms (drift x{x:.3f})", flush=True)
    rows = []
    for k, (m, info) in points.items():
        row = {"model": name, "point": k, **info, "saved": saved[k], "time_s": times[k],
               "time_samples_s": reported[k],
               "choice_time_s": statistics.median(chosen_on[k]),
               "grad_rel_err": grad_error(ref, parameter_grads(m, inputs, loss_fn, model))}
        if args.device.startswith("cuda"):
            row["peak_allocated"] = peak_allocated(m, inputs, loss_fn)
        if "budget_bytes" in info:
            row["fits"] = saved[k] <= info["budget_bytes"]
            row["pred_err"] = (row["pred_time_s"] - times[k]) / times[k]
            row.update(anchored_error(row, drift))
        rows.append(row)
    return rows + consistent_rows(rows)


def print_once_costs(name: str, profile) -> None:
    """The costs `profile` found paid once for any layer under an action, if any."""
    if not profile.once_costs:
        return
    kind = (f"compiled ({profile.compiled_with}, layout {profile.layout})"
            if profile.compiled_with else "eager")
    costs = ", ".join(f"{'/'.join(sorted(c.actions))} {c.time_s * 1e3:.1f} ms"
                      f" (±{c.spread_s * 1e3:.1f})" for c in profile.once_costs)
    print(f"{name}: {kind} profile's once costs: {costs}", flush=True)


def profiled_kept(profiles) -> dict:
    """{(plan method, layout): the all-kept step its profile predicted}; profiles:
    eager's, then per backend (inductor, tuned kernels) one per layout."""
    eager, *compiled = profiles

    def kept(profile):
        return predict(profile, ["keep"] * len(profile.layers)).step_time_s
    out = {("plan", None): kept(eager)}
    for method, per_layout in zip(("plan+compile", "plan+kernels"), compiled):
        out.update({(method, p.layout): kept(p) for p in per_layout})
    return out


def tuned_backend(path: Path, work: Path, args):
    """autosched.torch.backend over the model's training-step kernels, tuned now with
    `autosched tune-model --train` (--tune-trials over all tasks) on the threads torch
    gets, and exported (only kernels that beat torch's baseline)."""
    import autosched.torch

    cpu = not args.device.startswith("cuda")
    target = f'{{"kind": "llvm", "num-cores": {args.threads}}}' if cpu else "cuda"
    if (work / "train" / "model_ops.json").is_file():      # an earlier run's, same --work-dir
        print(f"using the library tuned and exported earlier in {work / 'train'}", flush=True)
        return autosched.torch.backend(work / "train")
    library = model_library.tune_and_export(
        path, work, args.tune_trials, f"sqlite:///{work}/tuning.db", train=True,
        target=target, env={"TVM_NUM_THREADS": str(args.threads)})
    return autosched.torch.backend(library)


def peak_allocated(m, inputs, loss_fn) -> int:
    """torch.cuda.max_memory_allocated over one step (parameters and gradients included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    training_step(m, inputs, loss_fn)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


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
    ap.add_argument("--clock", default="cpu", choices=sorted(CLOCKS),
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
    ap.add_argument("--candidate-budgets", default=",".join(CANDIDATE_BUDGETS),
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
    # Every compiled point is its own module tree: one recompile of each forward per point.
    allow_recompiles(64)
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
        rows += run_model(n, path, args, {}, work)
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
