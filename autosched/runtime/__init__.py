"""Memory- and overlap-aware training plans for PyTorch models.

    plan = autosched.runtime.plan(model, example_inputs, "60%")     # -> Plan
    planned = autosched.runtime.apply(model, plan)                 # -> nn.Module
    Plan.from_json(plan.to_json())
    choice = autosched.runtime.choose(model, example_inputs, "40%", compile=True)
    choice.answer("40%")["chosen"]                                # -> "plan+compile@40%"

Per layer (the children of the model's block containers, see layers.py) a plan chooses to
keep its activations, recompute them (whole layer, attention core only, or per op through
a checkpoint policy), store them in memory-efficient form (GELU / LayerNorm), or offload
them to host memory; a MILP picks the fastest predicted mix whose saved-activation memory
fits the budget. choose() then measures our plans (eager and compiled) beside
torch.compile's own partitioner and keeps, per budget, the fastest that fits as measured.
torch is imported only when these names are used.

Where things are (profile -> solve -> apply -> choose):

    options.py          PlanOptions: the knobs of profiling and solving, in one object
    make_plan.py        plan(): profile, solve, write the plan down (the entry point)
    apply_plan.py       apply(): a model running under a plan, parameters shared
                        (compile=True: built for torch.compile, the plan's memory kept)
    compiled_plans.py   compile_planned(): a plan compiled, alone or with the partitioner,
                        under its layout (inductor's own, or every graph contiguous)
    joined_regions.py   compiled: checkpoint regions after a selective one joined to it
    choice.py           choose(): the fastest candidate within each budget, by measurement
                        (candidates.py builds them, measured_points.py times them,
                        choice_report.py writes the result)
    measured_choice.py  choices checked by measurement: fastest within budget, fitted
    document.py         Plan: the versioned JSON document and its table
    model_profile.py    profile_model(): per layer and action, measured time and bytes
                        (eager or compiled; timing.py samples until medians separate;
                        in the whole model: context_costs.py, once_costs.py)
    solver.py           the MILP that picks one action per layer
    prediction.py       the analytic step-time and memory predictor the solver optimises
    actions.py          the table of actions;  planned_layer.py  runs a layer under one
    checkpointing.py    recomputation (whole, selective per op);  offload.py  host offload
    memeff/             memory-efficient GELU / LayerNorm and their fused kernels (and,
                        for torch.compile, as custom ops: memeff/ops.py)
    meter.py            exact accounting of the bytes saved for backward
    measured_step.py    one training step measured: saved bytes and step times
    layers.py  trace.py  module_tree.py  bandwidth.py  units.py    what the above rely on
    library_modules.py  swap nn.Linear / nn.LayerNorm for an exported library's kernels

No submodule is named like a public name (plan, apply, choose): importing one would
shadow the lazily resolved function on this package.
"""
from ..errors import UserError
from ..lazy import lazy_names

__all__ = ["plan", "apply", "apply_actions", "Plan", "PlanOptions", "profile_model",
           "predict", "choose", "ChoiceOptions", "Choice", "choose_among", "measure_points",
           "grad_error", "MeasuredPlan", "separated", "interleaved", "short_actions",
           "parse_budget", "format_bytes", "memeff_library_kernels", "UserError"]


# Each public name is imported on first use, so importing this package needs no torch.
__getattr__ = lazy_names(__name__, {
    "plan": ".make_plan", "apply": ".apply_plan", "apply_actions": ".apply_plan",
    "Plan": ".document", "PlanOptions": ".options", "profile_model": ".model_profile",
    "predict": ".prediction", "choose": ".choice", "ChoiceOptions": ".choice",
    "Choice": ".choice", "choose_among": ".choice", "measure_points": ".measured_points",
    "grad_error": ".measured_points", "MeasuredPlan": ".measured_choice",
    "separated": ".timing", "interleaved": ".timing", "short_actions": ".choice_report",
    "memeff_library_kernels": ".memeff", "parse_budget": ".units",
    "format_bytes": ".units"})
