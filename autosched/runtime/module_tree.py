"""Editing a copy of a module tree: a structure clone that shares the parameters, and
replacing one submodule by its dotted name.

A plan's model is such a clone with some submodules replaced (layers wrapped, GELU /
LayerNorm swapped, attention cores checkpointed); the original model is never modified.
"""
from __future__ import annotations

import copy

from torch import nn

# torch.nn.Module's hook dictionaries, copied so a clone runs the original's hooks and
# hooks added to the clone do not reach the original.
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
               "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs")


def clone_structure(module: nn.Module) -> nn.Module:
    """A copy of the module tree that shares every parameter and buffer with `module`.

    Submodules of the copy can be replaced without touching the original.
    """
    new = copy.copy(module)
    new._parameters = dict(module._parameters)
    new._buffers = dict(module._buffers)
    new._modules = {n: clone_structure(m) if m is not None else None
                    for n, m in module._modules.items()}
    for hooks in _HOOK_DICTS:
        setattr(new, hooks, copy.copy(getattr(module, hooks)))
    return new


def replace_submodule(root: nn.Module, name: str, new: nn.Module) -> None:
    """Put `new` where `root.get_submodule(name)` is ("blocks.3", "attn.core", ...)."""
    parent_name, _, child = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, child, new)       # also right for ModuleList/Sequential ("3")
