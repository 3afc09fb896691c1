"""Registering workloads as `torch.ops.autosched.<workload>` custom ops.

A torch op can be defined only once per process, but a library may be loaded again (a
rebuilt library, a second library with the same workload). So each op is defined once,
with its schema, and calls through a slot that the latest `load_library` binds to its
kernels. Loading a workload whose tensors differ from the op's schema is refused.

Autograd: the gradient of each forward input is computed by the backward workload that
the op file names in `backward=` metadata, itself an autosched op, so gradients flow
through tuned kernels and torch.compile traces them like any other op.

Each op also has the overload `torch.ops.autosched.<workload>.graph`: the same kernels
with no autograd layer of its own, for the forward and backward graphs that AOTAutograd
has already differentiated (the `torch.compile` backend puts it there). A custom op's
Python autograd layer runs on every call, gradients wanted or not, and inside a model,
right after torch's operators have pushed it out of the caches, it costs tens of
microseconds a call: more than some kernels take. On the CPU the overload's kernel is
C++ (`autosched/graph_call.py`), so a compiled model's call does not enter Python.
"""
from __future__ import annotations

import keyword
from dataclasses import dataclass

import torch

from .dispatch import OpKernels
from .errors import LibraryError, MissingBackwardError
from .manifest import GRAD_PREFIX, GradSpec

NAMESPACE = "autosched"
GRAPH_OVERLOAD = "graph"
_GRAPH_LIBRARY: list = []  # the torch.library.Library of the graph overloads, made once


@dataclass(frozen=True)
class BackwardPlan:
    """What the backward pass of one op needs: the tensors to save from the forward pass
    and, per input, the gradient kernel (None when the library has none)."""

    op: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    grads: tuple[GradSpec | None, ...]
    missing: tuple[str, ...]  # why an input has no gradient, per input ("" when it has)

    @property
    def saved(self) -> tuple[str, ...]:
        names = []
        for g in self.grads:
            for t in (g.inputs if g else ()):
                if not t.startswith(GRAD_PREFIX) and t not in names:
                    names.append(t)
        return tuple(names)

    def gradient(self, index: int, env: dict) -> torch.Tensor:
        spec = self.grads[index]
        if spec is None:
            raise MissingBackwardError(f"autosched.{self.op}: no gradient for input "
                                       f"{self.input_names[index]!r}: {self.missing[index]}")
        op = getattr(getattr(torch.ops, NAMESPACE), spec.workload)
        return op(*[env[t] for t in spec.inputs])


def backward_plan(kernels: OpKernels, grads: tuple[GradSpec, ...],
                  available: set[str]) -> BackwardPlan:
    by_input = {g.input: g for g in grads}
    specs, missing = [], []
    for name in kernels.input_names:
        g = by_input.get(name)
        if g is None:
            specs.append(None)
            missing.append("the op file declares no backward workload for it")
        elif g.workload not in available:
            specs.append(None)
            missing.append(f"it needs workload {g.workload!r}, which the library lacks")
        else:
            specs.append(g)
            missing.append("")
    return BackwardPlan(kernels.workload, kernels.input_names, kernels.output_names,
                        tuple(specs), tuple(missing))


def _arg_name(name: str, i: int) -> str:
    ok = name.isidentifier() and not keyword.iskeyword(name) and name not in ("self", "out")
    return name if ok else f"arg{i}"


def op_schema(input_names, n_outputs: int) -> str:
    """``(Tensor A, Tensor B) -> Tensor`` for the op's tensors."""
    args = ", ".join(f"Tensor {_arg_name(n, i)}" for i, n in enumerate(input_names))
    ret = "Tensor" if n_outputs == 1 else "(" + ", ".join(["Tensor"] * n_outputs) + ")"
    return f"({args}) -> {ret}"


