"""The per-layer actions a plan chooses from, and the wrapper that carries one out.

| action                         | saved for backward                       | extra time            |
|--------------------------------|------------------------------------------|-----------------------|
| keep                           | everything autograd saves                | none                  |
| memeff_ln                      | LayerNorms save output + 1/std           | input rebuilt (cheap) |
| memeff                         | also GELU saves output + 1-byte mask     | derivative lookup     |
| recompute_attention            | attention core keeps only its inputs     | core forward again    |
| recompute_attention+memeff_ln  | both of the above                        | both                  |
| recompute_attention+memeff     | attention core inputs, memeff GELU + LN  | both                  |
| selective                      | outputs of matmul-like ops + layer input | cheap ops again       |
| recompute                      | the layer's inputs only                  | whole forward again   |
| offload                        | nothing on the device (copies on host)   | transfers not hidden  |
| offload+memeff_ln              | host copies of the memeff_ln-reduced set | smaller transfers     |
| offload+memeff                 | host copies of the memeff-reduced set    | smaller transfers     |

`recompute` is non-reentrant `torch.utils.checkpoint`; `selective` is the same with a
`create_selective_checkpoint_contexts` policy (policies.py); `recompute_attention`
checkpoints only the layer's attention-core submodules, as Megatron-LM's selective
recomputation does; `offload` is offload.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .memeff import clone_structure, swap_memeff
from .memeff_kernels import TORCH_GELU, TORCH_LAYER_NORM
from .meter import storage_key
from .offload import HostPool, LayerOffload, make_streams
from .policies import full_checkpoint, selective_checkpoint


@dataclass(frozen=True)
class Action:
    name: str
    memeff: tuple = ()                # module kinds made memory-efficient
    recompute: str | None = None      # None, "full", "selective" or "attention"
    offload: bool = False


LN, ALL = ("layer_norm",), ("gelu", "layer_norm")
ACTIONS = {a.name: a for a in (
    Action("keep"),
    Action("memeff_ln", memeff=LN),
    Action("memeff", memeff=ALL),
    Action("recompute_attention", recompute="attention"),
    Action("recompute_attention+memeff_ln", memeff=LN, recompute="attention"),
    Action("recompute_attention+memeff", memeff=ALL, recompute="attention"),
    Action("selective", recompute="selective"),
    Action("recompute", recompute="full"),
    Action("offload", offload=True),
    Action("offload+memeff_ln", memeff=LN, offload=True),
    Action("offload+memeff", memeff=ALL, offload=True),
)}


class _Checkpointed(nn.Module):
    """A submodule recomputed in backward (non-reentrant checkpoint)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return full_checkpoint(self.inner, *args, **kwargs)


def build_body(module: nn.Module, action: Action, attention_cores=(), kernels=None) -> nn.Module:
    """The module a layer runs under `action` (shares all parameters with `module`)."""
    kernels = kernels or {}
    body = module
    if action.memeff:
        body = swap_memeff(body, action.memeff, kernels.get("gelu", TORCH_GELU),
                           kernels.get("layer_norm", TORCH_LAYER_NORM))
    if action.recompute == "attention":
        body = clone_structure(body) if body is module else body
        for name in attention_cores:
            parent_name, _, child = name.rpartition(".")
            parent = body.get_submodule(parent_name) if parent_name else body
            setattr(parent, child, _Checkpointed(getattr(parent, child)))
    return body


class OffloadSchedule:
    """Coordinates offloaded layers: when device copies are freed and prefetches start.

    Layer i's device-to-host copies have until layer i+1's forward ends (the last layer:
    its own forward end); its host-to-device prefetch starts when layer i+1's backward
    begins (the last layer: its own backward start).
    """

    def __init__(self, n_layers: int):
        self.n_layers = n_layers
        self.live: dict[int, LayerOffload] = {}
        self.pool = HostPool()
        self._streams = None

    def streams(self, device):
        if self._streams is None:
            self._streams = make_streams(device) or ()
        return self._streams or None

    def forward_end(self, index: int, output) -> None:
        prev = self.live.get(index - 1)
        if prev is not None:
            prev.release_device_copies()
        if index == self.n_layers - 1 and index in self.live:
            self.live[index].release_device_copies()
        for t in _tensors(output):
            if t.requires_grad:
                t.register_hook(lambda grad, i=index: self.backward_start(i))
                break

    def backward_start(self, index: int) -> None:
        # Popped: the graph's unpack hooks keep what they need; the schedule lets go.
        for i in (index, index - 1):
            off = self.live.pop(i, None)
            if off is not None:
                off.prefetch()


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in _tensors(x)]
    return []


class PlannedLayer(nn.Module):
    """A layer running under one action. The wrapped module is shared, not copied."""

    def __init__(self, module: nn.Module, action: Action, index: int,
                 schedule: OffloadSchedule | None = None, attention_cores=(), kernels=None):
        super().__init__()
        self.action_name = action.name
        self.index = index
        self.body = build_body(module, action, attention_cores, kernels)
        self._action = action
        self._schedule = schedule
        self._pool = schedule.pool if schedule is not None else HostPool()

    def forward(self, *args, **kwargs):
        a = self._action
        if a.recompute == "full":
            out = full_checkpoint(self.body, *args, **kwargs)
        elif a.recompute == "selective":
            out = selective_checkpoint(self.body, *args, **kwargs)
        elif a.offload and torch.is_grad_enabled():
            out = self._offloaded(*args, **kwargs)
        else:
            out = self.body(*args, **kwargs)
        if self._schedule is not None and torch.is_grad_enabled():
            self._schedule.forward_end(self.index, out)
        return out

    def _offloaded(self, *args, **kwargs):
        state = [*self.body.parameters(), *self.body.buffers()]
        excluded = {storage_key(t) for t in state}
        device = next((t.device for t in _tensors(list(args))), torch.device("cpu"))
        streams = self._schedule.streams(device) if self._schedule is not None else None
        off = LayerOffload(excluded, streams, self._pool)
        with off.hooks():
            out = self.body(*args, **kwargs)
        off.end_forward(release=self._schedule is None)
        if self._schedule is not None:
            self._schedule.live[self.index] = off
        else:
            out = _prefetch_on_backward(out, off)
        return out

    def extra_repr(self):
        return f"action={self.action_name!r}"


def _prefetch_on_backward(out, off: LayerOffload):
    """Without a schedule (a layer on its own): prefetch when its backward starts."""
    for t in _tensors(out):
        if t.requires_grad:
            t.register_hook(lambda grad: off.prefetch())
            break
    return out
