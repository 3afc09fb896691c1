"""Which aten operators of a traced graph an autosched workload computes, and how.

`match(node)` looks at one node of an aten-level FX graph (what torch.export or
AOTAutograd produce) and returns an `OpMatch`: the workload, its parameters (the shapes
and dtype the node was called with), the graph values that are the kernel's inputs, in
order, and the node whose value the kernel's output replaces. Transposes feeding a matmul
are folded into the workload (``mm_nt``, ``mm_tn``, ``linear``), so the kernel reads the
untransposed tensor instead of a strided view, and a ReLU or GELU that is the only user of
a linear layer or convolution is fused into it as an epilogue. A convolution of
channels_last tensors matches an NHWC workload that reads them zero-copy (`conv_layouts`).

The same function serves extraction (`tune-model`, `export-model`) and the torch.compile
backend, so the tasks that are tuned are exactly the ones the backend looks up. A node
whose shapes are symbolic (dynamic shapes) or whose dtype is not generated never matches:
a kernel exists for fixed shapes only.

float32, float16 and bfloat16 graphs match (`dtypes.py`): a model cast with
`model.to(dtype)`, and one under `torch.autocast`, whose graph casts a matmul's operands
with ``_to_copy`` nodes that stay torch's and calls the matmul on the half tensors.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch

from .conv_layouts import nhwc_match, takes_nhwc
from .dtypes import HALF, dtype_name
from .workloads import workload_name

aten = torch.ops.aten

_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
_TRANSPOSES = (aten.t.default, aten.transpose.int, aten.permute.default)


@dataclass(frozen=True)
class OpMatch:
    """One operator call that a workload computes. `input_shapes[i]` is the shape the
    kernel takes `inputs[i]` in (a reshape is inserted where it differs from the value's
    shape); the kernel's output is reshaped to `output_shape`, the shape of `output`."""

    op: str          # the aten operator, e.g. ``aten.addmm``
    workload: str
    params: dict
    inputs: tuple
    input_shapes: tuple
    output: object  # torch.fx.Node
    output_shape: tuple
    # the operator node when it has several outputs computed by several kernels (one
    # match each): they replace it only together, else it would still run for the rest
    group: object = None
    # a permutation (a view) per input applied before the reshape, or None; and the one
    # of the kernel's output before its reshape (channels_last convolutions, conv_layouts)
    input_perms: tuple = ()
    output_perm: tuple | None = None

    @property
    def key(self) -> tuple:
        """What identifies the kernel: the workload and its parameters."""
        return (self.workload, tuple(sorted(self.params.items())))


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _shape(node) -> tuple | None:
    """The static shape of a node's value; None when unknown or symbolic."""
    val = _val(node)
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return tuple(int(s) for s in val.shape) if all(
            isinstance(s, int) for s in val.shape) else None
    except TypeError:
        return None


def _dtype(*nodes) -> str | None:
    """The workload dtype shared by all these values; None if any differs or is not
    generated (so the node stays torch's)."""
    vals = [_val(n) for n in nodes]
    dtypes = {v.dtype if isinstance(v, torch.Tensor) else None for v in vals}
    return dtype_name(dtypes.pop()) if len(dtypes) == 1 else None


def _is_2d_transpose(node) -> bool:
    if node.target == aten.t.default:
        return True
    if node.target == aten.transpose.int:
        return sorted(d % 2 for d in node.args[1:3]) == [0, 1]
    return node.target == aten.permute.default and list(node.args[1]) == [1, 0]


def untranspose(node) -> tuple:
    """(the tensor under a chain of 2-D transposes, whether their number is odd)."""
    flipped = False
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and \
            node.target in _TRANSPOSES and _shape(node) is not None and \
            len(_shape(node)) == 2 and _is_2d_transpose(node):
        node, flipped = node.args[0], not flipped
    return node, flipped


def _rows(shape) -> tuple:
    """(M, N): all leading axes flattened, the last axis kept."""
    return (math.prod(shape[:-1]), shape[-1])


