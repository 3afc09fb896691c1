"""The points bench/training_plans.py measures for one model, and their measurement:
torch.compile at partitioner budgets, our plans eager and compiled (filled to their budget
by measurement), memory-efficient forms with the partitioner, and on tuned kernels; then
saved bytes and interleaved step times (training_plans.py's docstring says what each is).
"""
from __future__ import annotations

import time
import traceback

import torch

from autosched.errors import UserError
from autosched.runtime.actions import ON_DEVICE
from autosched.runtime.apply_plan import apply, apply_actions
from autosched.runtime.compiled_plans import (compile_planned, hybrid_actions,
                                              partitioner_backend, plan_layout)
from autosched.runtime.make_plan import plan as make_plan
from autosched.runtime.measured_choice import fit_by_measurement
from autosched.runtime.model_profile import restrict
from autosched.runtime.module_tree import clone_structure
from autosched.runtime.timing import interleaved
from autosched.runtime.training_step import measure_step, training_step
from autosched.runtime.units import parse_budget
from training_plans_report import ANCHOR

COMPILE_BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.25, 0.1, 0.0)
PLAN_BUDGETS = ("100%", "60%", "40%", "25%")
# compiled plans made only as candidates of the measured choice at the budgets above: a
# plan for a smaller budget that runs faster is the better choice there too
CANDIDATE_BUDGETS = ("80%", "50%", "33%", "20%")
HYBRID_BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.25, 0.1)


class _Points(dict):
    """One model's points; says when each is ready (compiling takes most of the run)."""

    def __init__(self):
        super().__init__()
        self.started = time.monotonic()

    def __setitem__(self, name, entry):
        super().__setitem__(name, entry)
        print(f"  {name} ready at {time.monotonic() - self.started:.0f} s", flush=True)


def compiled(module, budget: float, inputs, loss_fn):
    """torch.compile(module) at partitioner budget `budget`, compiled now (one step); a
    structure clone, so every point has its own module objects."""
    c = torch.compile(clone_structure(module), backend=partitioner_backend(budget))
    training_step(c, inputs, loss_fn)
    return c


def compiled_plan(model, inputs, loss_fn, profile, budget, kernels, built: dict,
                  backend="inductor"):
    """Our plan applied for compilation and compiled with `backend`, its measured saved
    bytes within `budget` and using what the measurement shows is left of it
    (measured_choice.fit_by_measurement); (plan, compiled model, limit used). profile:
    one per layout worth trying (make_plan keeps the fastest predicted). built: compiled
    models by layout and actions, shared across budgets (the same plan for two budgets is
    one program, timed once)."""
    def solve(limit):
        return make_plan(model, inputs, limit, loss_fn, profile=profile, kernels=kernels,
                         backend=backend)

    def build(p):
        key = (plan_layout(p), *p.actions)
        if key not in built:
            built[key] = run = compile_planned(model, p, kernels, backend=backend)
            training_step(run, inputs, loss_fn)
        return built[key]

    def measure(run):
        return measure_step(run, inputs, loss_fn, repeats=1, warmup=0).saved_bytes

    fit = fit_by_measurement(solve, build, measure, budget)
    return fit.plan, fit.runnable, fit.limit_bytes


def build_points(model, inputs, loss_fn, profiles, kernels, tuned=None,
                 candidate_budgets=CANDIDATE_BUDGETS):
    """{name: (module, info)} for every point of one model; profiles: (eager, compiled,
    and with `tuned`, an autosched.torch.backend, compiled on its kernels);
    candidate_budgets: compiled plans built only as candidates (info "candidate")."""
    points = _Points()
    points["eager"] = (model, {"method": "eager"})
    for b in COMPILE_BUDGETS:
        points[f"compile@{b:g}"] = (compiled(model, b, inputs, loss_fn),
                                    {"method": "compile", "budget": b})
    eager_prof, compiled_profs, *tuned_profs = (
        _on_device(p) if i == 0 else [_on_device(q) for q in p] for i, p in enumerate(profiles))
    built, built_on_kernels = {}, {}
    for spec in PLAN_BUDGETS:
        budget = parse_budget(spec, eager_prof.keep_saved_bytes)
        try:
            p = make_plan(model, inputs, spec, loss_fn, profile=eager_prof, kernels=kernels)
            points[f"plan@{spec}"] = (apply(model, p, kernels),
                                      {"method": "plan", **_info(p, spec, budget)})
        except Exception as e:    # one point's failure is reported; the others still run
            _failed(f"plan@{spec}", e)
        if not _compiled_point(points, model, inputs, loss_fn, compiled_profs, spec, budget,
                               kernels, built):
            continue
        if tuned is not None:
            p, run, limit = compiled_plan(model, inputs, loss_fn, tuned_profs[0], budget,
                                          kernels, built_on_kernels, tuned)
            points[f"plan+kernels@{spec}"] = (run, {"method": "plan+kernels",
                                                    "limit_bytes": limit,
                                                    **_info(p, spec, budget)})
    for spec in candidate_budgets:
        _compiled_point(points, model, inputs, loss_fn, compiled_profs, spec,
                        parse_budget(spec, eager_prof.keep_saved_bytes), kernels, built,
                        candidate=True)
    families = [("plan", [eager_prof], None, {}),
                ("plan+compile", compiled_profs, "inductor", built)]
    if tuned is not None:
        families.append(("plan+kernels", tuned_profs[0], tuned, built_on_kernels))
    for method, profs, backend, cache in families:
        for prof in profs:
            _anchor_point(points, model, inputs, loss_fn, prof, kernels, backend, cache,
                          method)
    compiled_prof = compiled_profs[0]                 # inductor's own layout
    hybrid = hybrid_actions(compiled_prof)
    cores = [layer.attention_cores for layer in compiled_prof.layers]
    fused = [layer.fused_attention for layer in compiled_prof.layers]
    print(f"memory-efficient forms for the partitioner: {hybrid}", flush=True)
    for b in HYBRID_BUDGETS if set(hybrid) != {"keep"} else ():  # else: = compile@b
        try:
            run = compile_planned(model, hybrid, kernels, memory_budget=b,
                                  layers=compiled_prof.containers, attention_cores=cores,
                                  fused_attention=fused)
            training_step(run, inputs, loss_fn)
        except Exception as e:
            _failed(f"memeff+partitioner@{b:g}", e)
            continue
        points[f"memeff+partitioner@{b:g}"] = (run, {"method": "memeff+partitioner",
                                                     "budget": b, "actions": hybrid})
    for b in HYBRID_BUDGETS if tuned is not None else ():
        run = torch.compile(clone_structure(model), backend=partitioner_backend(b, tuned))
        training_step(run, inputs, loss_fn)
        points[f"kernels+partitioner@{b:g}"] = (run, {"method": "kernels+partitioner",
                                                      "budget": b})
    return points


