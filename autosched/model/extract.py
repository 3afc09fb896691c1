"""A model file -> the operators autosched tunes, with their shapes and counts.

The model is compiled with a backend that only looks (`graphs.aot_backend`) and run once:
for inference in eval mode under no_grad, for `train=True` one training step (forward,
`loss_fn`, backward), so the backward graph is captured too. Matches with equal workload
and parameters are one task; its count (how often the model calls it per step) is the
weight the task scheduler gives it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..errors import UserError
from .graphs import aot_backend, graph_compiler, lays_out, scan


@dataclass
class ModelOp:
    """One kernel the model needs: a workload at one set of parameters, called `count`
    times per step by the aten operators `ops` in the graphs `graphs`. `siblings`: the
    keys of the tasks that compute the other outputs of those aten calls (a layer norm
    backward's input, weight and bias gradients); the backend replaces the outputs of
    one call together or not at all."""

    workload: str
    params: dict
    count: int = 0
    ops: Counter = field(default_factory=Counter)
    graphs: Counter = field(default_factory=Counter)
    siblings: set = field(default_factory=set)

    @property
    def key(self) -> tuple:
        return (self.workload, tuple(sorted(self.params.items())))

    def to_json(self) -> dict:
        return {"workload": self.workload, "params": dict(self.params), "count": self.count,
                "ops": dict(self.ops), "graphs": dict(self.graphs)}


@dataclass
class ModelOps:
    """What extraction found: the kernels in first-seen order, the computing operators
    left to torch (by name, with counts) and the graphs looked at."""

    path: str
    train: bool
    ops: list[ModelOp]
    uncovered: Counter
    graphs: Counter


def _group(scans) -> tuple[list[ModelOp], Counter, Counter]:
    found: dict[tuple, ModelOp] = {}
    uncovered, graphs = Counter(), Counter()
    for s in scans:
        graphs[s.kind] += 1
        uncovered.update(s.uncovered)
        calls: dict[int, list[tuple]] = {}
        for m in s.matches:
            op = found.setdefault(m.key, ModelOp(m.workload, dict(m.params)))
            op.count += 1
            op.ops[m.op] += 1
            op.graphs[s.kind] += 1
            if m.group is not None:
                calls.setdefault(id(m.group), []).append(m.key)
        for keys in calls.values():
            for key in keys:
                found[key].siblings.update(k for k in keys if k != key)
    return list(found.values()), uncovered, graphs


def run_step(model, inputs, loss_fn, train: bool):
    """One inference call (eval, no_grad) or one training step (train, backward)."""
    import torch

    from .training_step import compute_loss

    if train:
        model.train()
        compute_loss(model, inputs, loss_fn).backward()
        return None
    model.eval()
    with torch.no_grad():
        return model(*inputs)


def extract(spec, train: bool = False, compiler: str = "auto") -> ModelOps:
    """The operators of `spec` (a loaded model file) that autosched workloads compute,
    as the backend compiling with `compiler` (its default: "auto") will match them."""
    import torch

    scans = []
    torch._dynamo.reset()  # graphs compiled earlier for this model's code are not reused
    try:
        # matched as the backend will match them: in the layouts its compiler gives
        layouts = lays_out(graph_compiler(compiler))
        compiled = torch.compile(spec.model, backend=aot_backend(
            lambda gm, kind, channels_last: scans.append(scan(gm, kind, channels_last)),
            inductor_layouts=layouts), dynamic=False)
        try:
            run_step(compiled, spec.inputs, spec.loss_fn, train)
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001 (the model's own code fails)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise UserError(f"{spec.path}: the model could not be traced for "
                            f"{'training' if train else 'inference'}: {type(e).__name__}: "
                            f"{first}") from None
    finally:
        torch._dynamo.reset()
    ops, uncovered, graphs = _group(scans)
    if not ops:
        left = ", ".join(f"{n} x{c}" for n, c in uncovered.most_common(6)) or "nothing"
        raise UserError(f"{spec.path}: no operator that autosched tunes (matmul, linear, "
                        f"conv2d, softmax, layer norm, GELU and their gradients) in the "
                        f"model; torch runs: {left}")
    return ModelOps(spec.path, train, ops, uncovered, graphs)


def model_tasks(model_ops):
    """The autosched Task of every operator extraction found, in the same order."""
    from ..workload import make_task
    from .workloads import WORKLOADS

    return [make_task(WORKLOADS[op.workload].definition(), dict(op.params))
            for op in model_ops.ops]
