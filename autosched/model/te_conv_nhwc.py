"""The tensor expressions of channels_last (NHWC) convolutions and their gradients.

A model converted with ``model.to(memory_format=torch.channels_last)`` holds its
activations as N, H, W, C in memory and its convolution weights as K, R, S, C (OHWI)
while their logical shapes stay NCHW and KCRS. These workloads take the tensors in their
memory order (the permuted views the matcher hands them, which are contiguous: no copy)
and write the output in memory order too; the matcher permutes it back to the logical
NCHW shape, whose strides are then the channels_last ones the graph's later operators
expect. The reduction reads C (or K) innermost, where both operands are contiguous, which
is the layout the implicit-GEMM / tensor-core sketches stage best.

The parameters are the NCHW workloads' (`te_ops.conv2d` and its gradients), so one
aten call gives the same numbers in either layout and only the workload name differs.
"""
from __future__ import annotations

from .dtypes import accumulate_dtype
from .te_ops import acc_name, activation, cast_out, conv_out, down, up


def _te():
    from tvm import te

    return te


def _zero_pad_nhwc(x, pad: int, dtype):
    """x (N, H, W, C) with `pad` zeros on both sides of H and W."""
    te = _te()
    N, H, W, C = (int(e) for e in x.shape)

    def value(n, h, w, c):
        inside = te.all(h >= pad, h < H + pad, w >= pad, w < W + pad)
        return te.if_then_else(inside, x[n, h - pad, w - pad, c], te.const(0, dtype))

    return te.compute((N, H + 2 * pad, W + 2 * pad, C), value, name="x_pad")


def conv2d_nhwc(N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=1, pad=1, bias=True,
                epilogue="none", dtype="float32"):
    """y (N, P, Q, K) = act(conv(x, w) + b) with x (N, H, W, C), w (K, R, S, C), bias
    (K,): aten.convolution on channels_last tensors (groups 1, dilation 1)."""
    te = _te()
    x = te.placeholder((N, H, W, C), name="x", dtype=dtype)
    w = te.placeholder((K, R, S, C), name="w", dtype=dtype)
    P, Q = conv_out(H, R, stride, pad), conv_out(W, S, stride, pad)
    padded = _zero_pad_nhwc(x, pad, dtype)
    r, s, c = (te.reduce_axis((0, e), name=nm) for e, nm in ((R, "r"), (S, "s"), (C, "c")))
    out = te.compute((N, P, Q, K), lambda n, p, q, k: te.sum(
        up(padded[n, p * stride + r, q * stride + s, c], dtype) * up(w[k, r, s, c], dtype),
        axis=[r, s, c]), name="conv")
    acc = accumulate_dtype(dtype)
    if not bias:
        return x, w, te.compute(out.shape, lambda *i: down(
            activation(out(*i), epilogue, acc), dtype), name="y")
    b = te.placeholder((K,), name="b", dtype=dtype)
    return x, w, b, te.compute(out.shape, lambda *i: down(
        activation(out(*i) + up(b[i[-1]], dtype), epilogue, acc), dtype), name="y")


def conv2d_nhwc_grad_input(N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=1, pad=1,
                           dtype="float32"):
    """dx (N, H, W, C) of `conv2d_nhwc` from dy (N, P, Q, K) and w (K, R, S, C)."""
    te = _te()
    P, Q = conv_out(H, R, stride, pad), conv_out(W, S, stride, pad)
    dy = te.placeholder((N, P, Q, K), name="dy", dtype=dtype)
    w = te.placeholder((K, R, S, C), name="w", dtype=dtype)
    r, s, k = (te.reduce_axis((0, e), name=nm) for e, nm in ((R, "r"), (S, "s"), (K, "k")))

    def term(n, h, v, c):
        hp, vq = h + pad - r, v + pad - s
        p, q = te.indexdiv(hp, stride), te.indexdiv(vq, stride)
        inside = te.all(hp >= 0, vq >= 0, te.indexmod(hp, stride) == 0,
                        te.indexmod(vq, stride) == 0, p < P, q < Q)
        value = up(dy[n, te.min(te.max(p, 0), P - 1), te.min(te.max(q, 0), Q - 1), k],
                    dtype) * up(w[k, r, s, c], dtype)
        return te.sum(te.if_then_else(inside, value, te.const(0, accumulate_dtype(dtype))),
                      axis=[r, s, k])

    dx = te.compute((N, H, W, C), term, name=acc_name("dx", dtype))
    return dy, w, cast_out(dx, dtype, "dx")


def conv2d_nhwc_grad_weight(N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=1, pad=1,
                            dtype="float32"):
    """dw (K, R, S, C) of `conv2d_nhwc` from dy (N, P, Q, K) and x (N, H, W, C)."""
    te = _te()
    P, Q = conv_out(H, R, stride, pad), conv_out(W, S, stride, pad)
    dy = te.placeholder((N, P, Q, K), name="dy", dtype=dtype)
    x = te.placeholder((N, H, W, C), name="x", dtype=dtype)
    padded = _zero_pad_nhwc(x, pad, dtype)
    n, p, q = (te.reduce_axis((0, e), name=nm) for e, nm in ((N, "n"), (P, "p"), (Q, "q")))
    dw = te.compute((K, R, S, C), lambda k, r, s, c: te.sum(
        up(dy[n, p, q, k], dtype) * up(padded[n, p * stride + r, q * stride + s, c], dtype),
        axis=[n, p, q]), name=acc_name("dw", dtype))
    return dy, x, cast_out(dw, dtype, "dw")


def conv2d_nhwc_grad_bias(N=1, K=8, P=16, Q=16, dtype="float32"):
    """db (K,) of `conv2d_nhwc` with bias: dy (N, P, Q, K) summed over all but K."""
    te = _te()
    dy = te.placeholder((N, P, Q, K), name="dy", dtype=dtype)
    n, p, q = (te.reduce_axis((0, e), name=nm) for e, nm in ((N, "n"), (P, "p"), (Q, "q")))
    db = te.compute((K,), lambda k: te.sum(up(dy[n, p, q, k], dtype), axis=[n, p, q]),
                    name=acc_name("db", dtype))
    return dy, cast_out(db, dtype, "db")
