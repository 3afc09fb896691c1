"""Which modules are the "layers" a plan decides about, and what each receives in a step.

The rule: the layers are the children of the model's block container. The block
container is the `nn.ModuleList` or `nn.Sequential` (the model itself included) with at
least two children that holds the most parameters; ties go to the shallower one. In a
transformer that is the list of blocks. Everything outside the layers (embeddings, the
head, the loss) is the "rest": always kept, measured as a whole. A caller may name the
container explicitly (`layers="blocks"`, a dotted attribute path).

Each layer must run exactly once per step (as a list of blocks does); its tensor
arguments and output are captured in a profiling step so each layer can be profiled on
its own with real inputs.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import UserError


@dataclass(frozen=True)
class Layer:
    name: str            # qualified name in the model, e.g. "blocks.3"
    index: int
    module: nn.Module


def _param_count(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def find_container(model: nn.Module, path: str | None = None) -> tuple[str, nn.Module]:
    """(qualified name, module) of the block container, by the rule above or by `path`."""
    if path is not None:
        try:
            mod = model.get_submodule(path)
        except AttributeError:
            raise UserError(f"layers={path!r}: the model has no submodule of that name") from None
        if len(list(mod.children())) < 1:
            raise UserError(f"layers={path!r}: that module has no children to plan")
        return path, mod
    best = None
    for name, mod in model.named_modules():
        if isinstance(mod, (nn.ModuleList, nn.Sequential)) and len(mod) >= 2:
            rank = (_param_count(mod), -name.count(".") - (name != ""))
            if best is None or rank > best[0]:
                best = (rank, name, mod)
    if best is None:
        raise UserError(f"{type(model).__name__} has no nn.ModuleList or nn.Sequential of "
                        "layers; name the module whose children are the layers (--layers ATTR, "
                        "or layers='ATTR' in Python)")
    return best[1], best[2]


def find_layers(model: nn.Module, path: str | None = None) -> list[Layer]:
    prefix, container = find_container(model, path)
    return [Layer(f"{prefix}.{n}" if prefix else n, i, m)
            for i, (n, m) in enumerate(container.named_children())]


def layers_fingerprint(layers: list[Layer]) -> str:
    """A short hash of the layer names and their parameters' shapes and dtypes: a plan
    records it, and applying the plan to a model whose layers differ is refused."""
    desc = [(layer.name, [(n, list(p.shape), str(p.dtype))
                          for n, p in layer.module.named_parameters()]) for layer in layers]
    return hashlib.sha256(json.dumps(desc).encode()).hexdigest()[:16]


@dataclass
class LayerCall:
    """What one layer received and returned in the captured step."""

    args: tuple
    kwargs: dict
    output: object


class CallCapture:
    """Context manager: records every layer's arguments and output during one step."""

    def __init__(self, layers: list[Layer], on_enter=None, on_exit=None):
        self.layers = layers
        self.calls: dict[str, list[LayerCall]] = {layer.name: [] for layer in layers}
        self._handles = []
        self._on_enter, self._on_exit = on_enter, on_exit

    def __enter__(self):
        for layer in self.layers:
            self._handles.append(layer.module.register_forward_pre_hook(
                self._pre(layer.name), with_kwargs=True))
            self._handles.append(layer.module.register_forward_hook(
                self._post(layer.name), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        return False

    def _pre(self, name):
        def hook(module, args, kwargs):
            self.calls[name].append(LayerCall(args, dict(kwargs), None))
            if self._on_enter:
                self._on_enter(name)
        return hook

    def _post(self, name):
        def hook(module, args, kwargs, output):
            self.calls[name][-1].output = output
            if self._on_exit:
                self._on_exit(name)
        return hook

    def single_calls(self) -> dict[str, LayerCall]:
        """Each layer's one call; a layer that ran zero or several times is an error."""
        for name, calls in self.calls.items():
            if len(calls) != 1:
                raise UserError(f"layer {name} ran {len(calls)} times in one step; a plan "
                                "needs every layer to run exactly once (pick another container "
                                "with --layers ATTR, or layers='ATTR' in Python)")
        return {name: calls[0] for name, calls in self.calls.items()}


def tensors_in(obj) -> list[torch.Tensor]:
    """The tensors in a (nested) tuple/list/dict, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in tensors_in(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in tensors_in(x)]
    return []
