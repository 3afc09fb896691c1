"""`plan(model, example_inputs, memory_budget)`: profile, solve, and write the plan down.

The entry point of planning: model_profile.py measures, solver.py chooses, prediction.py
predicts, and the result is a document.Plan.
"""
from __future__ import annotations

from .actions import ACTIONS
from .document import LayerPlan, Plan
from .options import PlanOptions, plan_options
from .prediction import compute_times, exposed_transfers, predict
from .units import parse_budget

SOLVER_NAME = "scipy.optimize.milp (HiGHS)"


def plan(model, example_inputs, memory_budget, loss_fn=None, options: PlanOptions | None = None,
         *, profile=None, **knobs) -> Plan:
    """Profile `model` on `example_inputs` and choose an action per layer within the budget.

    memory_budget: bytes, or a string "2GiB" / "512MiB" / "1.5GB" / "60%" (a percentage of
    the activation memory the model saves without checkpointing). options: a PlanOptions
    (options.py); `knobs` are its fields given as keywords (`plan(m, x, "40%",
    compile=True)`). `profile` reuses a ModelProfile (from profile_model) instead of
    measuring again, offering only the actions the options allow; it may also be a list
    of compiled profiles, one per layout, to choose among. kernels: the plan is measured
    with them and must be applied with the same (`apply(model, plan, kernels)`).
    compile: cost the actions as torch.compile runs them (model_profile.py), under each
    layout worth trying (compiled_plans.layouts_worth_trying: both where inductor compiles
    convolutions), keeping the plan predicted fastest (plan.solver["layouts"]: each
    layout's predicted step, None where it cannot fit); the plan is then meant for
    `compile_planned(model, plan)` with the same backend, which compiles it under its
    layout (plan.model["layout"]).
    """
    from ..errors import UserError
    from .compiled_plans import INDUCTOR_LAYOUT, layouts_worth_trying
    from .solver import smallest_feasible_bytes

    options = plan_options(options, knobs)
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) \
        else (example_inputs,)
    if not isinstance(memory_budget, (int, float)):
        parse_budget(memory_budget, 1)          # malformed strings fail before profiling
    if profile is None:
        from .model_profile import profile_model

        if options.allow_offload is None:
            options = options.replace(allow_offload=_on_cuda(model))
        layouts = layouts_worth_trying(model, inputs, options.backend) if options.compile \
            else (INDUCTOR_LAYOUT,)
        profiles = [profile_model(model, inputs, loss_fn, options, layout=layout)
                    for layout in layouts]
    else:
        profiles = [_offered(p, options) for p in (
            profile if isinstance(profile, (list, tuple)) else [profile])]
    backend = options.backend
    for prof in profiles:
        if prof.compiled_with not in (None, str(backend)):
            raise ValueError(f"the profile was costed compiled with {prof.compiled_with}; "
                             "plan with the same backend")
    plans, refusals = [], []
    for prof in profiles:
        try:
            plans.append(_plan_on(prof, model, inputs, loss_fn, memory_budget, options))
        except UserError as e:
            refusals.append((prof, e))
    if not plans:         # the refusal of the layout that gets closest to the budget
        raise min(refusals, key=lambda r: smallest_feasible_bytes(
            r[0], options.time_limit_s))[1]
    best = min(plans, key=lambda p: p.predicted["step_time_s"])
    if len(profiles) > 1:
        best.solver["layouts"] = {prof.layout: None for prof, _ in refusals} | {
            p.model["layout"]: p.predicted["step_time_s"] for p in plans}
    return best


def _offered(profile, options: PlanOptions):
    """`profile` offering only what `options` allow (its actions; no offload where
    allow_offload is False; None: what the profile offers)."""
    from .model_profile import restrict

    allowed = set(options.actions) if options.actions is not None else set(ACTIONS)
    if options.allow_offload is False:
        allowed = {a for a in allowed if not ACTIONS[a].offload}
    offered = {n for layer in profile.layers for n in layer.options}
    return profile if offered <= allowed else restrict(profile, allowed)


def _plan_on(profile, model, inputs, loss_fn, memory_budget, options: PlanOptions) -> Plan:
    """The plan one profile offers within the budget (compiled: fitted by measurement)."""
    from .layers import find_layers, layers_fingerprint
    from .solver import smallest_feasible_bytes, solve

    budget = parse_budget(memory_budget, profile.keep_saved_bytes)
    fingerprint = layers_fingerprint(find_layers(model, profile.containers))

    def solve_for(limit):
        return build_plan(model, profile, solve(profile, limit, options.time_limit_s,
                                                options.mip_gap),
                          budget, str(memory_budget), fingerprint, options.kernel_ids or {})
    if profile.compiled_with is None:
        return solve_for(budget)
    least = smallest_feasible_bytes(profile, options.time_limit_s)
    if least > budget:
        return solve_for(budget)           # raises the solver's infeasible-budget error
    return _fit_compiled(lambda limit: solve_for(max(limit, least)), model, inputs, loss_fn,
                         budget, options.kernels, options.backend)


