"""The wrapper that runs one layer under one action (actions.py), parameters shared.

Recomputation goes through checkpointing.py, memory-efficient forms through memeff/,
offloading through offload.py (its hooks, and the OffloadSchedule shared by a model's
offloaded layers).

`compile=True` builds the layer for torch.compile: the memory-efficient forms run as custom
ops (memeff/ops.py), the selective policy (under the action's save rule) is the one for
the backend that compiles it (checkpointing.compiled_policy), unreported (the compiler
applies it to the graph; the saved tensors of the compiled graph reach the meters' hooks
themselves),
and an offloaded layer runs outside the compiled graph (torch.compiler.disable): its
saved-tensor hooks and copy streams sit at a region boundary the compiler does not trace.
"""
from __future__ import annotations

import torch
from torch import nn

from .actions import Action
from .checkpointing import (compiled_policy, eager_policy, full_checkpoint,
                            selective_checkpoint)
from .layers import tensors_in
from .memeff import TORCH_GELU, TORCH_LAYER_NORM, FusedAttention, swap_memeff
from .meter import storage_key
from .module_tree import clone_structure, replace_submodule
from .offload import (HostPool, LayerOffload, OffloadSchedule, SideStreams,
                      prefetch_on_backward)


@torch.compiler.disable(recursive=True)
def _outside_graph(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` run eagerly even inside a compiled model (a graph break on
    each side)."""
    return fn(*args, **kwargs)


class _Checkpointed(nn.Module):
    """A submodule recomputed in backward (non-reentrant checkpoint)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return full_checkpoint(self.inner, *args, **kwargs)


def build_body(module: nn.Module, action: Action, attention_cores=(), kernels=None,
               compile: bool = False, fused_attention=None) -> nn.Module:
    """The module a layer runs under `action` (shares all parameters with `module`).
    fused_attention: {core name: causal} of the cores the fused form replaces
    (memeff.fusable_cores), needed by the actions that fuse them."""
    kernels = kernels or {}
    body = module
    if action.memeff:
        body = swap_memeff(body, action.memeff, kernels.get("gelu", TORCH_GELU),
                           kernels.get("layer_norm", TORCH_LAYER_NORM), ops=compile)
    if action.fused_core:
        if not fused_attention:
            raise ValueError(f"{action.name}: the layer has no attention core of the fused "
                             "form's function (fusable_cores found none)")
        body = clone_structure(body) if body is module else body
        for name, causal in fused_attention.items():
            replace_submodule(body, name, FusedAttention(causal))
    if action.recompute == "attention":
        body = clone_structure(body) if body is module else body
        for name in attention_cores:
            replace_submodule(body, name, _Checkpointed(body.get_submodule(name)))
    return body


class PlannedLayer(nn.Module):
    """A layer running under one action. The wrapped module is shared, not copied.

    offload_factory makes the saved-tensor hooks of each offloaded forward (LayerOffload's
    signature); a caller may pass a subclass that observes them. compile: build for
    torch.compile with `backend` (the module docstring). fused_attention: as build_body's.
    """

    def __init__(self, module: nn.Module, action: Action, index: int,
                 schedule: OffloadSchedule | None = None, attention_cores=(), kernels=None,
                 offload_factory=LayerOffload, compile: bool = False, backend="inductor",
                 fused_attention=None):
        super().__init__()
        self.action_name = action.name
        self.index = index
        self.compile = compile
        self._policy = (compiled_policy(backend, action.saves) if compile
                        else eager_policy(action.saves))
        self.body = build_body(module, action, attention_cores, kernels, compile,
                               fused_attention)
        self._action = action
        self._schedule = schedule
        self._pool = schedule.pool if schedule is not None else HostPool()
        self._streams = schedule.side_streams if schedule is not None else SideStreams()
        self._offload_factory = offload_factory

    def forward(self, *args, **kwargs):
        a = self._action
        if a.recompute == "full":
            out = full_checkpoint(self.body, *args, **kwargs)
        elif a.recompute == "selective":
            out = selective_checkpoint(self.body, *args, policy=self._policy,
                                       report=not self.compile, **kwargs)
        elif a.offload and torch.is_grad_enabled():
            out = self._eager(self._offloaded, *args, **kwargs)
        else:
            out = self.body(*args, **kwargs)
        if self._schedule is not None and torch.is_grad_enabled():
            self._eager(self._schedule.forward_end, self.index, out)
        return out

    def _eager(self, fn, *args, **kwargs):
        return _outside_graph(fn, *args, **kwargs) if self.compile else fn(*args, **kwargs)

    def _offloaded(self, *args, **kwargs):
        state = [*self.body.parameters(), *self.body.buffers()]
        excluded = {storage_key(t) for t in state}
        device = next((t.device for t in tensors_in(list(args))), torch.device("cpu"))
        off = self._offload_factory(excluded, self._streams.get(device), self._pool)
        with off.hooks():
            out = self.body(*args, **kwargs)
        off.end_forward(release=self._schedule is None)
        if self._schedule is not None:
            self._schedule.live[self.index] = off
        else:
            out = prefetch_on_backward(out, off)
        return out

    def extra_repr(self):
        return f"action={self.action_name!r}"
