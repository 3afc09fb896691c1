"""Training plans against torch.compile's memory-budget partitioner, side by side, one run.

    flock /tmp/autosched-bench.lock python bench/training_plans.py [--models gpt,mlp]
        [--json bench/results/training_plans_cpu.json] [--png ...] [--device cuda --clock wall]

Per model (GPT: 5 pre-norm blocks, width 192, 6 x 96 tokens; a residual MLP: 4 blocks,
width 192, hidden 768, 512 rows; fp32), measured in the same run:

* eager           the model as it is
* compile@b       torch.compile with torch._functorch.config.activation_memory_budget = b,
                  b in {1, 0.8, 0.6, 0.4, 0.25, 0.1, 0} (AOTAutograd's knapsack partitioner)
* plan@p          our plan for p of eager's saved-activation bytes, p in {100, 60, 40, 25}%,
                  applied eagerly (autosched.runtime.apply)
* plan+compile@p  a plan applied for compilation (apply(..., compile=True)), then
                  torch.compile at the default budget; where the compiled graph measures over
                  the budget the plan is solved again below it (fit_by_measurement)
* plan*@p, plan+compile*@p  the Pareto-consistent choice (measured_choice.py): at each
                  budget the measured-fastest of the plans that fit it

Per point: saved-activation bytes (saved-tensor hooks around one forward: they see the
compiled graph's saved tensors too), the median step time over interleaved rounds, the
gradients' largest error relative to eager, on CUDA torch.cuda.max_memory_allocated, and
for plans the predicted step time. Eager plans are solved on the eager profile, compiled
plans on the compiled one (profile_model(compile=True): every layer and action timed
compiled). The table reports, per plan+compile point, its time
over torch.compile's fastest point at equal or lower saved bytes; and the bars: saved bytes
within budget, prediction within 10%, no plan slower than the plan for a smaller budget.
Compiling takes most of the run (about 25 s a point on two cores).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gpt
import mlp
import provenance

from autosched.errors import UserError
from autosched.runtime.apply_plan import apply
from autosched.runtime.make_plan import plan as make_plan
from autosched.runtime.measured_choice import (
    MeasuredPlan,
    fit_by_measurement,
    inversions,
    pareto_consistent,
)
from autosched.runtime.model_profile import profile_model, restrict
from autosched.runtime.module_tree import clone_structure
from autosched.runtime.training_step import measure_step, training_step, zero_grads
from autosched.runtime.units import format_bytes, parse_budget

COMPILE_BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.25, 0.1, 0.0)
PLAN_BUDGETS = ("100%", "60%", "40%", "25%")
DEVICE_ACTIONS = ("keep", "memeff_ln", "memeff", "recompute_attention",
                  "recompute_attention+memeff_ln", "recompute_attention+memeff", "selective",
                  "recompute")
MODELS = {
    "gpt": (lambda: gpt.make_model(5, 192, 4, 96), lambda: gpt.make_inputs(6, 96), gpt.loss_fn),
    "mlp": (lambda: mlp.make_model(4, 192, 768), lambda: mlp.make_inputs(512, 192), mlp.loss_fn),
}


def grads(model, inputs, loss_fn, original):
    zero_grads(original)
    training_step(model, inputs, loss_fn)
    out = {n: p.grad.clone() for n, p in original.named_parameters()}
    zero_grads(original)
    return out


def grad_error(ref, got) -> float:
    return max(float((got[n] - r).abs().max() / r.abs().max().clamp_min(1e-30))
               for n, r in ref.items())


def budget_backend(budget: float):
    """Inductor with AOTAutograd's activation_memory_budget set while it partitions. A
    backend of its own per budget: dynamo keeps one compiled entry per backend, so points
    compiled at different budgets never share a graph."""
    from torch._inductor.compile_fx import compile_fx

    def backend(gm, example_inputs):
        with torch._functorch.config.patch(activation_memory_budget=budget):
            return compile_fx(gm, example_inputs)
    return backend


def compiled(module, budget: float, inputs, loss_fn):
    """torch.compile(module) at `budget`, compiled now (one step); a structure clone, so
    every point has its own module objects."""
    c = torch.compile(clone_structure(module), backend=budget_backend(budget))
    with torch._functorch.config.patch(activation_memory_budget=budget):
        training_step(c, inputs, loss_fn)
    return c


def compiled_plan(model, inputs, loss_fn, profile, budget, kernels):
    """Our plan applied for compilation and compiled, its measured saved bytes within
    `budget` (measured_choice.fit_by_measurement); (plan, compiled model, limit used)."""
    def make(limit):
        p = make_plan(model, inputs, limit, loss_fn, profile=profile, kernels=kernels)
        return p, compiled(apply(model, p, kernels, compile=True), 1.0, inputs, loss_fn)

    def measure(run):
        return measure_step(run, inputs, loss_fn, repeats=1, warmup=0).saved_bytes

    p, run, _, limit = fit_by_measurement(make, measure, budget)
    return p, run, limit


def build_points(model, inputs, loss_fn, profiles, kernels):
    """{name: (module, info)} for every point of one model; profiles: (eager, compiled)."""
    points = {"eager": (model, {"method": "eager"})}
    for b in COMPILE_BUDGETS:
        points[f"compile@{b:g}"] = (compiled(model, b, inputs, loss_fn),
                                    {"method": "compile", "budget": b})
    eager_prof, compiled_prof = (restrict(p, DEVICE_ACTIONS) if p.device == "cpu" else p
                                 for p in profiles)
    for spec in PLAN_BUDGETS:
        budget = parse_budget(spec, eager_prof.keep_saved_bytes)
        try:
            p = make_plan(model, inputs, spec, loss_fn, profile=eager_prof, kernels=kernels)
            points[f"plan@{spec}"] = (apply(model, p, kernels),
                                      {"method": "plan", **_info(p, spec, budget)})
            p, run, limit = compiled_plan(model, inputs, loss_fn, compiled_prof, budget,
                                          kernels)
        except UserError as e:
            print(f"plan@{spec}: {e}")
            continue
        points[f"plan+compile@{spec}"] = (run, {"method": "plan+compile", "limit_bytes": limit,
                                                **_info(p, spec, budget)})
    return points


def _info(p, spec, budget) -> dict:
    return {"budget": spec, "budget_bytes": budget, "actions": p.actions,
            "pred_time_s": p.predicted["step_time_s"], "pred_saved": p.predicted["saved_bytes"]}


def measure(points, inputs, loss_fn, rounds, steps, clock):
    """Saved bytes (one metered step) and median time over interleaved rounds."""
    saved = {k: measure_step(m, inputs, loss_fn, repeats=1, warmup=1, clock=clock).saved_bytes
             for k, (m, _) in points.items()}
    times = {k: [] for k in points}
    for _ in range(rounds):
        for k, (m, _) in points.items():
            times[k] += measure_step(m, inputs, loss_fn, repeats=steps, warmup=0,
                                     clock=clock).times_s
    return saved, {k: statistics.median(v) for k, v in times.items()}


def run_model(name, args, kernels) -> list[dict]:
    make, make_inputs, loss_fn = MODELS[name]
    model = make().to(args.device)
    inputs = tuple(x.to(args.device) for x in make_inputs())
    profiles = [profile_model(model, inputs, loss_fn, allow_offload=args.device != "cpu",
                              repeats=args.repeats, clock=args.clock, kernels=kernels,
                              compile=c) for c in (False, True)]
    print(f"{name}: profiled eager and compiled; eager saves "
          f"{format_bytes(profiles[0].keep_saved_bytes)}", flush=True)
    points = build_points(model, inputs, loss_fn, profiles, kernels)
    saved, times = measure(points, inputs, loss_fn, args.rounds, args.steps, args.clock)
    ref = grads(model, inputs, loss_fn, model)
    rows = []
    for k, (m, info) in points.items():
        row = {"model": name, "point": k, **info, "saved": saved[k], "time_s": times[k],
               "grad_rel_err": grad_error(ref, grads(m, inputs, loss_fn, model))}
        if args.device.startswith("cuda"):
            row["peak_allocated"] = peak_allocated(m, inputs, loss_fn)
        if "budget_bytes" in info:
            row["fits"] = saved[k] <= info["budget_bytes"]
            row["pred_err"] = (row["pred_time_s"] - times[k]) / times[k]
        rows.append(row)
    return rows + consistent_rows(rows)


def peak_allocated(m, inputs, loss_fn) -> int:
    """torch.cuda.max_memory_allocated over one step (parameters and gradients included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    training_step(m, inputs, loss_fn)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def consistent_rows(rows) -> list[dict]:
    """The Pareto-consistent choice per plan family, as extra rows (`plan*`)."""
    out = []
    for method in ("plan", "plan+compile"):
        fam = [r for r in rows if r["method"] == method]
        picks = pareto_consistent([MeasuredPlan(r["budget_bytes"], r["saved"], r["time_s"])
                                   for r in fam])
        for r, i in zip(fam, picks):
            if i is not None:
                out.append({**fam[i], "point": f"{method}*@{r['budget']}", "method": method + "*",
                            "budget": r["budget"], "budget_bytes": r["budget_bytes"],
                            "chosen": fam[i]["point"],
                            "fits": fam[i]["saved"] <= r["budget_bytes"]})
    return out


def verdicts(rows) -> dict:
    """The issue's bars, per model, from the rows."""
    out = {}
    for name in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == name]
        comp = [r for r in mine if r["method"] == "compile"]
        ratios = {}
        for r in (r for r in mine if r["method"] == "plan+compile*"):
            peers = [c["time_s"] for c in comp if c["saved"] <= r["saved"]]
            ratios[r["budget"]] = r["time_s"] / min(peers) if peers else None
        plans = [r for r in mine if r["method"] in ("plan", "plan+compile")]
        raw_inv = {m: inversions([MeasuredPlan(r["budget_bytes"], r["saved"], r["time_s"])
                                  for r in plans if r["method"] == m]) for m in
                   ("plan", "plan+compile")}
        out[name] = {
            "ratio_vs_best_compile_at_equal_or_lower_saved": ratios,
            "ratio_le_0.95_count": sum(1 for v in ratios.values() if v is not None and v <= .95),
            "ratio_all_le_1.02": all(v is not None and v <= 1.02 for v in ratios.values()),
            "all_fit": all(r["fits"] for r in plans),
            "max_abs_pred_err": max(abs(r["pred_err"]) for r in plans),
            "raw_plan_inversions": {m: len(v) for m, v in raw_inv.items()},
            "max_grad_rel_err": max(r["grad_rel_err"] for r in mine),
        }
    return out


