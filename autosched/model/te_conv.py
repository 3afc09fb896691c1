"""The tensor expressions of convolutions and their gradients, in each memory layout.

aten.convolution (groups 1, dilation 1, square stride and padding) and its input, weight
and bias gradients are built here once each, for a `ConvLayout`: the memory order of
the three kinds of tensors a convolution touches, one letter an axis. The input and its
gradient are N (batch), C (channels) and the spatial axes; the weight and its gradient
K (output channels), C and the window axes; the output and its gradient N, K and the
output's spatial axes. Every index is placed by its letter, so a kernel reads and writes
each tensor in the order it is stored, and the channel and window reductions run in the
input's memory order (c, r, s for NCHW; r, s, c for NHWC, whose channels are innermost).

Three layouts are used: `NCHW` (weights KCRS) and `NCL` for ordinary models, `NHWC`
(weights KRSC, torch's OHWI) for channels_last ones (`te_conv_nhwc.py`). The 2-d
workload functions of a layout come from `conv2d_workloads`, with the same parameters in
each, so one aten call gives the same numbers in either layout and only the workload
name differs.
"""
from __future__ import annotations

from dataclasses import dataclass

from .dtypes import accumulate_dtype
from .te_ops import acc_name, activation, cast_out, down, up


@dataclass(frozen=True)
class ConvLayout:
    """Axis letters in memory order of the input (`data`), weight and output tensors;
    the i-th letter other than N, C, K of each names the same image axis."""

    data: str
    weight: str
    out: str


NCHW = ConvLayout("NCHW", "KCRS", "NKPQ")
NHWC = ConvLayout("NHWC", "KRSC", "NPQK")
NCL = ConvLayout("NCL", "KCR", "NKQ")


@dataclass(frozen=True)
class ConvShape:
    """The sizes of one convolution: batch N, input channels C, the input's spatial
    extents, output channels K, the window's extents, stride and zero padding."""

    N: int
    C: int
    spatial: tuple
    K: int
    window: tuple
    stride: int
    pad: int

    @property
    def out_spatial(self) -> tuple:
        return tuple(conv_out(e, r, self.stride, self.pad)
                     for e, r in zip(self.spatial, self.window))


def conv_out(H, R, stride, pad):
    """The output extent of an input axis of `H` with a window of `R`."""
    return (H + 2 * pad - R) // stride + 1


def _te():
    from tvm import te

    return te


def _others(letters: str, named: str) -> list:
    """The letters of `letters` not in `named`, in order: the spatial or window axes."""
    return [a for a in letters if a not in named]


def _place(letters: str, named: dict, others) -> tuple:
    """One value per letter of `letters`: `named[a]` where given, else the next of
    `others` (the spatial or window axes, in order)."""
    rest = iter(others)
    return tuple(named[a] if a in named else next(rest) for a in letters)


def _split(letters: str, index: tuple, first: str, second: str) -> tuple:
    """(the index at `first`, the index at `second`, the others in order)."""
    at = dict(zip(letters, index))
    return at[first], at[second], [at[a] for a in _others(letters, first + second)]


def _names(letters: str) -> list:
    """The iteration variables' names: the letters in lower case, the width axis `v`
    (`w` is the weight's name)."""
    return ["v" if a == "W" else a.lower() for a in letters]


def _reduce_axes(letters, extents) -> list:
    """One reduction axis per letter, named by it in lower case."""
    te = _te()
    return [te.reduce_axis((0, e), name=a.lower()) for a, e in zip(letters, extents)]


def _tensors(layout: ConvLayout, shape: ConvShape, dtype, *which: str) -> list:
    """The placeholders named `which`: x (input), w (weight), dy (output gradient)."""
    te = _te()
    dims = {"x": _place(layout.data, {"N": shape.N, "C": shape.C}, shape.spatial),
            "w": _place(layout.weight, {"K": shape.K, "C": shape.C}, shape.window),
            "dy": _place(layout.out, {"N": shape.N, "K": shape.K}, shape.out_spatial)}
    return [te.placeholder(dims[name], name=name, dtype=dtype) for name in which]