class _Slot:
    """One defined torch op and the kernels it currently runs."""

    def __init__(self, workload: str, schema: str):
        self.workload = workload
        self.schema = schema
        self.kernels: OpKernels | None = None
        self.plan: BackwardPlan | None = None

    def _unwrap(self, outputs):
        return outputs[0] if len(outputs) == 1 else outputs

    def impl(self, *tensors):
        return self._unwrap(self.kernels.run(tensors))

    def fake(self, *tensors):
        return self._unwrap(self.kernels.fake(tensors))

    def setup_context(self, ctx, inputs, output):
        plan = self.plan
        outs = output if isinstance(output, tuple) else (output,)
        named = dict(zip(plan.input_names, inputs))
        named.update(zip(plan.output_names, outs))
        ctx.plan = plan
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in outs]
        ctx.save_for_backward(*[named[n] for n in plan.saved])

    @staticmethod
    def backward(ctx, *grads):
        plan: BackwardPlan = ctx.plan
        env = dict(zip(plan.saved, ctx.saved_tensors))
        for name, g, (shape, dtype, device) in zip(plan.output_names, grads, ctx.out_meta):
            env[GRAD_PREFIX + name] = g if g is not None else \
                torch.zeros(shape, dtype=dtype, device=device)
        return tuple(plan.gradient(i, env) if ctx.needs_input_grad[i] else None
                     for i in range(len(plan.input_names)))


_SLOTS: dict[str, _Slot] = {}


def _define(workload: str, schema: str) -> _Slot:
    slot = _Slot(workload, schema)
    try:
        op = torch.library.custom_op(f"{NAMESPACE}::{workload}", slot.impl, mutates_args=(),
                                     schema=schema)
    except RuntimeError as e:  # defined by other code in this process
        raise LibraryError(f"cannot define torch.ops.{NAMESPACE}.{workload}: {e}") from None
    op.register_fake(slot.fake)
    op.register_autograd(slot.backward, setup_context=slot.setup_context)
    _define_graph_overload(slot)
    return slot


def _define_graph_overload(slot: _Slot) -> None:
    """`<workload>.graph`: the slot's kernels on every device (on the CPU through the
    C++ kernel of `autosched/graph_call.py` where it is built, falling back to the
    default overload), its fake implementation, and no autograd kernel (see the module
    doc)."""
    from ..graph_call import register

    if not _GRAPH_LIBRARY:
        _GRAPH_LIBRARY.append(torch.library.Library(NAMESPACE, "FRAGMENT"))
    library = _GRAPH_LIBRARY[0]
    name = f"{slot.workload}.{GRAPH_OVERLOAD}"
    library.define(name + slot.schema)
    library.impl(name, slot.impl, "CUDA")
    if not register(NAMESPACE, name, slot.workload, f"{NAMESPACE}::{slot.workload}"):
        library.impl(name, slot.impl, "CPU")
    torch.library.register_fake(f"{NAMESPACE}::{name}", slot.fake, lib=library)


def check_bindable(kernels: OpKernels) -> None:
    """Raise if `torch.ops.autosched.<workload>` exists with another signature."""
    schema = op_schema(kernels.input_names, len(kernels.output_names))
    slot = _SLOTS.get(kernels.workload)
    if slot is not None and slot.schema != schema:
        raise LibraryError(f"torch.ops.autosched.{kernels.workload} is already defined in this "
                           f"process as {slot.schema}; this library's kernels take {schema}. "
                           "A torch op cannot be redefined: rename the workload or restart")


def bind(kernels: OpKernels, plan: BackwardPlan):
    """Make `torch.ops.autosched.<workload>` run `kernels`; return the op."""
    check_bindable(kernels)
    slot = _SLOTS.get(kernels.workload)
    if slot is None:
        schema = op_schema(kernels.input_names, len(kernels.output_names))
        slot = _SLOTS[kernels.workload] = _define(kernels.workload, schema)
    slot.kernels, slot.plan = kernels, plan
    _bind_graph_call(kernels)
    return getattr(getattr(torch.ops, NAMESPACE), kernels.workload)


def _bind_graph_call(kernels: OpKernels) -> None:
    """The `.graph` overload's C++ CPU kernel runs `kernels` (graph_call.py); a CUDA
    library's calls all go to the Python path."""
    from ..graph_call import bind

    cpu = kernels.device_type == "cpu"
    bind(kernels.workload, [
        ([(s.shape, s.dtype) for s in v.entry.inputs],
         [(s.shape, s.dtype) for s in v.entry.outputs], v.function)
        for v in kernels.variants.values()] if cpu else [])


def graph_op(workload: str):
    """The `.graph` overload of `torch.ops.autosched.<workload>` (see the module doc)."""
    return getattr(getattr(torch.ops, NAMESPACE), workload).graph  # GRAPH_OVERLOAD


def bound_kernels(workload: str) -> OpKernels | None:
    """The kernels `torch.ops.autosched.<workload>` runs now (None if never loaded)."""
    slot = _SLOTS.get(workload)
    return slot.kernels if slot else None