def _fit_compiled(solve_for, model, inputs, loss_fn, budget: int, kernels, backend) -> Plan:
    """The plan for the highest limit whose compiled model's measured saved bytes fit
    `budget` (measured_choice.fit_by_measurement: the partitioner keeps a little more or
    less than the per-layer profile predicts); it records the limit and the measurement.
    No fitting plan is a UserError."""
    import torch

    from ..errors import UserError
    from .compiled_plans import compile_planned, forget_compiled_variants
    from .measured_choice import fit_by_measurement
    from .measured_step import measure_step
    from .units import format_bytes

    try:
        with torch._dynamo.config.patch(recompile_limit=max(
                64, torch._dynamo.config.recompile_limit)):   # a compile per plan tried
            fit = fit_by_measurement(
                solve_for, lambda p: compile_planned(model, p, kernels, backend=backend),
                lambda run: measure_step(run, inputs, loss_fn, repeats=1).saved_bytes, budget)
    finally:
        forget_compiled_variants()
    if fit.saved_bytes > budget:
        raise UserError(f"memory budget {format_bytes(budget)} cannot be met compiled: the "
                        f"least plan tried saves {format_bytes(fit.saved_bytes)} under "
                        "torch.compile (plan without compile for the eager model)")
    fit.plan.solver.update(limit_bytes=fit.limit_bytes, measured_saved_bytes=fit.saved_bytes)
    return fit.plan


def _on_cuda(model) -> bool:
    p = next(model.parameters(), None)
    return p is not None and p.is_cuda


def build_plan(model, profile, solution, budget: int, spec: str, fp: str, kernel_ids) -> Plan:
    pred = predict(profile, solution.assignment)
    exposed = exposed_transfers(profile, solution.assignment)
    layers = []
    for i, (layer, name) in enumerate(zip(profile.layers, solution.assignment)):
        f, b = compute_times(layer, name)
        c = layer.options[name]
        layers.append(LayerPlan(
            name=layer.name, index=layer.index, action=name,
            kernel=_kernel(name, layer.custom_ops, kernel_ids, profile.memeff_kernels),
            stream=_streams(name, profile.bandwidth.overlap),
            predicted={"time_s": pred.layer_time_s[i], "fwd_s": f, "bwd_s": b,
                       "exposed_transfer_s": exposed[i], "saved_bytes": pred.layer_bytes[i],
                       "internal_bytes": c.internal_bytes, "host_bytes": c.host_bytes},
            choices={n: _choice(profile, layer, n) for n in layer.options},
            custom_ops=list(layer.custom_ops), attention_cores=list(layer.attention_cores),
            fused_attention=dict(layer.fused_attention)))
    return Plan(
        model={"class": type(model).__name__, "fingerprint": fp,
               "containers": profile.containers, "layer_rule": profile.layer_rule,
               "layers": len(layers), "compiled_with": profile.compiled_with,
               "joined_selective": profile.joins_selective,
               "layout": profile.layout if profile.compiled_with else None},
        device=profile.device,
        budget={"bytes": int(budget), "spec": spec},
        reference={"saved_bytes": profile.keep_saved_bytes,
                   "step_time_s": profile.keep_step_time_s},
        bandwidth=profile.bandwidth.to_json(),
        layers=layers,
        predicted={"step_time_s": pred.step_time_s, "compute_s": pred.compute_s,
                   "recompute_s": pred.recompute_s, "once_s": pred.once_s,
                   "once_costs": [{"actions": sorted(c.actions), "time_s": c.time_s,
                                   "time_spread_s": c.spread_s}
                                  for c in pred.once_costs],
                   "exposed_transfer_s": pred.exposed_transfer_s,
                   "saved_bytes": pred.saved_bytes, "host_bytes": pred.host_bytes,
                   "rest_time_s": profile.rest_time_s, "rest_bytes": profile.rest_bytes},
        solver={"name": SOLVER_NAME, "status": solution.status, "message": solution.message,
                "objective_s": solution.objective, "mip_gap": solution.gap,
                "solve_time_s": solution.solve_time_s})


def _choice(profile, layer, name) -> dict:
    """One alternative as the planner saw it, alone: its time and own + shared bytes."""
    c = layer.options[name]
    f, b = compute_times(layer, name)
    return {"time_s": f + b, "time_spread_s": c.spread_s, "internal_bytes": c.internal_bytes,
            "shared_bytes": sum(profile.shared_bytes[s] for s in c.shared),
            "host_bytes": c.host_bytes}


def _kernel(action: str, custom_ops, kernel_ids, memeff_kernels) -> str:
    """Which kernels the layer runs: torch, or autosched ops with their record ids, and
    the memory-efficient forms' kernels where the action uses a non-torch one."""
    parts = [f"{op}={kernel_ids.get(op, 'unknown')}" for op in custom_ops]
    parts += [f"memeff_{kind}={kid}" for kind in ACTIONS[action].memeff
              if (kid := memeff_kernels.get(kind, "torch")) != "torch"]
    return "; ".join(parts) or "torch"


def _streams(action: str, overlap: bool) -> dict:
    if not ACTIONS[action].offload:
        return {"compute": "default"}
    if overlap:
        return {"compute": "default", "offload": "side:offload", "prefetch": "side:prefetch"}
    return {"compute": "default", "offload": "default (no copy engine)",
            "prefetch": "default (no copy engine)"}
