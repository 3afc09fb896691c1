"""The PyTorch reference of a workload, run for shapes the library has no kernel for.

An op file declares it with `@autosched.workload(torch_reference="module:function")`; the
function takes the workload's input tensors in order and returns its output(s). Keyword
parameters named like workload parameters (``eps``) receive the value the library's kernels
were built with, so the reference computes the same function as the kernels.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Callable

from .dispatch import Reference
from .errors import LibraryError
from .manifest import KernelEntry


def _import(spec: str, workload: str) -> Callable:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise LibraryError(f"workload {workload!r}: torch_reference {spec!r} should be "
                           "'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise LibraryError(f"workload {workload!r}: torch_reference {spec!r} cannot be "
                           f"imported ({e}); put its module on sys.path or pass "
                           f"references={{{workload!r}: function}}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise LibraryError(f"workload {workload!r}: {module_name} has no function {attr!r}")
    return fn


def _shared_kwargs(fn: Callable, name: str, entries: list[KernelEntry]) -> dict:
    """Values of the workload parameters that the reference takes by name."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # builtins without a signature take tensors only
        return {}
    n_inputs = len(entries[0].inputs)
    kwargs = {}
    for p in params[n_inputs:]:
        values = {repr(e.args[p]) for e in entries if p in e.args}
        if not values:
            continue
        if len(values) > 1:
            raise LibraryError(f"workload {entries[0].workload!r}: reference {name} takes "
                               f"{p!r}, but the library's kernels use several values "
                               f"({', '.join(sorted(values))}); the fallback cannot know which")
        kwargs[p] = next(e.args[p] for e in entries if p in e.args)
    return kwargs


def resolve_reference(entries: list[KernelEntry], override: Callable | None) -> Reference | None:
    """The reference for a workload: `override` if given, else its declared one (or None)."""
    workload = entries[0].workload
    if override is not None:
        name = getattr(override, "__qualname__", repr(override))
        return Reference(name, override, _shared_kwargs(override, name, entries))
    spec = entries[0].torch_reference
    if spec is None:
        return None
    if not isinstance(spec, str):
        raise LibraryError(f"workload {workload!r}: torch_reference should be a "
                           f"'module:function' string, got {type(spec).__name__}")
    fn = _import(spec, workload)
    return Reference(spec, fn, _shared_kwargs(fn, spec, entries))
