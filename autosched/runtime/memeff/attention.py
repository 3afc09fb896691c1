"""The fused form of an attention core: one scaled-dot-product-attention op.

A core written out as softmax(q kᵀ / sqrt(d) [+ causal mask]) v saves, for backward, its
(batch, heads, seq, seq) probabilities besides q, k and v. The same function as
torch.nn.functional.scaled_dot_product_attention (the flash kernel on CPUs and recent
GPUs) saves q, k, v, the output and one log-sum-exp per row, and recomputes the
probabilities block by block inside its own backward: the quadratic tensor is never
stored, and the recompute costs no memory traffic. AOTAutograd's partitioner cannot make
this change (it recomputes ops, it does not replace them), so it is a memory-efficient
form of the plan space, like memeff GELU / LayerNorm.

A core is replaced only where it is that function: `fused_form` runs the core and the
fused op, causal and not, on the inputs the core was called with and on random inputs
of the same shapes, and accepts the variant whose outputs and input gradients equal the
core's. A core with another scale, another mask, a positional bias or dropout does not
match and keeps its own form.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

# largest error relative to the reference's magnitude that counts as equal, per dtype
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 2e-2,
             torch.float16: 4e-3}
RANDOM_DRAWS = 2


class FusedAttention(nn.Module):
    """softmax(q kᵀ / sqrt(d) [+ causal]) v as one scaled_dot_product_attention op."""

    def __init__(self, causal: bool):
        super().__init__()
        self.causal = bool(causal)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)

    def extra_repr(self):
        return f"causal={self.causal}"


def fused_form(core: nn.Module, args: tuple, kwargs: dict | None = None) -> bool | None:
    """Whether `core`, called as core(*args, **kwargs), is the fused op with a causal mask
    (True) or without (False); None where it is neither (or takes other arguments)."""
    if kwargs or not _attention_operands(args):
        return None
    gen = torch.Generator(device=args[0].device).manual_seed(0)
    draws = [tuple(a.detach() for a in args)] + [
        tuple(torch.randn(a.shape, generator=gen, device=a.device, dtype=a.dtype)
              * a.detach().float().std().clamp_min(1e-3).to(a.dtype) for a in args)
        for _ in range(RANDOM_DRAWS)]
    for causal in (True, False):
        fused = FusedAttention(causal)
        if all(_same_function(core, fused, d, gen) for d in draws):
            return causal
    return None


def fusable_cores(module: nn.Module, cores: list[str], args: tuple, kwargs: dict) -> dict:
    """{core name: causal} for the cores of `module` (attention_cores' names) whose every
    call, in one run of module(*args, **kwargs), fused_form accepts alike."""
    calls, handles = {}, []
    for name in cores:
        def capture(_, a, kw, name=name):
            calls.setdefault(name, []).append((a, kw))
        handles.append(module.get_submodule(name).register_forward_pre_hook(
            capture, with_kwargs=True))
    try:
        with torch.no_grad():
            module(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    found = {}
    for name, seen in calls.items():
        forms = {fused_form(module.get_submodule(name), *call) for call in seen}
        if len(forms) == 1 and None not in forms:
            found[name] = forms.pop()
    return found


def _attention_operands(args) -> bool:
    """q, k, v of matching (..., seq, dim) shapes, of one floating dtype and device."""
    if len(args) != 3 or not all(isinstance(a, torch.Tensor) for a in args):
        return False
    q, k, v = args
    return (q.dim() >= 3 and q.dim() == k.dim() == v.dim()
            and q.dtype in TOLERANCE and q.dtype == k.dtype == v.dtype
            and q.device == k.device == v.device
            and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
            and q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2])


def _same_function(core, fused, inputs, gen) -> bool:
    """Outputs and the gradients of q, k and v equal within the dtype's tolerance."""
    runs = []
    for fn in (core, fused):
        leaves = [x.clone().requires_grad_(True) for x in inputs]
        with torch.enable_grad():
            out = fn(*leaves)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return False
        runs.append((out, leaves))
    (ref, ref_leaves), (got, got_leaves) = runs
    if ref.shape != got.shape:
        return False
    upstream = torch.randn(ref.shape, generator=gen, device=ref.device, dtype=ref.dtype)
    ref_grads = torch.autograd.grad(ref, ref_leaves, upstream, allow_unused=True)
    got_grads = torch.autograd.grad(got, got_leaves, upstream, allow_unused=True)
    if any(g is None for g in (*ref_grads, *got_grads)):
        return False
    tol = TOLERANCE[inputs[0].dtype]
    pairs = [(ref.detach(), got.detach()), *zip(ref_grads, got_grads)]
    return all(_close(r, g, tol) for r, g in pairs)


def _close(ref, got, tol) -> bool:
    if ref.shape != got.shape or not torch.isfinite(got).all():
        return False
    scale = ref.abs().max().clamp_min(torch.finfo(ref.dtype).tiny)
    return bool(((ref - got).abs().max() / scale) <= tol)
