"""Which modules are the "layers" a plan decides about, and what each receives in a step.

The rule: the layers are the children of the model's block containers. A block container
is an `nn.ModuleList` or `nn.Sequential` (the model itself included) with at least two
children; the block containers are the outermost ones (none held inside another), whose
children each run exactly once in a step, in the order they run. In a transformer that
is the list of blocks; in a ResNet the four stages' blocks, one after another; in a U-Net
the down and the up path. Everything outside the layers (embeddings, the head, the loss)
is the "rest": always kept, measured as a whole. A caller may name the containers
explicitly (`layers="blocks"`, dotted attribute paths, several comma-separated); then
every one of their children must run exactly once.

Each layer's tensor arguments and output are captured in a profiling step so each layer
can be profiled on its own with real inputs.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import UserError
from .meter import storage_key

AUTOMATIC_RULE = "outermost ModuleList/Sequential containers"


@dataclass(frozen=True)
class Layer:
    name: str            # qualified name in the model, e.g. "blocks.3"
    index: int
    module: nn.Module
    container: str       # qualified name of the container it is a child of


def _is_container(m: nn.Module) -> bool:
    return isinstance(m, (nn.ModuleList, nn.Sequential)) and len(m) >= 2


def _inside(name: str, outer: str) -> bool:
    return outer == "" or name.startswith(outer + ".")


def block_containers(model: nn.Module) -> list[str]:
    """Qualified names of the outermost block containers, in definition order."""
    found: list[str] = []
    for name, mod in model.named_modules():      # pre-order: outer before inner
        if _is_container(mod) and not any(_inside(name, outer) for outer in found):
            found.append(name)
    return found


def _named_containers(model: nn.Module, spec: str | None) -> list[tuple[str, nn.Module]]:
    if spec is None:
        names = block_containers(model)
        if not names:
            raise UserError(f"{type(model).__name__} has no nn.ModuleList or nn.Sequential "
                            "of layers; name the module whose children are the layers "
                            "(--layers ATTR, or layers='ATTR' in Python)")
        return [(n, model.get_submodule(n)) for n in names]
    names = [n.strip() for n in spec.split(",")]
    out = []
    for name in names:
        outer = next((o for o in names if o != name and _inside(name, o)), None)
        if outer is not None or names.count(name) > 1:
            raise UserError(f"layers={spec!r}: {name!r} is named twice or inside "
                            f"{outer!r}; name each container once, none inside another")
        try:
            mod = model.get_submodule(name)
        except AttributeError:
            raise UserError(f"layers={spec!r}: the model has no submodule {name!r}") from None
        if len(list(mod.children())) < 1:
            raise UserError(f"layers={spec!r}: {name!r} has no children to plan")
        out.append((name, mod))
    return out


def find_layers(model: nn.Module, spec: str | None = None) -> list[Layer]:
    """The children of the containers `spec` names (comma-separated dotted paths, in that
    order), or of the outermost block containers; a module reachable as two layers is an
    error."""
    layers: list[Layer] = []
    for prefix, container in _named_containers(model, spec):
        for n, m in container.named_children():
            layers.append(Layer(f"{prefix}.{n}" if prefix else n, len(layers), m, prefix))
    seen: dict[int, str] = {}
    for layer in layers:
        if id(layer.module) in seen:
            raise UserError(f"{layer.name} and {seen[id(layer.module)]} are the same module; "
                            "a plan needs every layer to run exactly once (name the "
                            "containers with --layers ATTR, or layers='ATTR' in Python)")
        seen[id(layer.module)] = layer.name
    return layers


def containers_spec(layers: list[Layer]) -> str:
    """The containers of `layers`, comma-separated in their order: find_layers' `spec` for
    the same layers."""
    return ",".join(dict.fromkeys(layer.container for layer in layers))


def run_once_in_order(layers: list[Layer], capture: "CallCapture") -> list[Layer]:
    """The automatic rule's layers after a captured step: those of the containers whose
    every child ran exactly once, containers in the order their first layer ran,
    renumbered. No such container is a UserError (the capture's)."""
    counts = {name: len(calls) for name, calls in capture.calls.items()}
    by_container: dict[str, list[Layer]] = {}
    for layer in layers:
        by_container.setdefault(layer.container, []).append(layer)
    kept = [c for c, members in by_container.items()
            if all(counts[m.name] == 1 for m in members)]
    if not kept:
        capture.single_calls()               # raises for the first layer that did not
    first_run = {name: i for i, name in reversed(list(enumerate(capture.order)))}
    kept.sort(key=lambda c: min(first_run[m.name] for m in by_container[c]))
    ordered = [m for c in kept for m in by_container[c]]
    return [Layer(m.name, i, m.module, m.container) for i, m in enumerate(ordered)]


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
        self.order: list[str] = []          # layer names in the order they were called
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
            self.order.append(name)
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


def fed_by_previous(layers: list[Layer], calls: dict, outside) -> list[bool]:
    """Per layer, whether every tensor it receives, other than `outside` (parameters,
    buffers, the model's inputs), shares its storage with an output of the layer before:
    the layers are directly composed (a U-Net's up path, which receives a concatenation
    made outside the layers, is not)."""
    outside_keys = {storage_key(t) for t in outside}
    out, before = [], None
    for layer in layers:
        call = calls[layer.name]
        received = {storage_key(t) for t in tensors_in((call.args, call.kwargs))}
        out.append(before is not None and received - outside_keys <= before)
        before = {storage_key(t) for t in tensors_in(call.output)}
    return out


def signature(module, call) -> str:
    """Layers with equal signatures (structure, parameter and input shapes) time alike."""
    parts = [(n, type(m).__qualname__, [(k, tuple(p.shape), str(p.dtype))
                                        for k, p in m.named_parameters(recurse=False)])
             for n, m in module.named_modules()]
    parts.append([(tuple(t.shape), str(t.dtype), t.requires_grad)
                  for t in tensors_in((call.args, call.kwargs))])
    parts.append(sorted(call.kwargs))
    return repr(parts)


def identical_groups(layers: list[Layer], calls: dict) -> dict:
    """Layers with the same signature, in model order: {signature: [layer, ...]}."""
    groups = {}
    for layer in layers:
        groups.setdefault(signature(layer.module, calls[layer.name]), []).append(layer)
    return groups


def tensors_in(obj) -> list[torch.Tensor]:
    """The tensors in a (nested) tuple/list/dict, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in tensors_in(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in tensors_in(x)]
    return []
