"""Use kernels from an exported autosched library inside a torch model (the examples' hook).

`swap_modules_for_library(model, dir)` loads the library with
`autosched.torch.load_library(dir)` (which registers each kernel as
`torch.ops.autosched.<workload>`, dispatching over shape variants; `library[workload]`
is that op), reads `dir/manifest.json`, and replaces

* nn.Linear(K -> N) by a module calling a `matmul` kernel with N, K matching
  (x @ W^T, the bias added in torch), and
* nn.LayerNorm(N) by a module calling a `layer_norm` kernel with N matching.

The kernel's row count M must match the flattened input at call time; otherwise, and for
anything the library lacks, torch runs. Backward is computed with torch from the saved
inputs, so training works whether or not the op registers its own autograd. Kernels are
called functionally: `op(*inputs) -> output`.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from ..errors import UserError


def load_autosched_library(library_dir):
    """autosched.torch.load_library(library_dir): the default loader of the swap."""
    from autosched.torch import load_library

    return load_library(library_dir)


def _load(library_dir, load_library):
    """(the loaded library, its manifest's kernels); `library[workload]` is the op."""
    try:
        library = load_library(str(library_dir))
    except ImportError as e:
        raise UserError("kernel_library needs autosched.torch.load_library, which this "
                        f"installation cannot import ({e})") from None
    try:
        manifest = json.loads((Path(library_dir) / "manifest.json").read_text())
        return library, list(manifest["kernels"])
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"{library_dir}: unreadable manifest.json ({e})") from None


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2d, weight, op):
        ctx.save_for_backward(x2d, weight)
        return op(x2d, weight.t().contiguous())

    @staticmethod
    def backward(ctx, g):
        x2d, weight = ctx.saved_tensors
        return g @ weight, g.t() @ x2d, None


class AutoschedLinear(nn.Module):
    """nn.Linear whose matmul runs an autosched kernel when the row count matches."""

    def __init__(self, linear: nn.Linear, kernel: dict, op):
        super().__init__()
        self.op = op
        self.weight, self.bias = linear.weight, linear.bias
        self.kernel, self.rows = kernel, int(kernel["args"]["M"])
        self.record_id = kernel.get("record_id")

    def forward(self, x):
        x2d = x.reshape(-1, x.shape[-1])
        if x2d.shape[0] != self.rows:
            return nn.functional.linear(x, self.weight, self.bias)
        y = _LinearFn.apply(x2d, self.weight, self.op)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])


class _LayerNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2d, weight, bias, eps, op):
        ctx.save_for_backward(x2d, weight, bias)
        ctx.eps = eps
        return op(x2d, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x2d, weight, bias = ctx.saved_tensors
        _, mean, rstd = torch.ops.aten.native_layer_norm(x2d, [x2d.shape[-1]], weight, bias,
                                                         ctx.eps)
        gx, gw, gb = torch.ops.aten.native_layer_norm_backward(
            g, x2d, [x2d.shape[-1]], mean, rstd, weight, bias, [True, True, True])
        return gx, gw, gb, None, None


class AutoschedLayerNorm(nn.Module):
    """nn.LayerNorm (affine) running an autosched kernel when the row count matches."""

    def __init__(self, norm: nn.LayerNorm, kernel: dict, op):
        super().__init__()
        self.op = op
        self.weight, self.bias, self.eps = norm.weight, norm.bias, norm.eps
        self.kernel, self.rows = kernel, int(kernel["args"]["M"])
        self.record_id = kernel.get("record_id")

    def forward(self, x):
        x2d = x.reshape(-1, x.shape[-1])
        if x2d.shape[0] != self.rows:
            return nn.functional.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
        return _LayerNormFn.apply(x2d, self.weight, self.bias, self.eps,
                                  self.op).reshape(x.shape)


def _match(module: nn.Module, kernels: list[dict], library):
    for k in kernels:
        args = k.get("args", {})
        if isinstance(module, nn.Linear) and k.get("workload") == "matmul" and \
                args.get("N") == module.out_features and args.get("K") == module.in_features:
            return AutoschedLinear(module, k, library[k["workload"]])
        if isinstance(module, nn.LayerNorm) and module.elementwise_affine and \
                k.get("workload") == "layer_norm" and len(module.normalized_shape) == 1 and \
                args.get("N") == module.normalized_shape[0]:
            return AutoschedLayerNorm(module, k, library[k["workload"]])
    return None


def swap_modules_for_library(model: nn.Module, library_dir,
                             load_library=load_autosched_library) -> dict:
    """Replace matching modules in place; returns {module name: kernel symbol}.

    load_library(path) -> the loaded library, indexable by workload name (what
    autosched.torch.load_library returns); a loader that raises ImportError is a UserError.
    """
    library, kernels = _load(library_dir, load_library)
    swapped = {}
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            repl = _match(child, kernels, library)
            if repl is not None:
                setattr(parent, child_name, repl)
                full = f"{parent_name}.{child_name}" if parent_name else child_name
                swapped[full] = repl.kernel["symbol"]
    return swapped


def record_ids(library_dir) -> dict:
    """{"autosched::<workload>": record ids} from a library's manifest (for plan kernel ids);
    a workload with several shape variants lists each variant's record, comma-separated."""
    try:
        manifest = json.loads((Path(library_dir) / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{library_dir}: unreadable manifest.json ({e})") from None
    ids: dict[str, list[str]] = {}
    for k in manifest.get("kernels", []):
        ids.setdefault(f"autosched::{k['workload']}", []).append(str(k.get("record_id")))
    return {op: ",".join(v) for op, v in ids.items()}
