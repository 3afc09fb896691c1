"""The candidates the measured choice (choice.py) times for one model.

Each candidate is a runnable model and a description (its "info": method, budget,
actions, the predictions of a plan):

* eager           the model as it is
* compile@b       torch.compile with AOTAutograd's activation_memory_budget = b (the
                  partitioner's own knapsack): what torch.compile alone gives
* plan@p          our plan for budget p, applied eagerly
* plan+compile@p  our plan compiled (compile_planned), its measured saved bytes fitted to
                  the budget (measured_choice.fit_by_measurement); also at the candidate
                  budgets, as candidates only (a plan for a smaller budget that runs
                  faster is the better choice at the larger one too)
* memeff+partitioner@b  every memory-efficient form that costs (almost) nothing
                  (compiled_plans.hybrid_actions) and the partitioner at budget b
* plan+kernels@p, kernels+partitioner@b  the same on a backend of tuned kernels
* plan@keep, plan+compile@keep/L  every layer kept, built as each profile timed it: the
                  anchors a plan's prediction is read against for the machine's drift
                  since profiling (their pred_time_s is the profile's all-kept step)

A candidate that cannot be built is reported through `log` and left out; the others
still are built.
"""
from __future__ import annotations

import time
import traceback

import torch

from ..errors import UserError
from ..model.training_step import training_step
from .actions import ON_DEVICE
from .apply_plan import apply, apply_actions
from .compiled_plans import compile_planned, hybrid_actions, partitioner_backend, plan_layout
from .make_plan import plan as make_plan
from .measured_choice import fit_by_measurement
from .measured_step import measure_step
from .model_profile import restrict
from .module_tree import clone_structure
from .prediction import predict
from .units import parse_budget

ANCHOR = "anchor"   # the method of the all-kept models built as each profile timed them


class Candidates(dict):
    """{name: (module, info)}; says through `log` when each is ready (compiling takes
    most of the time). plans: {name: the Plan} of the candidates that run one."""

    def __init__(self, log):
        super().__init__()
        self.log, self.started, self.plans = log, time.monotonic(), {}

    def __setitem__(self, name, entry):
        super().__setitem__(name, entry)
        self.log(f"  {name} ready at {time.monotonic() - self.started:.0f} s")

    def failed(self, name: str, e: Exception) -> None:
        """Say why a candidate is missing (a plan that does not fit: one line)."""
        self.log(f"{name}: {e}" if isinstance(e, UserError)
                 else f"{name} failed:\n{traceback.format_exc()}")


def build_candidates(model, inputs, loss_fn, budgets, profiles, options) -> Candidates:
    """Every candidate for `budgets` (specs such as "40%"); profiles: (eager profile,
    compiled profiles per layout or [], tuned-kernel profiles per layout or []);
    options: a ChoiceOptions."""
    out = Candidates(options.log)
    eager_prof, compiled_profs, tuned_profs = (
        _on_device(profiles[0]), [_on_device(p) for p in profiles[1]],
        [_on_device(p) for p in profiles[2]])
    kernels, tuned = options.plan.kernels, options.kernels_backend
    ctx = (model, inputs, loss_fn, kernels)
    out["eager"] = (model, {"method": "eager"})
    for b in options.compile_budgets if compiled_profs else ():
        out[f"compile@{b:g}"] = (_compiled(model, b, inputs, loss_fn),
                                 {"method": "compile", "budget": b})
    built, built_on_kernels = {}, {}
    for spec in budgets:
        budget = parse_budget(spec, eager_prof.keep_saved_bytes)
        try:
            p = make_plan(model, inputs, spec, loss_fn, options.plan, profile=eager_prof)
            out[f"plan@{spec}"] = (apply(model, p, kernels),
                                   {"method": "plan", **_info(p, spec, budget)})
            out.plans[f"plan@{spec}"] = p
        except Exception as e:    # one candidate's failure is reported; the others still run
            out.failed(f"plan@{spec}", e)
        if compiled_profs and _compiled_plan(out, ctx, compiled_profs, spec, budget, built,
                                             "inductor", "plan+compile", options) \
                and tuned_profs:
            _compiled_plan(out, ctx, tuned_profs, spec, budget, built_on_kernels, tuned,
                           "plan+kernels", options)
    for spec in options.candidate_budgets if compiled_profs else ():
        _compiled_plan(out, ctx, compiled_profs, spec,
                       parse_budget(spec, eager_prof.keep_saved_bytes), built, "inductor",
                       "plan+compile", options, candidate=True)
    families = [("plan", [eager_prof], None, {}),
                ("plan+compile", compiled_profs, "inductor", built),
                ("plan+kernels", tuned_profs, tuned, built_on_kernels)]
    for method, profs, backend, cache in families:
        for prof in profs:
            _anchor(out, ctx, prof, backend, cache, method)
    if compiled_profs:
        _hybrid(out, ctx, compiled_profs[0], options.hybrid_budgets)
    for b in options.hybrid_budgets if tuned_profs else ():
        out[f"kernels+partitioner@{b:g}"] = (_compiled(model, b, inputs, loss_fn, tuned),
                                             {"method": "kernels+partitioner", "budget": b})
    return out


