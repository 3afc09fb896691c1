"""Memory- and overlap-aware training plans for PyTorch models.

    plan = autosched.runtime.plan(model, example_inputs, "60%")     # -> Plan
    planned = autosched.runtime.apply(model, plan)                 # -> nn.Module
    Plan.from_json(plan.to_json())

Per layer (the children of the model's block container, see layers.py) a plan chooses to
keep its activations, recompute them (whole layer, attention core only, or per op through
a checkpoint policy), store them in memory-efficient form (GELU / LayerNorm), or offload
them to host memory; a MILP picks the fastest predicted mix whose saved-activation memory
fits the budget. torch is imported only when these names are used.
"""
from ..errors import UserError

__all__ = ["plan", "apply", "Plan", "profile_model", "parse_budget", "memeff_library_kernels",
           "UserError"]


def __getattr__(name):
    if name == "plan":
        from .api import plan
        return plan
    if name == "apply":
        from .planned import apply
        return apply
    if name == "Plan":
        from .plandoc import Plan
        return Plan
    if name == "profile_model":
        from .profile import profile_model
        return profile_model
    if name == "memeff_library_kernels":
        from .memeff_library import memeff_library_kernels
        return memeff_library_kernels
    if name == "parse_budget":
        from .units import parse_budget
        return parse_budget
    raise AttributeError(name)