def report(rows) -> None:
    head = ("model", "point", "actions", "saved", "fits", "ms", "pred ms", "err", "grad err")
    lines = [head]
    for r in rows:
        acts = " ".join(a[:6] for a in r.get("actions", [])) or "-"
        lines.append((r["model"], r["point"] + (f" (= {r['chosen']})" if "chosen" in r else ""),
                      acts, format_bytes(r["saved"]),
                      {True: "yes", False: "NO"}.get(r.get("fits"), "-"),
                      f"{r['time_s'] * 1e3:.1f}",
                      f"{r['pred_time_s'] * 1e3:.1f}" if "pred_time_s" in r else "-",
                      f"{100 * r['pred_err']:+.1f}%" if "pred_err" in r else "-",
                      f"{r['grad_rel_err']:.1e}"))
    widths = [max(len(str(x[i])) for x in lines) for i in range(len(head))]
    for x in lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(x, widths)))


def plot(rows, path, stamp) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.5), squeeze=False)
    style = {"eager": ("k", "s"), "compile": ("tab:blue", "o"), "plan": ("tab:orange", "^"),
             "plan+compile*": ("tab:red", "D")}
    for ax, name in zip(axes[0], names):
        for method, (color, marker) in style.items():
            pts = sorted((r["saved"] / 2 ** 20, r["time_s"] * 1e3) for r in rows
                         if r["model"] == name and r["method"] == method)
            if pts:
                ax.plot(*zip(*pts), marker=marker, color=color, label=method,
                        linestyle="-" if len(pts) > 1 else "")
        ax.set_title(name)
        ax.set_xlabel("saved activations (MiB)")
        ax.set_ylabel("step time (ms)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    provenance.write_sidecar(path, stamp)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt,mlp", help=f"comma-separated, of {sorted(MODELS)}")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: a shared machine's other load does not stall "
                         "OpenMP barriers)")
    ap.add_argument("--repeats", type=int, default=3, help="profile runs per layer and action")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--clock", default="cpu", choices=("cpu", "wall"),
                    help="cpu: process CPU time, robust on a shared machine (default)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (offload then allowed)")
    ap.add_argument("--json", help="write the rows and verdicts here")
    ap.add_argument("--png", help="write the Pareto plot here")
    args = ap.parse_args(argv)
    names = args.models.split(",")
    if unknown := [n for n in names if n not in MODELS]:
        print(f"--models: unknown {unknown}; known: {sorted(MODELS)}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: torch sees no GPU here", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and args.clock == "cpu":
        print("--device cuda: the CPU clock does not see GPU time; use --clock wall",
              file=sys.stderr)
        return 2
    stamp = provenance.stamp(seed=0, argv=None if argv is None else [__file__, *argv],
                             threads=args.threads)
    print(provenance.header(stamp), flush=True)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    # Every compiled point is its own module tree: one recompile of each forward per point.
    torch._dynamo.config.recompile_limit = 64
    rows = [r for n in names for r in run_model(n, args, {})]
    report(rows)
    result = verdicts(rows)
    for name, v in result.items():
        print(f"{name}: {v}")
    if args.json:
        provenance.write_json(args.json, {"rows": rows, "verdicts": result}, stamp)
    if args.png:
        plot(rows, args.png, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