def _compiled(module, budget: float, inputs, loss_fn, backend="inductor"):
    """torch.compile(module) at partitioner budget `budget`, compiled now (one step); a
    structure clone, so every candidate has its own module objects."""
    c = torch.compile(clone_structure(module), backend=partitioner_backend(budget, backend))
    training_step(c, inputs, loss_fn)
    return c


def _compiled_plan(out, ctx, profiles, spec, budget, built, backend, method, options,
                   **extra) -> bool:
    """Add `method`@spec: our plan applied for compilation and compiled with `backend`,
    its measured saved bytes within `budget`, using what the measurement shows is left of
    it. built: compiled models by layout and actions, shared across budgets (the same
    plan for two budgets is one program, timed once). False where no plan could be made."""
    model, inputs, loss_fn, kernels = ctx
    plan_options = options.plan.replace(compile=True, backend=backend)

    def solve(limit):
        return make_plan(model, inputs, limit, loss_fn, plan_options, profile=profiles)

    def build(p):
        key = (plan_layout(p), *p.actions)
        if key not in built:
            built[key] = run = compile_planned(model, p, kernels, backend=backend)
            training_step(run, inputs, loss_fn)
        return built[key]

    def measure(run):
        return measure_step(run, inputs, loss_fn, repeats=1, warmup=0).saved_bytes
    try:
        fit = fit_by_measurement(solve, build, measure, budget)
    except Exception as e:
        out.failed(f"{method}@{spec}", e)
        return False
    out[f"{method}@{spec}"] = (fit.runnable, {"method": method, "limit_bytes": fit.limit_bytes,
                                              **extra, **_info(fit.plan, spec, budget)})
    out.plans[f"{method}@{spec}"] = fit.plan
    return True


def _anchor(out, ctx, profile, backend, built, method) -> None:
    """Add the all-kept model built as `profile` timed it (applied eagerly where `backend`
    is None, else compiled on it under the profile's layout; shared with a compiled plan
    that keeps everything there)."""
    model, inputs, loss_fn, kernels = ctx
    keep = ["keep"] * len(profile.layers)
    cores = [layer.attention_cores for layer in profile.layers]
    fused = [layer.fused_attention for layer in profile.layers]
    info = {"method": ANCHOR, "anchors": method, "actions": keep,
            "pred_time_s": predict(profile, keep).step_time_s}
    if backend is None:
        out[f"{method}@keep"] = (
            apply_actions(model, keep, profile.containers, cores, kernels,
                          fused_attention=fused), {**info, "layout": None})
        return
    key = (profile.layout, *keep)
    if key not in built:
        built[key] = run = compile_planned(
            model, keep, kernels, backend=backend, layers=profile.containers,
            attention_cores=cores, layout=profile.layout, fused_attention=fused)
        training_step(run, inputs, loss_fn)
    out[f"{method}@keep/{profile.layout}"] = (built[key], {**info, "layout": profile.layout})


def _hybrid(out, ctx, profile, budgets) -> None:
    """Add memeff+partitioner@b: the free memory-efficient forms under the partitioner
    (none where no form is free: the candidate would be compile@b itself)."""
    model, inputs, loss_fn, kernels = ctx
    hybrid = hybrid_actions(profile)
    if set(hybrid) == {"keep"}:
        return
    cores = [layer.attention_cores for layer in profile.layers]
    fused = [layer.fused_attention for layer in profile.layers]
    out.log(f"memory-efficient forms for the partitioner: {hybrid}")
    for b in budgets:
        try:
            run = compile_planned(model, hybrid, kernels, memory_budget=b,
                                  layers=profile.containers, attention_cores=cores,
                                  fused_attention=fused)
            training_step(run, inputs, loss_fn)
        except Exception as e:
            out.failed(f"memeff+partitioner@{b:g}", e)
            continue
        out[f"memeff+partitioner@{b:g}"] = (run, {"method": "memeff+partitioner",
                                                  "budget": b, "actions": hybrid})


def _on_device(profile):
    """The profile without offload on the CPU (host and device memory are one RAM)."""
    return restrict(profile, ON_DEVICE) if profile.device == "cpu" else profile


def _info(p, spec, budget) -> dict:
    info = {"budget": spec, "budget_bytes": budget, "actions": p.actions,
            "pred_time_s": p.predicted["step_time_s"], "pred_saved": p.predicted["saved_bytes"]}
    if p.model.get("layout"):
        info["layout"] = p.model["layout"]
    return info
