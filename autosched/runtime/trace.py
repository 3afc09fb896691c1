"""Which ops a layer runs, and in which of its submodules (one traced forward).

Used for three decisions: which layers call autosched custom ops (any op in the
`torch.ops.autosched` namespace, detected by namespace, so kernels registered by a loaded
library are found without importing it); which submodules are an attention core (a
parameter-free submodule that runs a softmax or a fused attention op, like Megatron's
CoreAttention); and whether a layer has compute-heavy ops worth keeping under selective
recomputation.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

AUTOSCHED_NAMESPACE = "autosched"

# Fused attention: the product of activations with activations, in one op.
FUSED_ATTENTION = {
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
}
# Ops whose outputs are expensive to recompute: selective checkpointing keeps them.
COMPUTE_HEAVY = {"mm", "addmm", "bmm", "baddbmm", "matmul", "convolution", "_convolution",
                 *FUSED_ATTENTION}
# Batch norms in training: statistics reduced over the whole batch, then an elementwise
# normalisation of an input that is usually a saved convolution output.
BATCH_NORMS = {
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
    "_batch_norm_with_update", "_batch_norm_with_update_functional",
}
SOFTMAX_LIKE = {"_softmax", "_safe_softmax", "softmax", *FUSED_ATTENTION}


def op_name(func) -> tuple[str, str]:
    """(namespace, name) of an OpOverload, e.g. ("aten", "addmm")."""
    return func.namespace, func._schema.name.split("::")[-1]


@dataclass
class OpTrace:
    ops: list = field(default_factory=list)        # (module path, namespace, name)
    # per compute-heavy op (COMPUTE_HEAVY or autosched's), in call order: (name, output
    # elements, data operand elements), what save_rules decides on
    heavy: list = field(default_factory=list)

    def names(self, prefix: str | None = None) -> set:
        return {n for p, _, n in self.ops if prefix is None or _under(p, prefix)}

    def custom_ops(self) -> list[str]:
        """Distinct autosched custom ops run, as 'autosched::name', in first-call order."""
        seen = []
        for _, ns, name in self.ops:
            full = f"{ns}::{name}"
            if ns == AUTOSCHED_NAMESPACE and full not in seen:
                seen.append(full)
        return seen


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


class _Recorder(TorchDispatchMode):
    def __init__(self, trace: OpTrace, stack: list):
        super().__init__()
        self.trace, self.stack = trace, stack

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns, name = op_name(func)
        self.trace.ops.append((self.stack[-1] if self.stack else "", ns, name))
        out = func(*args, **(kwargs or {}))
        if ns == AUTOSCHED_NAMESPACE or name in COMPUTE_HEAVY:
            self.trace.heavy.append((name, first_tensor(out).numel(),
                                     data_operand(name, args).numel()))
        return out


# ops whose first argument is added to the product, not contracted
_ADDEND_FIRST = {"addmm", "baddbmm"}


def data_operand(name: str, args: tuple):
    """The tensor an op contracts its weights (or second operand) against."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if name in _ADDEND_FIRST and len(tensors) > 1:
        return tensors[1]
    return tensors[0] if tensors else None


def first_tensor(out) -> torch.Tensor:
    """An op's first output tensor (ops return a tensor or a tuple of them)."""
    return out if isinstance(out, torch.Tensor) else next(
        t for t in out if isinstance(t, torch.Tensor))


def trace_ops(module: torch.nn.Module, args: tuple, kwargs: dict) -> OpTrace:
    """Run `module(*args, **kwargs)` once (no grad) and record every op with its submodule."""
    trace, stack, handles = OpTrace(), [], []

    def enter(name):
        def hook(module, args):
            stack.append(name)
        return hook

    def leave(module, args, output):
        stack.pop()

    for name, sub in module.named_modules():
        handles.append(sub.register_forward_pre_hook(enter(name)))
        handles.append(sub.register_forward_hook(leave))
    try:
        with torch.no_grad(), _Recorder(trace, stack):
            module(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return trace


def attention_cores(module: torch.nn.Module, trace: OpTrace) -> list[str]:
    """Outermost parameter-free submodules that run a softmax (or fused attention) op."""
    found = []
    for name, sub in module.named_modules():
        if not name or any(_under(name, f) for f in found):
            continue
        if next(sub.parameters(), None) is None and trace.names(name) & SOFTMAX_LIKE:
            found.append(name)
    return found