def _single_user(node):
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _epilogue(node) -> tuple:
    """(the node the result ends at, the epilogue): a ReLU or exact GELU that is the only
    user of `node`, possibly through reshapes that are the only user of theirs."""
    current = node
    while True:
        user = _single_user(current)
        if user is None or user.op != "call_function":
            return node, "none"
        if user.target in _VIEWS:
            current = user
            continue
        if user.target == aten.relu.default:
            return user, "relu"
        if user.target == aten.gelu.default and user.kwargs.get("approximate", "none") == "none" \
                and len(user.args) == 1:
            return user, "gelu"
        return node, "none"


def _make(node, workload, params, inputs, shapes, output=None, group=None) -> OpMatch | None:
    output = output or node
    out_shape = _shape(output)
    if out_shape is None or any(s is None for s in shapes) or \
            _dtype(output) != params["dtype"]:  # the kernel's output has the inputs' dtype
        return None
    return OpMatch(op_name(node), workload, params, tuple(inputs), tuple(shapes), output,
                   out_shape, group)


def _mm(node):
    a, b = node.args[:2]
    (M, K), (_, N) = _shape(a) or (0, 0), _shape(b) or (0, 0)
    dtype = _dtype(a, b)
    if dtype is None or not M:
        return None
    base_a, flip_a = untranspose(a)
    base_b, flip_b = untranspose(b)
    params = {"M": M, "N": N, "K": K, "dtype": dtype}
    if flip_b and not flip_a:
        return _make(node, "aten_mm_nt", params, (a, base_b), ((M, K), (N, K)))
    if flip_a and not flip_b:
        return _make(node, "aten_mm_tn", params, (base_a, b), ((K, M), (K, N)))
    return _make(node, "aten_mm", params, (a, b), ((M, K), (K, N)))


def _addmm(node):
    bias, a, b = node.args[:3]
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        return None
    base_b, flip_b = untranspose(b)
    shapes = (_shape(a), _shape(base_b), _shape(bias))
    dtype = _dtype(a, b, bias)
    if not flip_b or None in shapes or dtype is None or len(shapes[2]) != 1:
        return None
    (M, K), (N, _) = shapes[0], shapes[1]
    if shapes[2] != (N,):
        return None
    output, epilogue = _epilogue(node)
    params = {"M": M, "N": N, "K": K, "dtype": dtype}
    return _make(node, workload_name("aten_linear", epilogue=epilogue), params,
                 (a, base_b, bias), ((M, K), (N, K), (N,)), output)


def _bmm(node):
    a, b = node.args[:2]
    sa, sb, dtype = _shape(a), _shape(b), _dtype(a, b)
    if sa is None or sb is None or dtype is None:
        return None
    params = {"B": sa[0], "M": sa[1], "N": sb[2], "K": sa[2], "dtype": dtype}
    return _make(node, "aten_bmm", params, (a, b), (sa, sb))


def _last_axis(dim, shape) -> bool:
    return shape is not None and len(shape) >= 1 and dim % len(shape) == len(shape) - 1


def _softmax(node):
    x, dim, half_to_float = node.args[:3]
    shape, dtype = _shape(x), _dtype(x)
    if half_to_float or dtype is None or not _last_axis(dim, shape):
        return None
    M, N = _rows(shape)
    return _make(node, "aten_softmax", {"M": M, "N": N, "dtype": dtype}, (x,), ((M, N),))


def _softmax_backward(node):
    dy, y, dim = node.args[:3]
    shape, dtype = _shape(y), _dtype(dy, y)
    if dtype is None or not _last_axis(dim, shape) or _shape(dy) != shape:
        return None
    M, N = _rows(shape)
    return _make(node, "aten_softmax_backward", {"M": M, "N": N, "dtype": dtype}, (dy, y),
                 ((M, N), (M, N)))


def _layer_norm(node):
    """native_layer_norm returns (y, mean, rstd); only y is computed, so it matches only
    where mean and rstd are unused (inference; training saves them for backward)."""
    x, normalized, gamma, beta, eps = node.args[:5]
    shape, dtype = _shape(x), _dtype(x, gamma, beta) if gamma is not None and beta is not None \
        else None
    if dtype is None or shape is None or len(normalized) != 1 or normalized[0] != shape[-1]:
        return None
    getters = {u.args[1]: u for u in node.users if u.target == operator.getitem}
    if set(getters) != {0} or len(node.users) != 1:
        return None
    M, N = _rows(shape)
    return _make(node, "aten_layer_norm", {"M": M, "N": N, "eps": float(eps), "dtype": dtype},
                 (x, gamma, beta), ((M, N), (N,), (N,)), getters[0])