def _compiled_point(points, model, inputs, loss_fn, profiles, spec, budget, kernels, built,
                    **extra) -> bool:
    """Add point plan+compile@spec (its info with `extra`); False, said why, where no
    plan could be made."""
    try:
        p, run, limit = compiled_plan(model, inputs, loss_fn, profiles, budget, kernels, built)
    except Exception as e:
        _failed(f"plan+compile@{spec}", e)
        return False
    points[f"plan+compile@{spec}"] = (run, {"method": "plan+compile", "limit_bytes": limit,
                                            **extra, **_info(p, spec, budget)})
    return True


def _anchor_point(points, model, inputs, loss_fn, profile, kernels, backend, built,
                  method) -> None:
    """Add the all-kept model built as `profile` timed it (applied eagerly where
    `backend` is None, else compiled on it under the profile's layout; shared with a
    compiled plan that keeps everything there): the point `method`'s plans solved on
    that profile are read against for the machine's drift since profiling."""
    keep = ["keep"] * len(profile.layers)
    cores = [layer.attention_cores for layer in profile.layers]
    fused = [layer.fused_attention for layer in profile.layers]
    if backend is None:
        points[f"{method}@keep"] = (
            apply_actions(model, keep, profile.containers, cores, kernels,
                          fused_attention=fused),
            {"method": ANCHOR, "anchors": method, "layout": None, "actions": keep})
        return
    key = (profile.layout, *keep)
    if key not in built:
        built[key] = run = compile_planned(
            model, keep, kernels, backend=backend, layers=profile.containers,
            attention_cores=cores, layout=profile.layout, fused_attention=fused)
        training_step(run, inputs, loss_fn)
    points[f"{method}@keep/{profile.layout}"] = (
        built[key], {"method": ANCHOR, "anchors": method, "layout": profile.layout,
                     "actions": keep})


def _on_device(profile):
    """The profile without offload on the CPU (host and device memory are one RAM)."""
    return restrict(profile, ON_DEVICE) if profile.device == "cpu" else profile


def _failed(point: str, e: Exception) -> None:
    """Say why a point is missing (a plan that does not fit: one line; else the trace)."""
    if isinstance(e, UserError):
        print(f"{point}: {e}", flush=True)
    else:
        print(f"{point} failed:\n{traceback.format_exc()}", flush=True)


def _info(p, spec, budget) -> dict:
    info = {"budget": spec, "budget_bytes": budget, "actions": p.actions,
            "pred_time_s": p.predicted["step_time_s"], "pred_saved": p.predicted["saved_bytes"]}
    if p.model.get("layout"):
        info["layout"] = p.model["layout"]
    return info


def measure(points, inputs, loss_fn, rounds, steps, clock):
    """Saved bytes (one metered step) and, over interleaved rounds, the step times of the
    odd rounds (what choices are made on) and of the even ones (what is reported), so a
    choice's luck in its own measurement does not flatter the report, and both span the
    run's phases alike (on the shared VM the machine's speed moves by half within
    minutes, and not alike for every program: a ResNet shape's compile@0.25 read 35.9 ms
    over the first half of 40 rounds and 40.9 over the second, a plan beside it 42.5 and
    37.0, so a choice on the first half did not hold on the second): (saved, {point: odd
    rounds' times}, {point: even rounds' times})."""
    saved = {}
    for k, (m, _) in list(points.items()):
        try:
            saved[k] = measure_step(m, inputs, loss_fn, repeats=1, warmup=1,
                                    clock=clock).saved_bytes
        except Exception as e:       # measured no further; the others still are
            _failed(k, e)
            del points[k]
    def timer(m):
        return lambda: measure_step(m, inputs, loss_fn, repeats=steps, warmup=0,
                                    clock=clock).times_s
    first = {}                     # each model object once: points that share one share it
    for k, (m, _) in points.items():
        first.setdefault(id(m), k)
    times = interleaved({k: timer(points[k][0]) for k in first.values()}, rounds)
    times = {k: times[first[id(m)]] for k, (m, _) in points.items()}

    def flat(v):
        return [t for r in v for t in r]
    return saved, {k: flat(v[0::2]) for k, v in times.items()}, \
        {k: flat(v[1::2]) for k, v in times.items()}
