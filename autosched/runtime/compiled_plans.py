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

Which combination is fastest within a budget is a measured question: choice.py builds
the candidates, times them side by side and picks (measured_choice.fastest_within).

Layouts. Inductor decides per graph whether convolutions run channels-last (on a CPU with
oneDNN: wherever the graph has a forward convolution). A kept model's backward graph has
none, so it runs contiguous; recompute a conv block and its backward graph holds that
block's forward convolutions and turns channels-last, converting layouts at the graph's
boundaries, which can cost a recomputed block several times its own recomputation,
while a kept model may run faster under inductor's choice. So LAYOUTS names the two a compiled plan can run under, "inductor" (inductor's
own choice per graph) and "contiguous" (layout optimisation off in every graph, forward
and backward), and plan(compile=True) profiles the model under each that matters
(layouts_worth_trying) and keeps the plan predicted fastest; the plan records its layout.
"""
from __future__ import annotations

import contextlib
from functools import partial

import torch

from .actions import FUSED
from .apply_plan import apply, apply_actions
from .joined_regions import joining_selective_regions
from .module_tree import clone_structure

LAYOUTS = ("inductor", "contiguous")
INDUCTOR_LAYOUT = "inductor"


def forget_compiled_variants() -> None:
    """Drop every compiled variant dynamo holds (torch._dynamo.reset). Profiling and
    fitting a plan compile one model's forwards dozens of times with different plans; the
    entries stay with the forwards' code, so a later torch.compile of the same model would
    pass dynamo's recompile_limit (8) and silently run eager. What any other compiled
    function held is compiled again on its next call."""
    torch._dynamo.reset()


def partitioner_backend(memory_budget: float, backend="inductor", join_selective=False,
                        layout: str = INDUCTOR_LAYOUT):
    """`backend` (a registered name such as "inductor", or a backend callable such as
    autosched.model.backend(DIR)) with activation_memory_budget set while AOTAutograd
    partitions (1, the default: save what the graph and its checkpoint marks leave);
    join_selective: a checkpoint region after a selective one partitioned as one with it
    (joined_regions.py: its input is rebuilt, not kept); layout: one of LAYOUTS
    ("contiguous" only on the inductor backend).

    A callable of its own on every call: dynamo keeps compiled entries per backend, so two
    models compiled at different budgets never share a graph (with one backend they can:
    dynamo's guards do not see the config)."""
    compiler = graph_compiler(backend, layout)

    def compile_at_budget(gm, example_inputs):
        joining = joining_selective_regions() if join_selective else contextlib.nullcontext()
        with torch._functorch.config.patch(activation_memory_budget=memory_budget), joining:
            return compiler(gm, example_inputs)
    return compile_at_budget


def graph_compiler(backend, layout: str = INDUCTOR_LAYOUT):
    """The callable that compiles a captured graph: `backend` looked up, under `layout`.
    The contiguous layout goes to inductor as a config patch of its own compile (inductor
    applies it to the backward graph too, compiled later, on the first backward)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}: one of {', '.join(LAYOUTS)}")
    if layout == INDUCTOR_LAYOUT:
        return torch._dynamo.lookup_backend(backend) if isinstance(backend, str) else backend
    if backend != "inductor":
        raise ValueError(f"the {layout} layout is an inductor setting; backend {backend} "
                         "compiles under its own")
    from torch._inductor.compile_fx import compile_fx

    return partial(compile_fx, config_patches={"layout_optimization": False})


def layouts_worth_trying(model, inputs, backend) -> tuple:
    """LAYOUTS where inductor compiles a model that runs convolutions (the layouts differ
    only there), else inductor's own alone."""
    from .trace import trace_ops

    if backend == "inductor" and "convolution" in trace_ops(model, inputs, {}).names():
        return LAYOUTS
    return (INDUCTOR_LAYOUT,)


def plan_layout(plan) -> str:
    """The layout a Plan was costed under (plans written before layouts: inductor's)."""
    return plan.model.get("layout") or INDUCTOR_LAYOUT


def compile_planned(model, plan_or_actions, kernels: dict | None = None,
                    memory_budget: float = 1.0, backend="inductor", layers=None,
                    attention_cores=None, layout: str | None = None, fused_attention=None):
    """torch.compile of `model` under a Plan (or a list of action names) applied for
    compilation, partitioned at `memory_budget` (1: the partitioner saves what the plan
    leaves; lower: it also recomputes within that fraction), a selective or recomputed
    layer after a selective one joined to its region (its input rebuilt, not kept: what
    compiled profiles and plans assume; a plain torch.compile of apply(..., compile=True)
    keeps it). `backend`: as for partitioner_backend (autosched.model.backend(DIR) runs
    the plan's operators on tuned kernels). layout: one of LAYOUTS (default: the plan's,
    for a list of actions inductor's); layers, attention_cores and fused_attention: as
    apply_actions', for a list of actions. Parameters are shared."""
    if isinstance(plan_or_actions, list):
        planned = apply_actions(model, plan_or_actions, layers, attention_cores, kernels,
                                compile=True, backend=backend, fused_attention=fused_attention)
        layout = layout or INDUCTOR_LAYOUT
    else:
        planned = apply(model, plan_or_actions, kernels, compile=True, backend=backend)
        layout = layout or plan_layout(plan_or_actions)
    return torch.compile(clone_structure(planned) if planned is model else planned,
                         backend=partitioner_backend(memory_budget, backend,
                                                     join_selective=True, layout=layout))


def joins_selective_regions(backend) -> bool:
    """Whether compile_planned on `backend` joins checkpoint regions after selective ones
    (joined_regions.py): backends that run inductor's joint-graph post-passes (inductor,
    and autosched.model.backend through model.graphs.aot_backend); others keep every
    checkpointed layer's input."""
    if isinstance(backend, str):
        return backend == "inductor"
    from ..model.compile_backend import AutoschedBackend

    return isinstance(backend, AutoschedBackend)


def hybrid_actions(profile, max_slowdown: float = 0.05) -> list[str]:
    """Per layer, the memory-efficient form that recomputes nothing and saves the least
    ("memeff", "memeff_ln" or the fused attention core) among those the profile times at
    most `max_slowdown` over keeping (under a compiled profile an opaque custom op can
    cost more than the fused code it replaces), else "keep"."""
    out = []
    for layer in profile.layers:
        limit = layer.options["keep"].time_s * (1 + max_slowdown)
        forms = [n for n in ("memeff", "memeff_ln", FUSED)
                 if n in layer.options and layer.options[n].time_s <= limit]
        out.append(min(forms, key=lambda n: layer.options[n].internal_bytes)
                   if forms else "keep")
    return out