def _gelu(node):
    x = node.args[0]
    shape, dtype = _shape(x), _dtype(x)
    if dtype is None or shape is None:
        return None
    M, N = _rows(shape)
    name = workload_name("aten_gelu", approximate=node.kwargs.get("approximate", "none"))
    return _make(node, name, {"M": M, "N": N, "dtype": dtype}, (x,), ((M, N),))


def _gelu_backward(node):
    dy, x = node.args[:2]
    shape, dtype = _shape(x), _dtype(dy, x)
    if dtype is None or shape is None or _shape(dy) != shape:
        return None
    M, N = _rows(shape)
    name = workload_name("aten_gelu_backward",
                         approximate=node.kwargs.get("approximate", "none"))
    return _make(node, name, {"M": M, "N": N, "dtype": dtype}, (dy, x), ((M, N), (M, N)))


def _convolution(node):
    x, w, bias, stride, padding, dilation, transposed, _, groups = node.args[:9]
    tensors = () if bias is None else (bias,)
    params = _conv_params(x, w, stride, padding, dilation, transposed, groups, *tensors)
    base = "aten_conv2d"
    if params is None:
        params, base = _conv1d_params(x, w, stride, padding, dilation, transposed, groups,
                                      *tensors), "aten_conv1d"
    if params is None:
        return None
    output, epilogue = _epilogue(node)
    sx, sw, K = _shape(x), _shape(w), params["K"]
    inputs, shapes = ((x, w), (sx, sw)) if bias is None else ((x, w, bias), (sx, sw, (K,)))
    found = _make(node, workload_name(base, bias is not None, epilogue), params, inputs,
                  shapes, output)
    return nhwc_match(found) if base == "aten_conv2d" and takes_nhwc(x, w, output) else found


def _plain_conv(x, w, stride, padding, dilation, transposed, groups, rank, *tensors):
    """The dtype of a convolution with `rank` spatial axes, groups 1, dilation 1 and the
    same stride and padding on every axis; None for any other."""
    sx, sw = _shape(x), _shape(w)
    if sx is None or sw is None or len(sx) != rank + 2 or transposed or groups != 1 \
            or set(dilation) != {1} or len(set(stride)) != 1 or len(set(padding)) != 1:
        return None
    return _dtype(x, w, *tensors)


def _conv_params(x, w, stride, padding, dilation, transposed, groups, *tensors):
    """The shared parameters of a plain 2-D convolution; None for any other."""
    dtype = _plain_conv(x, w, stride, padding, dilation, transposed, groups, 2, *tensors)
    if dtype is None:
        return None
    (N, C, H, W), (K, _, R, S) = _shape(x), _shape(w)
    return {"N": N, "C": C, "H": H, "W": W, "K": K, "R": R, "S": S, "stride": int(stride[0]),
            "pad": int(padding[0]), "dtype": dtype}


def _conv1d_params(x, w, stride, padding, dilation, transposed, groups, *tensors):
    """The parameters of a plain 1-D convolution; None for any other."""
    dtype = _plain_conv(x, w, stride, padding, dilation, transposed, groups, 1, *tensors)
    if dtype is None:
        return None
    (N, C, L), (K, _, R) = _shape(x), _shape(w)
    return {"N": N, "C": C, "L": L, "K": K, "R": R, "stride": int(stride[0]),
            "pad": int(padding[0]), "dtype": dtype}


def _output_parts(node, parts: dict) -> list:
    """One match per output of a several-output operator that the graph uses, from
    `parts` {output index: (workload, params, inputs, input shapes)}; none unless every
    used output has its workload (the operator then replaces only as a whole)."""
    getters = {u.args[1]: u for u in node.users if u.target == operator.getitem and u.users}
    if len(getters) != len(node.users) or not set(getters) <= set(parts):
        return []
    found = [_make(node, *parts[i], output=getters[i], group=node) for i in sorted(getters)]
    return [m for m in found if m is not None] if None not in found else []