def _zero_pad(x, letters: str, pad: int, dtype):
    """x with `pad` zeros on both sides of every spatial axis."""
    te = _te()
    extents = [int(e) for e in x.shape]
    spatial = [i for i, a in enumerate(letters) if a not in "NC"]

    def value(*at):
        inside = te.all(*[at[i] >= pad for i in spatial],
                        *[at[i] < extents[i] + pad for i in spatial])
        source = tuple(a - pad if i in spatial else a for i, a in enumerate(at))
        return te.if_then_else(inside, x[source], te.const(0, dtype))

    shape = tuple(e + 2 * pad if i in spatial else e for i, e in enumerate(extents))
    return te.compute(shape, value, name="x_pad", varargs_names=_names(letters))


def _by_input_order(layout: ConvLayout, channel, window: list) -> tuple:
    """The channel and window reductions in the input's memory order (batch aside)."""
    return _place(layout.data.replace("N", ""), {"C": channel}, window)


def convolution(layout: ConvLayout, shape: ConvShape, bias: bool, epilogue: str,
                dtype) -> tuple:
    """(x, w, b, y) or (x, w, y): y = act(conv(x, w) + b), b (K,) per output channel,
    computed in float32 for the half dtypes and cast to `dtype`."""
    te = _te()
    x, w = _tensors(layout, shape, dtype, "x", "w")
    padded = _zero_pad(x, layout.data, shape.pad, dtype)
    c = te.reduce_axis((0, shape.C), name="c")
    taps = _reduce_axes(_others(layout.weight, "KC"), shape.window)

    def body(*at):
        n, k, pixel = _split(layout.out, at, "N", "K")
        read = [p * shape.stride + r for p, r in zip(pixel, taps)]
        return te.sum(up(padded[_place(layout.data, {"N": n, "C": c}, read)], dtype)
                      * up(w[_place(layout.weight, {"K": k, "C": c}, taps)], dtype),
                      axis=list(_by_input_order(layout, c, taps)))

    out = te.compute(_place(layout.out, {"N": shape.N, "K": shape.K}, shape.out_spatial),
                     body, name="conv", varargs_names=_names(layout.out))
    acc, k_at = accumulate_dtype(dtype), layout.out.index("K")
    if not bias:
        return x, w, te.compute(out.shape, lambda *i: down(
            activation(out(*i), epilogue, acc), dtype), name="y")
    b = te.placeholder((shape.K,), name="b", dtype=dtype)
    return x, w, b, te.compute(out.shape, lambda *i: down(
        activation(out(*i) + up(b[i[k_at]], dtype), epilogue, acc), dtype), name="y")


def grad_input(layout: ConvLayout, shape: ConvShape, dtype) -> tuple:
    """(dy, w, dx): each input pixel of dx sums the output pixels whose window covered
    it, over the output channels and the window in the input's order."""
    te = _te()
    dy, w = _tensors(layout, shape, dtype, "dy", "w")
    k = te.reduce_axis((0, shape.K), name="k")
    taps = _reduce_axes(_others(layout.weight, "KC"), shape.window)
    stride, pad, out = shape.stride, shape.pad, shape.out_spatial

    def term(*at):
        n, c, pixel = _split(layout.data, at, "N", "C")
        back = [h + pad - r for h, r in zip(pixel, taps)]
        source = [te.indexdiv(e, stride) for e in back]
        inside = te.all(*[e >= 0 for e in back], *[te.indexmod(e, stride) == 0 for e in back],
                        *[p < extent for p, extent in zip(source, out)])
        clamped = [te.min(te.max(p, 0), extent - 1) for p, extent in zip(source, out)]
        value = up(dy[_place(layout.out, {"N": n, "K": k}, clamped)], dtype) * \
            up(w[_place(layout.weight, {"K": k, "C": c}, taps)], dtype)
        return te.sum(te.if_then_else(inside, value, te.const(0, accumulate_dtype(dtype))),
                      axis=list(_by_input_order(layout, k, taps)))

    dx = te.compute(_place(layout.data, {"N": shape.N, "C": shape.C}, shape.spatial), term,
                    name=acc_name("dx", dtype), varargs_names=_names(layout.data))
    return dy, w, cast_out(dx, dtype, "dx")


