"""`apply(model, plan)`: the model running under a plan, parameters shared, original intact.

The result is a structure copy of the model (module_tree.clone_structure: new module
objects, the same parameter and buffer tensors) whose layers are wrapped in
planned_layer.PlannedLayer. Training the result trains the original's parameters; the
original module tree is not modified.
"""
from __future__ import annotations

from ..errors import UserError
from .actions import ACTIONS
from .layers import find_layers, layers_fingerprint
from .memeff import TORCH_GELU, TORCH_LAYER_NORM
from .module_tree import clone_structure, replace_submodule
from .offload import LayerOffload, OffloadSchedule
from .planned_layer import PlannedLayer


def apply(model, plan, kernels: dict | None = None, compile: bool = False,
          backend="inductor"):
    """Return `model` running under `plan`.

    kernels: memory-efficient kernel implementations by kind ({"gelu": Kernel,
    "layer_norm": Kernel}); the default is the torch reference kernels. compile: build the
    result to be passed to `torch.compile` (recompute as checkpoint regions and policies
    the compiler honours, memory-efficient forms as custom ops, offloaded layers outside
    the graph; see planned_layer.py); the plan's memory then holds in the compiled model.
    backend: the torch.compile backend it will be compiled with (selective layers leave
    batch norms to a partitioner that sees them decomposed, checkpointing.compiled_policy).
    """
    # "container": plans written before a plan could span several containers
    path = plan.model.get("containers", plan.model.get("container"))
    if path is None:
        raise UserError("malformed plan: no model.containers")
    layers = find_layers(model, path)
    if [layer.name for layer in layers] != [layer.name for layer in plan.layers]:
        raise UserError(f"the plan is for layers {[lp.name for lp in plan.layers][:3]}..., "
                        f"this model has {[layer.name for layer in layers][:3]}...")
    if layers_fingerprint(layers) != plan.model.get("fingerprint"):
        raise UserError("the plan was made for a different model (its layers' parameters "
                        "differ); make a new plan for this model")
    for lp in plan.layers:
        if lp.action not in ACTIONS:
            raise UserError(f"layer {lp.name}: unknown action {lp.action!r}")
    kernels = {"gelu": TORCH_GELU, "layer_norm": TORCH_LAYER_NORM, **(kernels or {})}
    return apply_actions(model, plan.actions, path, [lp.attention_cores for lp in plan.layers],
                         kernels, compile=compile, backend=backend,
                         fused_attention=[lp.fused_attention for lp in plan.layers])


def apply_actions(model, actions: list[str], layers: str | None = None, attention_cores=None,
                  kernels: dict | None = None, offload_factory=LayerOffload,
                  compile: bool = False, backend="inductor", fused_attention=None):
    """Like apply, from a bare list of action names (profiling and the all-kept anchors).

    attention_cores: per layer, the submodule names `recompute_attention` checkpoints
    (ModelProfile's layers list them); needed when an action uses them. fused_attention:
    per layer, {core name: causal} of the cores the fused_attention actions replace
    (ModelProfile's layers hold them). offload_factory makes each offloaded forward's
    hooks (see planned_layer.PlannedLayer).
    """
    found = find_layers(model, layers)
    if len(actions) != len(found):
        raise ValueError(f"{len(actions)} actions for {len(found)} layers")
    planned = clone_structure(model)
    any_offload = any(ACTIONS[a].offload for a in actions)
    schedule = OffloadSchedule(len(found)) if any_offload else None
    if attention_cores is None and "recompute_attention" in " ".join(actions):
        raise ValueError("recompute_attention needs the layers' attention_cores")
    cores = attention_cores or [[] for _ in found]
    fused = fused_attention or [{} for _ in found]
    for layer, action, core, fuse in zip(find_layers(planned, layers), actions, cores, fused):
        replace_submodule(planned, layer.name, PlannedLayer(
            layer.module, ACTIONS[action], layer.index, schedule, core, kernels,
            offload_factory, compile, backend, fuse))
    return planned