def _convolution_backward(node) -> list:
    """(grad_input, grad_weight, grad_bias): one kernel each for the outputs in use."""
    dy, x, w, _, stride, padding, dilation, transposed, _, groups = node.args[:10]
    params = _conv_params(x, w, stride, padding, dilation, transposed, groups, dy)
    sdy = _shape(dy)
    if params is None or sdy is None:
        return []
    sx, sw = _shape(x), _shape(w)
    nhwc = takes_nhwc(x, w, dy)
    return [nhwc_match(m) if nhwc else m for m in _output_parts(node, {
        0: ("aten_conv2d_grad_input", params, (dy, w), (sdy, sw)),
        1: ("aten_conv2d_grad_weight", params, (dy, x), (sdy, sx)),
        2: ("aten_conv2d_grad_bias", {"N": sdy[0], "K": sdy[1], "P": sdy[2], "Q": sdy[3],
                                      "dtype": params["dtype"]}, (dy,), (sdy,))})]


def _layer_norm_backward(node) -> list:
    """(dx, dgamma, dbeta) of a layer norm over the last axis with gamma: one kernel each
    for the outputs in use, reading the mean and rstd the forward saved."""
    dy, x, normalized, mean, rstd, gamma = node.args[:6]
    shape = _shape(x)
    dtype = _dtype(dy, x, gamma) if gamma is not None else None
    stats = _dtype(mean, rstd)
    if dtype is None or shape is None or list(normalized) != [shape[-1]] or \
            _shape(dy) != shape or _shape(mean) != shape[:-1] + (1,) or \
            stats not in (dtype, "float32" if dtype in HALF else dtype):
        return []
    M, N = _rows(shape)
    params = {"M": M, "N": N, "dtype": dtype}
    # half inputs with float32 statistics (torch's CUDA layer norm) are a workload variant
    with_stats = dict(params, stats_dtype=stats) if stats != dtype else params
    rows, stat_rows = (M, N), (M,)
    return _output_parts(node, {
        0: ("aten_layer_norm_grad_input", with_stats, (dy, x, mean, rstd, gamma),
            (rows, rows, stat_rows, stat_rows, (N,))),
        1: ("aten_layer_norm_grad_gamma", with_stats, (dy, x, mean, rstd),
            (rows, rows, stat_rows, stat_rows)),
        2: ("aten_layer_norm_grad_beta", params, (dy,), (rows,))})


MATCHERS = {
    aten.mm.default: _mm,
    aten.addmm.default: _addmm,
    aten.bmm.default: _bmm,
    aten._softmax.default: _softmax,
    aten._softmax_backward_data.default: _softmax_backward,
    aten.native_layer_norm.default: _layer_norm,
    aten.native_layer_norm_backward.default: _layer_norm_backward,
    aten.gelu.default: _gelu,
    aten.gelu_backward.default: _gelu_backward,
    aten.convolution.default: _convolution,
    aten.convolution_backward.default: _convolution_backward,
}

# Operators that move or view data and compute nothing: never reported as uncovered.
_PLUMBING = {"getitem", "aten.view", "aten._unsafe_view", "aten.reshape", "aten.t",
             "aten.transpose", "aten.permute", "aten.expand", "aten.clone", "aten.detach",
             "aten.alias", "aten.split", "aten.squeeze", "aten.unsqueeze", "aten.slice",
             "aten.select", "aten.contiguous", "aten.arange", "aten._to_copy", "aten.empty",
             "aten.zeros", "aten.full", "aten.lift_fresh_copy", "aten.copy_", "aten.cat"}


def op_name(node) -> str:
    """``aten.mm`` for ``aten.mm.default`` (the overload left out)."""
    if node.target == operator.getitem:
        return "getitem"
    text = str(node.target)
    return text.rsplit(".", 1)[0] if text.count(".") >= 2 else text


def match(node) -> list[OpMatch]:
    """The workloads that compute this node's operator call: one, several for an
    operator with several outputs, none when no workload computes it."""
    if node.op != "call_function":
        return []
    matcher = MATCHERS.get(node.target)
    found = matcher(node) if matcher is not None else None
    if found is None:
        return []
    return found if isinstance(found, list) else [found]


def is_compute(node) -> bool:
    """Whether the node computes something (for the list of operators left to torch)."""
    return node.op == "call_function" and op_name(node) not in _PLUMBING
