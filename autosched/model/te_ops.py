"""The tensor expressions of the aten operators autosched tunes inside a model.

Each function computes exactly what one aten operator (or an operator with its
transposed operands folded in) computes, on the shapes the operator was called with;
`workloads.py` pairs each with its torch twin and names the bindings. The row helpers
(`row_mean`, `row_stats`) are public: op files build their layer norms from them.
"""
from __future__ import annotations

import math

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _te():
    from tvm import te

    return te


def _sum_product(a, b, k):
    te = _te()
    return te.sum(a * b, axis=k)


def _matmul(M, N, K, dtype, a_transposed=False, b_transposed=False):
    """C (M, N) = op(A) @ op(B), op a transpose where asked: the kernel reads the operand
    in the layout it is stored in instead of a copy made by a transpose."""
    te = _te()
    A = te.placeholder((K, M) if a_transposed else (M, K), name="A", dtype=dtype)
    B = te.placeholder((N, K) if b_transposed else (K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")

    def a(i):
        return A[k, i] if a_transposed else A[i, k]

    def b(j):
        return B[j, k] if b_transposed else B[k, j]

    return A, B, te.compute((M, N), lambda i, j: _sum_product(a(i), b(j), k), name="C")


def mm(M=64, N=64, K=64, dtype="float32"):
    """C = A @ B with A (M, K), B (K, N)."""
    return _matmul(M, N, K, dtype)


def mm_nt(M=64, N=64, K=64, dtype="float32"):
    """C = A @ B.T with A (M, K), B (N, K): a linear layer without bias, dX = dY @ W."""
    return _matmul(M, N, K, dtype, b_transposed=True)


def mm_tn(M=64, N=64, K=64, dtype="float32"):
    """C = A.T @ B with A (K, M), B (K, N): the weight gradient dW = dY.T @ X."""
    return _matmul(M, N, K, dtype, a_transposed=True)


def _epilogue(value, epilogue: str, dtype):
    te = _te()
    if epilogue == "none":
        return value
    if epilogue == "relu":
        return te.max(value, te.const(0, dtype))
    if epilogue == "gelu":
        return _gelu_erf(value, dtype)
    raise ValueError(f"unknown epilogue {epilogue!r}")


def linear(M=64, N=64, K=64, epilogue="none", dtype="float32"):
    """y = act(x @ w.T + b) with x (M, K), w (N, K), b (N,): aten.addmm(b, x, w.t())."""
    te = _te()
    x = te.placeholder((M, K), name="x", dtype=dtype)
    w = te.placeholder((N, K), name="w", dtype=dtype)
    b = te.placeholder((N,), name="b", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    xw = te.compute((M, N), lambda i, j: _sum_product(x[i, k], w[j, k], k), name="xw")
    y = te.compute((M, N), lambda i, j: _epilogue(xw[i, j] + b[j], epilogue, dtype), name="y")
    return x, w, b, y


def bmm(B=4, M=64, N=64, K=64, dtype="float32"):
    """C[b] = A[b] @ B[b] with A (B, M, K), B (B, K, N)."""
    te = _te()
    a = te.placeholder((B, M, K), name="A", dtype=dtype)
    b = te.placeholder((B, K, N), name="Bm", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    return a, b, te.compute((B, M, N), lambda n, i, j: _sum_product(a[n, i, k], b[n, k, j], k),
                            name="C")


def softmax(M=64, N=64, dtype="float32"):
    """Softmax over the last axis of x (M, N)."""
    te = _te()
    x = te.placeholder((M, N), name="x", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    row_max = te.compute((M,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    exp = te.compute((M, N), lambda i, j: te.exp(x[i, j] - row_max[i]), name="exp")
    k2 = te.reduce_axis((0, N), name="k2")
    row_sum = te.compute((M,), lambda i: te.sum(exp[i, k2], axis=k2), name="row_sum")
    return x, te.compute((M, N), lambda i, j: exp[i, j] / row_sum[i], name="y")


def softmax_backward(M=64, N=64, dtype="float32"):
    """dx = y * (dy - sum_j dy * y): aten._softmax_backward_data over the last axis."""
    te = _te()
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    y = te.placeholder((M, N), name="y", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    dot = te.compute((M,), lambda i: te.sum(dy[i, k] * y[i, k], axis=k), name="dot")
    return dy, y, te.compute((M, N), lambda i, j: y[i, j] * (dy[i, j] - dot[i]), name="dx")


def row_mean(f, M, N, dtype, name):
    """mean_j f(i, j) for each row i (a reduction, then a division: TE allows reductions
    only at the top level of a compute)."""
    te = _te()
    k = te.reduce_axis((0, N), name=f"k_{name}")
    total = te.compute((M,), lambda i: te.sum(f(i, k), axis=k), name=f"{name}_sum")
    return te.compute((M,), lambda i: total[i] / te.const(N, dtype), name=name)


def row_stats(x, M, N, eps, dtype):
    """Mean and 1/std of each row of x (M, N), as layer norm computes them."""
    te = _te()
    mean = row_mean(lambda i, j: x[i, j], M, N, dtype, "mean")
    var = row_mean(lambda i, j: (x[i, j] - mean[i]) * (x[i, j] - mean[i]), M, N, dtype, "var")
    rstd = te.compute((M,), lambda i: te.rsqrt(var[i] + te.const(eps, dtype)), name="rstd")
    return mean, rstd


def layer_norm(M=64, N=64, eps=1e-5, dtype="float32"):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis of x (M, N)."""
    te = _te()
    x = te.placeholder((M, N), name="x", dtype=dtype)
    gamma = te.placeholder((N,), name="gamma", dtype=dtype)
    beta = te.placeholder((N,), name="beta", dtype=dtype)
    mean, rstd = row_stats(x, M, N, eps, dtype)
    y = te.compute((M, N), lambda i, j: (x[i, j] - mean[i]) * rstd[i] * gamma[j] + beta[j],
                   name="y")
    return x, gamma, beta, y


def _normalized(x, mean, rstd):
    """xhat (i, j) of layer norm from the saved row statistics."""
    return lambda i, j: (x[i, j] - mean[i]) * rstd[i]


def _ln_backward_inputs(M, N, dtype):
    te = _te()
    return (te.placeholder((M, N), name="dy", dtype=dtype),
            te.placeholder((M, N), name="x", dtype=dtype),
            te.placeholder((M,), name="mean", dtype=dtype),
            te.placeholder((M,), name="rstd", dtype=dtype))


def layer_norm_grad_input(M=64, N=64, dtype="float32"):
    """dx of `layer_norm` (aten.native_layer_norm_backward's first output) from dy, x, the
    saved mean and rstd (M,) and gamma: rstd * (g - mean_j g - xhat * mean_j (g xhat)),
    g = dy * gamma."""
    te = _te()
    dy, x, mean, rstd = _ln_backward_inputs(M, N, dtype)
    gamma = te.placeholder((N,), name="gamma", dtype=dtype)
    xhat = _normalized(x, mean, rstd)
    g_mean = row_mean(lambda i, j: dy[i, j] * gamma[j], M, N, dtype, "g_mean")
    gx_mean = row_mean(lambda i, j: dy[i, j] * gamma[j] * xhat(i, j), M, N, dtype, "gx_mean")
    dx = te.compute((M, N), lambda i, j: rstd[i] * (dy[i, j] * gamma[j] - g_mean[i]
                                                    - xhat(i, j) * gx_mean[i]), name="dx")
    return dy, x, mean, rstd, gamma, dx


def layer_norm_grad_gamma(M=64, N=64, dtype="float32"):
    """dgamma (N,) of `layer_norm`: sum over rows of dy * xhat."""
    te = _te()
    dy, x, mean, rstd = _ln_backward_inputs(M, N, dtype)
    xhat = _normalized(x, mean, rstd)
    i = te.reduce_axis((0, M), name="i")
    return dy, x, mean, rstd, te.compute((N,), lambda j: te.sum(dy[i, j] * xhat(i, j), axis=i),
                                         name="dgamma")


def layer_norm_grad_beta(M=64, N=64, dtype="float32"):
    """dbeta (N,) of `layer_norm`: dy summed over rows."""
    te = _te()
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    i = te.reduce_axis((0, M), name="i")
    return dy, te.compute((N,), lambda j: te.sum(dy[i, j], axis=i), name="dbeta")


def _gelu_erf(v, dtype):
    te = _te()
    return te.const(0.5, dtype) * v * (te.const(1.0, dtype)
                                       + te.erf(v * te.const(1 / math.sqrt(2.0), dtype)))


def _gelu_tanh(v, dtype):
    te = _te()
    inner = te.const(_SQRT_2_OVER_PI, dtype) * (v + te.const(0.044715, dtype) * v * v * v)
    return te.const(0.5, dtype) * v * (te.const(1.0, dtype) + te.tanh(inner))


def gelu(M=64, N=64, approximate="none", dtype="float32"):
    """GELU of x (M, N), exact (erf) or with torch's tanh approximation."""
    te = _te()
    x = te.placeholder((M, N), name="x", dtype=dtype)
    act = _gelu_erf if approximate == "none" else _gelu_tanh
    return x, te.compute((M, N), lambda i, j: act(x[i, j], dtype), name="y")


def gelu_backward(M=64, N=64, approximate="none", dtype="float32"):
    """dx = dy * GELU'(x): aten.gelu_backward."""
    te = _te()
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    x = te.placeholder((M, N), name="x", dtype=dtype)
    half, one = te.const(0.5, dtype), te.const(1.0, dtype)

    def erf_grad(v):  # Phi(v) + v * phi(v)
        cdf = half * (one + te.erf(v * te.const(1 / math.sqrt(2.0), dtype)))
        pdf = te.exp(te.const(-0.5, dtype) * v * v) * te.const(1 / math.sqrt(2 * math.pi), dtype)
        return cdf + v * pdf

    def tanh_grad(v):
        t = te.tanh(te.const(_SQRT_2_OVER_PI, dtype) * (v + te.const(0.044715, dtype) * v * v * v))
        du = te.const(_SQRT_2_OVER_PI, dtype) * (one + te.const(3 * 0.044715, dtype) * v * v)
        return half * (one + t) + half * v * (one - t * t) * du

    grad = erf_grad if approximate == "none" else tanh_grad
    return dy, x, te.compute((M, N), lambda i, j: dy[i, j] * grad(x[i, j]), name="dx")


def _zero_pad(x, pad: int, dtype):
    """x (N, C, *spatial) with `pad` zeros on both sides of every spatial axis."""
    te = _te()
    spatial = [int(e) for e in x.shape[2:]]

    def value(n, c, *at):
        inside = te.all(*[a >= pad for a in at], *[a < e + pad for a, e in zip(at, spatial)])
        return te.if_then_else(inside, x[(n, c, *[a - pad for a in at])], te.const(0, dtype))

    return te.compute((*x.shape[:2], *[e + 2 * pad for e in spatial]), value, name="x_pad")


def conv2d(N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=1, pad=1, bias=True, epilogue="none",
           dtype="float32"):
    """NCHW convolution of x (N, C, H, W) with w (K, C, R, S), square stride and padding,
    optional bias (K,) and ReLU: aten.convolution with groups=1, dilation 1."""
    te = _te()
    x = te.placeholder((N, C, H, W), name="x", dtype=dtype)
    w = te.placeholder((K, C, R, S), name="w", dtype=dtype)
    P, Q = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    padded = _zero_pad(x, pad, dtype)
    c, r, s = (te.reduce_axis((0, e), name=nm) for e, nm in ((C, "c"), (R, "r"), (S, "s")))
    out = te.compute((N, K, P, Q), lambda n, k, p, q: te.sum(
        padded[n, c, p * stride + r, q * stride + s] * w[k, c, r, s], axis=[c, r, s]),
        name="conv")
    return (x, w) + _conv_epilogue(out, bias, epilogue, dtype)


def _conv_epilogue(out, bias: bool, epilogue: str, dtype) -> tuple:
    """(b, y) or (y,): the convolution `out` (N, K, ...) plus an optional bias (K,) per
    output channel, then the epilogue."""
    te = _te()
    shape = tuple(out.shape)
    if not bias:
        return (te.compute(shape, lambda *i: _epilogue(out(*i), epilogue, dtype), name="y"),)
    b = te.placeholder((shape[1],), name="b", dtype=dtype)
    return b, te.compute(shape, lambda *i: _epilogue(out(*i) + b[i[1]], epilogue, dtype),
                         name="y")


def conv1d(N=1, C=8, L=32, K=8, R=3, stride=1, pad=1, bias=True, epilogue="none",
           dtype="float32"):
    """NCL convolution of x (N, C, L) with w (K, C, R), optional bias (K,) and ReLU /
    GELU: aten.convolution on 3-d input with groups=1, dilation 1."""
    te = _te()
    x = te.placeholder((N, C, L), name="x", dtype=dtype)
    w = te.placeholder((K, C, R), name="w", dtype=dtype)
    padded = _zero_pad(x, pad, dtype)
    c, r = te.reduce_axis((0, C), name="c"), te.reduce_axis((0, R), name="r")
    out = te.compute((N, K, _conv_out(L, R, stride, pad)), lambda n, k, q: te.sum(
        padded[n, c, q * stride + r] * w[k, c, r], axis=[c, r]), name="conv")
    return (x, w) + _conv_epilogue(out, bias, epilogue, dtype)


def _conv_out(H, R, stride, pad):
    return (H + 2 * pad - R) // stride + 1


def conv2d_grad_input(N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=1, pad=1,
                      dtype="float32"):
    """dx (N, C, H, W) of `conv2d` from dy (N, K, P, Q) and w (K, C, R, S): each input
    pixel sums the output pixels whose window covered it."""
    te = _te()
    P, Q = _conv_out(H, R, stride, pad), _conv_out(W, S, stride, pad)
    dy = te.placeholder((N, K, P, Q), name="dy", dtype=dtype)
    w = te.placeholder((K, C, R, S), name="w", dtype=dtype)
    k, r, s = (te.reduce_axis((0, e), name=nm) for e, nm in ((K, "k"), (R, "r"), (S, "s")))

    def term(n, c, h, v):
        hp, vq = h + pad - r, v + pad - s
        p, q = te.indexdiv(hp, stride), te.indexdiv(vq, stride)
        inside = te.all(hp >= 0, vq >= 0, te.indexmod(hp, stride) == 0,
                        te.indexmod(vq, stride) == 0, p < P, q < Q)
        value = dy[n, k, te.min(te.max(p, 0), P - 1), te.min(te.max(q, 0), Q - 1)] * w[k, c, r, s]
        return te.sum(te.if_then_else(inside, value, te.const(0, dtype)), axis=[k, r, s])

    return dy, w, te.compute((N, C, H, W), term, name="dx")


def conv2d_grad_weight(N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=1, pad=1,
                       dtype="float32"):
    """dw (K, C, R, S) of `conv2d` from dy (N, K, P, Q) and x (N, C, H, W)."""
    te = _te()
    P, Q = _conv_out(H, R, stride, pad), _conv_out(W, S, stride, pad)
    dy = te.placeholder((N, K, P, Q), name="dy", dtype=dtype)
    x = te.placeholder((N, C, H, W), name="x", dtype=dtype)
    padded = _zero_pad(x, pad, dtype)
    n, p, q = (te.reduce_axis((0, e), name=nm) for e, nm in ((N, "n"), (P, "p"), (Q, "q")))
    return dy, x, te.compute((K, C, R, S), lambda k, c, r, s: te.sum(
        dy[n, k, p, q] * padded[n, c, p * stride + r, q * stride + s], axis=[n, p, q]),
        name="dw")


def conv2d_grad_bias(N=1, K=8, P=16, Q=16, dtype="float32"):
    """db (K,) of `conv2d` with bias: dy (N, K, P, Q) summed over all but K."""
    te = _te()
    dy = te.placeholder((N, K, P, Q), name="dy", dtype=dtype)
    n, p, q = (te.reduce_axis((0, e), name=nm) for e, nm in ((N, "n"), (P, "p"), (Q, "q")))
    return dy, te.compute((K,), lambda k: te.sum(dy[n, k, p, q], axis=[n, p, q]), name="db")
