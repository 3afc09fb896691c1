"""Memory- and overlap-aware training plans for PyTorch models.

    plan = autosched.runtime.plan(model, example_inputs, "60%")     # -> Plan
    planned = autosched.runtime.apply(model, plan)                 # -> nn.Module
    Plan.from_json(plan.to_json())

Per layer (the children of the model's block containers, see layers.py) a plan chooses to
keep its activations, recompute them (whole layer, attention core only, or per op through
a checkpoint policy), store them in memory-efficient form (GELU / LayerNorm), or offload
them to host memory; a MILP picks the fastest predicted mix whose saved-activation memory
fits the budget. torch is imported only when these names are used.

Where things are:

    make_plan.py        plan(): profile, solve, write the plan down (the entry point)
    apply_plan.py       apply(): a model running under a plan, parameters shared
                        (compile=True: built for torch.compile, the plan's memory kept)
    compiled_plans.py   compile_planned(): a plan compiled, alone or with the partitioner,
                        under its layout (inductor's own, or every graph contiguous)
    joined_regions.py   compiled: checkpoint regions after a selective one joined to it
    measured_choice.py  choices checked by measurement: Pareto-consistent, within budget
    document.py         Plan: the versioned JSON document and its table
    model_profile.py    profile_model(): per layer and action, measured time and bytes
                        (eager or compiled; timing.py samples until medians separate;
                        in the whole model: context_costs.py)
    solver.py           the MILP that picks one action per layer
    prediction.py       the analytic step-time and memory predictor the solver optimises
    baselines.py        hand-written strategies (uniform, Megatron) to compare with
    actions.py          the table of actions;  planned_layer.py  runs a layer under one
    checkpointing.py    recomputation (whole, selective per op);  offload.py  host offload
    memeff/             memory-efficient GELU / LayerNorm and their fused kernels (and,
                        for torch.compile, as custom ops: memeff/ops.py)
    meter.py            exact accounting of the bytes saved for backward
    training_step.py    one forward + backward, and its measurement
    layers.py  trace.py  module_tree.py  bandwidth.py  units.py    what the above rely on
    modelfile.py        model files for `autosched plan`
    library_modules.py  swap nn.Linear / nn.LayerNorm for an exported library's kernels

No submodule is named like a public name (plan, apply): importing one would shadow the
lazily resolved function on this package.
"""
from ..errors import UserError
from ..lazy import lazy_names

__all__ = ["plan", "apply", "Plan", "profile_model", "parse_budget", "memeff_library_kernels",
           "UserError"]


# Each public name is imported on first use, so importing this package needs no torch.
__getattr__ = lazy_names(__name__, {"plan": ".make_plan", "apply": ".apply_plan",
                                     "Plan": ".document", "profile_model": ".model_profile",
                                     "memeff_library_kernels": ".memeff",
                                     "parse_budget": ".units"})