def grad_weight(layout: ConvLayout, shape: ConvShape, dtype) -> tuple:
    """(dy, x, dw): dw sums dy times the input pixel each tap read, over the batch and
    the output pixels."""
    te = _te()
    dy, x = _tensors(layout, shape, dtype, "dy", "x")
    padded = _zero_pad(x, layout.data, shape.pad, dtype)
    n, *pixel = _reduce_axes("N" + "".join(_others(layout.out, "NK")),
                             (shape.N, *shape.out_spatial))

    def body(*at):
        k, c, taps = _split(layout.weight, at, "K", "C")
        read = [p * shape.stride + r for p, r in zip(pixel, taps)]
        return te.sum(up(dy[_place(layout.out, {"N": n, "K": k}, pixel)], dtype)
                      * up(padded[_place(layout.data, {"N": n, "C": c}, read)], dtype),
                      axis=[n, *pixel])

    dw = te.compute(_place(layout.weight, {"K": shape.K, "C": shape.C}, shape.window), body,
                    name=acc_name("dw", dtype), varargs_names=_names(layout.weight))
    return dy, x, cast_out(dw, dtype, "dw")


def grad_bias(layout: ConvLayout, N: int, K: int, out_spatial: tuple, dtype) -> tuple:
    """(dy, db): db (K,) is dy summed over all but its channel axis."""
    te = _te()
    dy = te.placeholder(_place(layout.out, {"N": N, "K": K}, out_spatial), name="dy",
                        dtype=dtype)
    n, *pixel = _reduce_axes("N" + "".join(_others(layout.out, "NK")), (N, *out_spatial))
    db = te.compute((K,), lambda k: te.sum(up(dy[_place(layout.out, {"N": n, "K": k}, pixel)],
                                                 dtype), axis=[n, *pixel]),
                    name=acc_name("db", dtype))
    return dy, cast_out(db, dtype, "db")


# ------------------------------------------------------------------- the workloads

def conv2d_workloads(layout: ConvLayout, name: str) -> tuple:
    """The 2-d workload functions of `layout`: the forward `name` and `name`_grad_input,
    _grad_weight, _grad_bias. Their parameters are the same in every layout (the sizes
    of the NCHW call), so one aten call gives the same numbers in each."""

    def forward(N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=1, pad=1, bias=True,
                epilogue="none", dtype="float32"):
        return convolution(layout, ConvShape(N, C, (H, W), K, (R, S), stride, pad), bias,
                           epilogue, dtype)

    def input_grad(N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=1, pad=1, dtype="float32"):
        return grad_input(layout, ConvShape(N, C, (H, W), K, (R, S), stride, pad), dtype)

    def weight_grad(N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=1, pad=1, dtype="float32"):
        return grad_weight(layout, ConvShape(N, C, (H, W), K, (R, S), stride, pad), dtype)

    def bias_grad(N=1, K=8, P=16, Q=16, dtype="float32"):
        return grad_bias(layout, N, K, (P, Q), dtype)

    x, w, y = (f"({', '.join(letters)})" for letters in (layout.data, layout.weight, layout.out))
    docs = {forward: f"y {y} = act(conv(x, w) + b) with x {x}, w {w}, optional bias b (K,) "
                     "and ReLU / GELU: aten.convolution (groups 1, dilation 1).",
            input_grad: f"dx {x} of `{name}` from dy {y} and w {w}.",
            weight_grad: f"dw {w} of `{name}` from dy {y} and x {x}.",
            bias_grad: f"db (K,) of `{name}` with bias: dy {y} summed over all but K."}
    for func, suffix in ((forward, ""), (input_grad, "_grad_input"),
                         (weight_grad, "_grad_weight"), (bias_grad, "_grad_bias")):
        func.__name__ = func.__qualname__ = name + suffix
        func.__doc__ = docs[func]
    return forward, input_grad, weight_grad, bias_grad


conv2d, conv2d_grad_input, conv2d_grad_weight, conv2d_grad_bias = \
    conv2d_workloads(NCHW, "conv2d")


def conv1d(N=1, C=8, L=32, K=8, R=3, stride=1, pad=1, bias=True, epilogue="none",
           dtype="float32"):
    """NCL convolution of x (N, C, L) with w (K, C, R), optional bias (K,) and ReLU /
    GELU: aten.convolution on 3-d input with groups=1, dilation 1."""
    return convolution(NCL, ConvShape(N, C, (L,), K, (R,), stride, pad), bias, epilogue,
                       dtype)
