"""Plans compiled with torch.compile, alone or together with AOTAutograd's partitioner.

    run = compile_planned(model, plan)                         # plan's memory, compiled
    run = compile_planned(model, actions, memory_budget=0.6)   # plan + partitioner budget

A plan applied for compilation (apply(..., compile=True)) fixes what the partitioner
cannot choose itself: the memory-efficient forms change *how* an activation is saved
(a GELU's output and a 1-byte mask instead of its input), checkpoint regions and policies
fix what is recomputed. The partitioner's own knapsack
(torch._functorch.config.activation_memory_budget) may then decide, over what is left,
what else to recompute. `hybrid_actions` is the plan that takes every memory-efficient
form that costs (almost) nothing and recomputes nothing, the natural partner of a
partitioner budget.

Which combination is fastest within a budget is a measured question:
measured_choice.fastest_within picks among measured candidates.
"""
from __future__ import annotations

import contextlib

import torch

from .apply_plan import apply, apply_actions
from .joined_regions import joining_selective_regions
from .module_tree import clone_structure


def allow_recompiles(limit: int) -> None:
    """Let dynamo compile each captured function up to `limit` times (its default of 8
    stops a comparison of many compiled variants of one model after the eighth)."""
    import torch

    torch._dynamo.config.recompile_limit = limit


def forget_compiled_variants() -> None:
    """Drop every compiled variant dynamo holds (torch._dynamo.reset). Profiling and
    fitting a plan compile one model's forwards dozens of times with different plans; the
    entries stay with the forwards' code, so a later torch.compile of the same model would
    pass dynamo's recompile_limit (8) and silently run eager. What any other compiled
    function held is compiled again on its next call."""
    torch._dynamo.reset()


def partitioner_backend(memory_budget: float, backend="inductor", join_selective=False):
    """`backend` (a registered name such as "inductor", or a backend callable such as
    autosched.torch.backend(DIR)) with activation_memory_budget set while AOTAutograd
    partitions (1, the default: save what the graph and its checkpoint marks leave);
    join_selective: a checkpoint region after a selective one partitioned as one with it
    (joined_regions.py: its input is rebuilt, not kept).

    A callable of its own on every call: dynamo keeps compiled entries per backend, so two
    models compiled at different budgets never share a graph (with one backend they can:
    dynamo's guards do not see the config)."""
    compiler = torch._dynamo.lookup_backend(backend) if isinstance(backend, str) else backend

    def compile_at_budget(gm, example_inputs):
        joining = joining_selective_regions() if join_selective else contextlib.nullcontext()
        with torch._functorch.config.patch(activation_memory_budget=memory_budget), joining:
            return compiler(gm, example_inputs)
    return compile_at_budget


def compile_planned(model, plan_or_actions, kernels: dict | None = None,
                    memory_budget: float = 1.0, backend="inductor", layers=None,
                    attention_cores=None):
    """torch.compile of `model` under a Plan (or a list of action names) applied for
    compilation, partitioned at `memory_budget` (1: the partitioner saves what the plan
    leaves; lower: it also recomputes within that fraction), a selective or recomputed
    layer after a selective one joined to its region (its input rebuilt, not kept: what
    compiled profiles and plans assume; a plain torch.compile of apply(..., compile=True)
    keeps it). `backend`: as for partitioner_backend (autosched.torch.backend(DIR) runs
    the plan's operators on tuned kernels). Parameters are shared."""
    if isinstance(plan_or_actions, list):
        planned = apply_actions(model, plan_or_actions, layers, attention_cores, kernels,
                                compile=True, backend=backend)
    else:
        planned = apply(model, plan_or_actions, kernels, compile=True, backend=backend)
    return torch.compile(clone_structure(planned) if planned is model else planned,
                         backend=partitioner_backend(memory_budget, backend,
                                                     join_selective=True))


def joins_selective_regions(backend) -> bool:
    """Whether compile_planned on `backend` joins checkpoint regions after selective ones
    (joined_regions.py): backends that run inductor's joint-graph post-passes (inductor,
    and autosched.torch.backend through model.graphs.aot_backend); others keep every
    checkpointed layer's input."""
    if isinstance(backend, str):
        return backend == "inductor"
    from ..torch.backend import AutoschedBackend

    return isinstance(backend, AutoschedBackend)


def hybrid_actions(profile, max_slowdown: float = 0.05) -> list[str]:
    """Per layer, the memory-efficient form that frees the most and recomputes nothing
    ("memeff", then "memeff_ln") among those the profile times at most `max_slowdown`
    over keeping (under a compiled profile an opaque custom op can cost more than the
    fused code it replaces), else "keep"."""
    out = []
    for layer in profile.layers:
        limit = layer.options["keep"].time_s * (1 + max_slowdown)
        forms = [n for n in ("memeff", "memeff_ln")
                 if n in layer.options and layer.options[n].time_s <= limit]
        out.append(forms[0] if forms else "keep")
    return out
