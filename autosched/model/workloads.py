"""The workloads of the aten operators autosched tunes inside a model.

Each workload (its tensor expression in `te_ops.py`) computes exactly what one aten
operator (or an operator with its transposed operands folded in) computes, on the shapes
the operator was called with. Its `torch`
twin computes the same thing with torch and serves two purposes: it is the baseline that
`tune-model` times against the kernel, and the reference the tests compare with.

Names start with ``aten_`` so that they do not collide with the workloads of op files when
both are loaded as `torch.ops.autosched.*` in one process. The dtype is a parameter:
float32, float16 and bfloat16 are generated (`dtypes.py`; the half types compute in
float32 inside), and the twins run at the same dtype, so a half kernel is timed against
torch's own half operator and checked against it at `dtypes.TWIN_TOLERANCE`. The
``aten_conv2d_nhwc*`` workloads (`te_conv_nhwc.py`) are the convolutions of channels_last
models, their twins torch's convolution on the same channels_last tensors. The matcher
(`aten_match.py`, `conv_layouts.py`) decides what applies.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from ..workload import WorkloadDef, definition
from .te_conv import conv1d, conv2d, conv2d_grad_bias, conv2d_grad_input, conv2d_grad_weight
from .te_conv_nhwc import (
    conv2d_nhwc,
    conv2d_nhwc_grad_bias,
    conv2d_nhwc_grad_input,
    conv2d_nhwc_grad_weight,
)
from .te_ops import (
    bmm,
    gelu,
    gelu_backward,
    layer_norm,
    layer_norm_grad_beta,
    layer_norm_grad_gamma,
    layer_norm_grad_input,
    linear,
    mm,
    mm_nt,
    mm_tn,
    softmax,
    softmax_backward,
)

# ---------------------------------------------------------------- torch twins

def _torch_epilogue(y, epilogue: str):
    import torch

    if epilogue == "relu":
        return torch.relu(y)
    if epilogue == "gelu":
        return torch.nn.functional.gelu(y)
    return y


def _torch_mm(a, b):
    return a @ b


def _torch_mm_nt(a, b):
    return a @ b.t()


def _torch_mm_tn(a, b):
    return a.t() @ b


def _torch_linear(x, w, b, epilogue="none"):
    import torch

    return _torch_epilogue(torch.addmm(b, x, w.t()), epilogue)


def _torch_softmax(x):
    return x.softmax(dim=-1)


def _torch_softmax_backward(dy, y):
    import torch

    return torch.ops.aten._softmax_backward_data(dy, y, -1, y.dtype)


def _torch_layer_norm(x, gamma, beta, eps=1e-5):
    import torch

    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)


def layer_norm_backward(dy, x, mean, rstd, gamma, mask, beta=None):
    """aten.native_layer_norm_backward over the last axis: the outputs (dx, dgamma, dbeta)
    that `mask` selects, in one call, as a model's backward makes it (the outputs not
    selected are None; dbeta needs the `beta` the forward had)."""
    import torch

    weight = gamma if gamma is not None else torch.ones(x.shape[-1], dtype=x.dtype)
    if mean.dtype != x.dtype and x.device.type == "cpu":
        # float32 statistics of half inputs (what CUDA saves); torch's CPU operator
        # takes them in the inputs' dtype only
        mean, rstd = mean.to(x.dtype), rstd.to(x.dtype)
    return torch.ops.aten.native_layer_norm_backward(
        dy, x, [x.shape[-1]], mean.unsqueeze(-1), rstd.unsqueeze(-1), weight, beta, list(mask))


def _torch_layer_norm_backward(dy, x, mean, rstd, gamma=None, part=0):
    """One output of aten.native_layer_norm_backward, as torch computes it alone (the
    other outputs masked off)."""
    return layer_norm_backward(dy, x, mean, rstd, gamma, [i == part for i in range(3)])[part]


def _torch_gelu(x, approximate="none"):
    import torch

    return torch.nn.functional.gelu(x, approximate=approximate)


def _torch_gelu_backward(dy, x, approximate="none"):
    import torch

    return torch.ops.aten.gelu_backward(dy, x, approximate=approximate)


def _torch_conv2d_grad_input(dy, w, N=1, C=8, H=16, W=16, stride=1, pad=1):
    return conv2d_backward(dy, unread(dy, (N, C, H, W)), w, stride, pad, False,
                           (True, False, False))[0]


def _torch_conv2d_grad_weight(dy, x, R=3, S=3, stride=1, pad=1):
    return conv2d_backward(dy, x, unread(dy, (dy.shape[1], x.shape[1], R, S)), stride, pad,
                           False, (False, True, False))[1]


def unread(like, shape):
    """An uninitialised tensor of `shape` with `like`'s dtype, device and layout
    (channels_last where `like` is): the argument of `conv2d_backward` that the outputs
    its mask selects do not read, there only for its shape and layout, which decide the
    path torch takes (as the model's own call, whose argument is a real tensor)."""
    import torch

    nhwc = like.dim() == 4 and not like.is_contiguous() \
        and like.is_contiguous(memory_format=torch.channels_last)
    return torch.empty(tuple(shape), dtype=like.dtype, device=like.device,
                       memory_format=torch.channels_last if nhwc else torch.contiguous_format)


def conv2d_backward(dy, x, w, stride, pad, bias: bool, mask):
    """aten.convolution_backward of a plain 2-d convolution (NCHW shapes, any strides):
    the outputs (grad_input, grad_weight, grad_bias) that `mask` selects, in one call, as
    a model's backward makes it (an argument no selected output reads may be `unread`)."""
    import torch

    return torch.ops.aten.convolution_backward(
        dy, x, w, [w.shape[0]] if bias else None, [stride] * 2, [pad] * 2, [1, 1], False,
        [0, 0], 1, list(mask))


def _torch_sum_rows(dy):
    return dy.sum(dim=0)


def _torch_conv2d_grad_bias(dy):
    return dy.sum(dim=(0, 2, 3))


def _torch_conv2d(x, w, b=None, stride=1, pad=1, epilogue="none"):
    import torch

    return _torch_epilogue(torch.nn.functional.conv2d(x, w, b, stride, pad), epilogue)


def _torch_conv1d(x, w, b=None, stride=1, pad=1, epilogue="none"):
    import torch

    return _torch_epilogue(torch.nn.functional.conv1d(x, w, b, stride, pad), epilogue)


# channels_last twins: the kernel's tensors are in memory order (NHWC, OHWI); the twin
# calls torch on their NCHW views (channels_last strides, as the model's own call has them)
# and returns the result in memory order again
def _nchw(t):
    return t.permute(0, 3, 1, 2)


def _nhwc(t):
    return t.permute(0, 2, 3, 1)


def _torch_conv2d_nhwc(x, w, b=None, stride=1, pad=1, epilogue="none"):
    return _nhwc(_torch_conv2d(_nchw(x), _nchw(w), b, stride, pad, epilogue))


def _torch_conv2d_nhwc_grad_input(dy, w, N=1, C=8, H=16, W=16, stride=1, pad=1):
    return _nhwc(_torch_conv2d_grad_input(_nchw(dy), _nchw(w), N, C, H, W, stride, pad))


def _torch_conv2d_nhwc_grad_weight(dy, x, R=3, S=3, stride=1, pad=1):
    return _nhwc(_torch_conv2d_grad_weight(_nchw(dy), _nchw(x), R, S, stride, pad))


def _torch_conv2d_nhwc_grad_bias(dy):
    return dy.sum(dim=(0, 1, 2))


@dataclass(frozen=True)
class ModelWorkload:
    """A workload of a model operator and its torch twin. `fixed` binds parameters that
    change what the kernel takes or computes (bias, epilogue, GELU's approximation): each
    binding is a workload of its own, so the kernels of one workload always take the
    same tensors and differ by shape only (what `torch.ops.autosched` dispatches on).
    `torch_params` names the parameters the twin takes as keywords (the rest are
    shapes)."""

    name: str
    te_func: Callable
    torch_func: Callable
    torch_params: tuple[str, ...] = ()
    fixed: dict = field(default_factory=dict)

    def definition(self) -> WorkloadDef:
        return definition(partial(self.te_func, **self.fixed), name=self.name)

    def torch_call(self, tensors, params: dict):
        """Run the torch twin on kernel-ordered tensors with the kernel's parameters."""
        given = dict(params, **self.fixed)
        return self.torch_func(*tensors, **{k: given[k] for k in self.torch_params})


def workload_name(base: str, bias: bool = False, epilogue: str = "none",
                  approximate: str = "none") -> str:
    """``aten_linear_gelu``, ``aten_conv2d_bias_relu``, ``aten_gelu_tanh``, ..."""
    return base + ("_bias" if bias else "") + ("" if epilogue == "none" else f"_{epilogue}") \
        + ("" if approximate == "none" else f"_{approximate}")


EPILOGUES = ("none", "relu", "gelu")


def _table() -> dict:
    items = [
        ModelWorkload("aten_mm", mm, _torch_mm),
        ModelWorkload("aten_mm_nt", mm_nt, _torch_mm_nt),
        ModelWorkload("aten_mm_tn", mm_tn, _torch_mm_tn),
        ModelWorkload("aten_bmm", bmm, lambda a, b: a @ b),
        ModelWorkload("aten_softmax", softmax, _torch_softmax),
        ModelWorkload("aten_softmax_backward", softmax_backward, _torch_softmax_backward),
        ModelWorkload("aten_layer_norm", layer_norm, _torch_layer_norm, ("eps",)),
        ModelWorkload("aten_layer_norm_grad_input", layer_norm_grad_input,
                      partial(_torch_layer_norm_backward, part=0)),
        ModelWorkload("aten_layer_norm_grad_gamma", layer_norm_grad_gamma,
                      partial(_torch_layer_norm_backward, part=1)),
        ModelWorkload("aten_layer_norm_grad_beta", layer_norm_grad_beta, _torch_sum_rows),
        ModelWorkload("aten_conv2d_grad_input", conv2d_grad_input, _torch_conv2d_grad_input,
                      ("N", "C", "H", "W", "stride", "pad")),
        ModelWorkload("aten_conv2d_grad_weight", conv2d_grad_weight,
                      _torch_conv2d_grad_weight, ("R", "S", "stride", "pad")),
        ModelWorkload("aten_conv2d_grad_bias", conv2d_grad_bias, _torch_conv2d_grad_bias),
        ModelWorkload("aten_conv2d_nhwc_grad_input", conv2d_nhwc_grad_input,
                      _torch_conv2d_nhwc_grad_input, ("N", "C", "H", "W", "stride", "pad")),
        ModelWorkload("aten_conv2d_nhwc_grad_weight", conv2d_nhwc_grad_weight,
                      _torch_conv2d_nhwc_grad_weight, ("R", "S", "stride", "pad")),
        ModelWorkload("aten_conv2d_nhwc_grad_bias", conv2d_nhwc_grad_bias,
                      _torch_conv2d_nhwc_grad_bias),
    ]
    for approximate in ("none", "tanh"):
        fixed = {"approximate": approximate}
        items += [ModelWorkload(workload_name("aten_gelu", approximate=approximate), gelu,
                                _torch_gelu, ("approximate",), fixed),
                  ModelWorkload(workload_name("aten_gelu_backward", approximate=approximate),
                                gelu_backward, _torch_gelu_backward, ("approximate",), fixed)]
    for epilogue in EPILOGUES:
        items.append(ModelWorkload(workload_name("aten_linear", epilogue=epilogue), linear,
                                   _torch_linear, ("epilogue",), {"epilogue": epilogue}))
        for bias in (False, True):
            for base, te_func, twin in (("aten_conv2d", conv2d, _torch_conv2d),
                                        ("aten_conv2d_nhwc", conv2d_nhwc, _torch_conv2d_nhwc),
                                        ("aten_conv1d", conv1d, _torch_conv1d)):
                items.append(ModelWorkload(workload_name(base, bias, epilogue), te_func, twin,
                                           ("stride", "pad", "epilogue"),
                                           {"bias": bias, "epilogue": epilogue}))
    return {w.name: w for w in items}


WORKLOADS = _table()
