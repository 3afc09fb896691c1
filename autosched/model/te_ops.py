"""The tensor expressions of the aten operators autosched tunes inside a model.

Each function computes exactly what one aten operator (or an operator with its
transposed operands folded in) computes, on the shapes the operator was called with;
`workloads.py` pairs each with its torch twin and names the bindings. The row helpers
(`row_mean`, `row_stats`) are public: op files build their layer norms from them; so are
the dtype and epilogue helpers (`up`, `down`, `cast_out`, `acc_name`, `activation`) that
the convolutions (`te_conv.py`) share.

``dtype`` is the dtype of the tensors. For the half types the arithmetic is float32
(`dtypes.accumulate_dtype`): inputs are cast in where they are read, sums and
transcendental functions run in float32, and the result is cast to ``dtype`` at the end
(a reduction gets a stage of its own, ``<name>_acc``, that the final cast reads). A
float32 workload is the same expression it always was (its task key is unchanged).
"""
from __future__ import annotations

import math

from .dtypes import HALF, accumulate_dtype

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _te():
    from tvm import te

    return te


def _sum_product(a, b, k):
    te = _te()
    return te.sum(a * b, axis=k)


def up(value, dtype):
    """A value read from a `dtype` tensor, in the dtype the kernel computes in."""
    return value.astype("float32") if dtype in HALF else value


def down(value, dtype):
    """A computed value as the `dtype` of the output."""
    return value.astype(dtype) if dtype in HALF else value


def acc_name(name: str, dtype) -> str:
    """The name of a reduction stage whose result `cast_out` makes the output `name`."""
    return f"{name}_acc" if dtype in HALF else name


def cast_out(t, dtype, name: str):
    """`t` (computed in float32 for a half `dtype`) cast to `dtype` as the output `name`;
    `t` itself for any other dtype."""
    if dtype not in HALF:
        return t
    return _te().compute(t.shape, lambda *i: t(*i).astype(dtype), name=name)


def _matmul(M, N, K, dtype, a_transposed=False, b_transposed=False):
    """C (M, N) = op(A) @ op(B), op a transpose where asked: the kernel reads the operand
    in the layout it is stored in instead of a copy made by a transpose."""
    te = _te()
    A = te.placeholder((K, M) if a_transposed else (M, K), name="A", dtype=dtype)
    B = te.placeholder((N, K) if b_transposed else (K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")

    def a(i):
        return up(A[k, i] if a_transposed else A[i, k], dtype)

    def b(j):
        return up(B[j, k] if b_transposed else B[k, j], dtype)

    C = te.compute((M, N), lambda i, j: _sum_product(a(i), b(j), k), name=acc_name("C", dtype))
    return A, B, cast_out(C, dtype, "C")


def mm(M=64, N=64, K=64, dtype="float32"):
    """C = A @ B with A (M, K), B (K, N)."""
    return _matmul(M, N, K, dtype)


def mm_nt(M=64, N=64, K=64, dtype="float32"):
    """C = A @ B.T with A (M, K), B (N, K): a linear layer without bias, dX = dY @ W."""
    return _matmul(M, N, K, dtype, b_transposed=True)


def mm_tn(M=64, N=64, K=64, dtype="float32"):
    """C = A.T @ B with A (K, M), B (K, N): the weight gradient dW = dY.T @ X."""
    return _matmul(M, N, K, dtype, a_transposed=True)


def activation(value, epilogue: str, dtype):
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
    acc = accumulate_dtype(dtype)
    xw = te.compute((M, N), lambda i, j: _sum_product(up(x[i, k], dtype), up(w[j, k], dtype),
                                                      k), name="xw")
    y = te.compute((M, N), lambda i, j: down(activation(xw[i, j] + up(b[j], dtype), epilogue,
                                                        acc), dtype), name="y")
    return x, w, b, y


def bmm(B=4, M=64, N=64, K=64, dtype="float32"):
    """C[b] = A[b] @ B[b] with A (B, M, K), B (B, K, N)."""
    te = _te()
    a = te.placeholder((B, M, K), name="A", dtype=dtype)
    b = te.placeholder((B, K, N), name="Bm", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((B, M, N), lambda n, i, j: _sum_product(
        up(a[n, i, k], dtype), up(b[n, k, j], dtype), k), name=acc_name("C", dtype))
    return a, b, cast_out(C, dtype, "C")


def softmax(M=64, N=64, dtype="float32"):
    """Softmax over the last axis of x (M, N)."""
    te = _te()
    x = te.placeholder((M, N), name="x", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    row_max = te.compute((M,), lambda i: te.max(up(x[i, k1], dtype), axis=k1), name="row_max")
    exp = te.compute((M, N), lambda i, j: te.exp(up(x[i, j], dtype) - row_max[i]), name="exp")
    k2 = te.reduce_axis((0, N), name="k2")
    row_sum = te.compute((M,), lambda i: te.sum(exp[i, k2], axis=k2), name="row_sum")
    return x, te.compute((M, N), lambda i, j: down(exp[i, j] / row_sum[i], dtype), name="y")


def softmax_backward(M=64, N=64, dtype="float32"):
    """dx = y * (dy - sum_j dy * y): aten._softmax_backward_data over the last axis."""
    te = _te()
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    y = te.placeholder((M, N), name="y", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    dot = te.compute((M,), lambda i: te.sum(up(dy[i, k], dtype) * up(y[i, k], dtype), axis=k),
                     name="dot")
    return dy, y, te.compute((M, N), lambda i, j: down(
        up(y[i, j], dtype) * (up(dy[i, j], dtype) - dot[i]), dtype), name="dx")


def row_mean(f, M, N, dtype, name):
    """mean_j f(i, j) for each row i (a reduction, then a division: TE allows reductions
    only at the top level of a compute)."""
    te = _te()
    k = te.reduce_axis((0, N), name=f"k_{name}")
    total = te.compute((M,), lambda i: te.sum(f(i, k), axis=k), name=f"{name}_sum")
    return te.compute((M,), lambda i: total[i] / te.const(N, dtype), name=name)


def row_stats(x, M, N, eps, dtype):
    """Mean and 1/std of each row of x (M, N), as layer norm computes them."""
    return _row_stats(lambda i, j: x[i, j], M, N, eps, dtype)


def _row_stats(load, M, N, eps, dtype):
    """`row_stats` of the values `load(i, j)`, computed in `dtype`."""
    te = _te()
    mean = row_mean(load, M, N, dtype, "mean")
    var = row_mean(lambda i, j: (load(i, j) - mean[i]) * (load(i, j) - mean[i]), M, N, dtype,
                   "var")
    rstd = te.compute((M,), lambda i: te.rsqrt(var[i] + te.const(eps, dtype)), name="rstd")
    return mean, rstd


def layer_norm(M=64, N=64, eps=1e-5, dtype="float32"):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis of x (M, N)."""
    te = _te()
    x = te.placeholder((M, N), name="x", dtype=dtype)
    gamma = te.placeholder((N,), name="gamma", dtype=dtype)
    beta = te.placeholder((N,), name="beta", dtype=dtype)
    mean, rstd = _row_stats(lambda i, j: up(x[i, j], dtype), M, N, eps, accumulate_dtype(dtype))
    y = te.compute((M, N), lambda i, j: down(
        (up(x[i, j], dtype) - mean[i]) * rstd[i] * up(gamma[j], dtype) + up(beta[j], dtype),
        dtype), name="y")
    return x, gamma, beta, y


def _normalized(x, mean, rstd, dtype, stats_dtype):
    """xhat (i, j) of layer norm from the saved row statistics."""
    return lambda i, j: (up(x[i, j], dtype) - up(mean[i], stats_dtype)) * \
        up(rstd[i], stats_dtype)


def _ln_backward_inputs(M, N, dtype, stats_dtype):
    """dy, x (M, N) and the saved mean, rstd (M,): in `dtype`, the statistics in
    `stats_dtype` (None: `dtype`; torch's CUDA layer norm saves float32 ones for half
    inputs)."""
    te = _te()
    stats_dtype = stats_dtype or dtype
    return (te.placeholder((M, N), name="dy", dtype=dtype),
            te.placeholder((M, N), name="x", dtype=dtype),
            te.placeholder((M,), name="mean", dtype=stats_dtype),
            te.placeholder((M,), name="rstd", dtype=stats_dtype))


def layer_norm_grad_input(M=64, N=64, dtype="float32", stats_dtype=None):
    """dx of `layer_norm` (aten.native_layer_norm_backward's first output) from dy, x, the
    saved mean and rstd (M,) and gamma: rstd * (g - mean_j g - xhat * mean_j (g xhat)),
    g = dy * gamma."""
    te = _te()
    dy, x, mean, rstd = _ln_backward_inputs(M, N, dtype, stats_dtype)
    gamma = te.placeholder((N,), name="gamma", dtype=dtype)
    acc, sd = accumulate_dtype(dtype), mean.dtype
    xhat = _normalized(x, mean, rstd, dtype, sd)

    def g(i, j):
        return up(dy[i, j], dtype) * up(gamma[j], dtype)

    g_mean = row_mean(g, M, N, acc, "g_mean")
    gx_mean = row_mean(lambda i, j: g(i, j) * xhat(i, j), M, N, acc, "gx_mean")
    dx = te.compute((M, N), lambda i, j: down(up(rstd[i], sd) * (
        g(i, j) - g_mean[i] - xhat(i, j) * gx_mean[i]), dtype), name="dx")
    return dy, x, mean, rstd, gamma, dx


def layer_norm_grad_gamma(M=64, N=64, dtype="float32", stats_dtype=None):
    """dgamma (N,) of `layer_norm`: sum over rows of dy * xhat."""
    te = _te()
    dy, x, mean, rstd = _ln_backward_inputs(M, N, dtype, stats_dtype)
    xhat = _normalized(x, mean, rstd, dtype, mean.dtype)
    i = te.reduce_axis((0, M), name="i")
    dgamma = te.compute((N,), lambda j: te.sum(up(dy[i, j], dtype) * xhat(i, j), axis=i),
                        name=acc_name("dgamma", dtype))
    return dy, x, mean, rstd, cast_out(dgamma, dtype, "dgamma")


def layer_norm_grad_beta(M=64, N=64, dtype="float32"):
    """dbeta (N,) of `layer_norm`: dy summed over rows."""
    te = _te()
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    i = te.reduce_axis((0, M), name="i")
    dbeta = te.compute((N,), lambda j: te.sum(up(dy[i, j], dtype), axis=i),
                       name=acc_name("dbeta", dtype))
    return dy, cast_out(dbeta, dtype, "dbeta")


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
    act, acc = _gelu_erf if approximate == "none" else _gelu_tanh, accumulate_dtype(dtype)
    return x, te.compute((M, N), lambda i, j: down(act(up(x[i, j], dtype), acc), dtype),
                         name="y")


def gelu_backward(M=64, N=64, approximate="none", dtype="float32"):
    """dx = dy * GELU'(x): aten.gelu_backward."""
    te = _te()
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    x = te.placeholder((M, N), name="x", dtype=dtype)
    io, dtype = dtype, accumulate_dtype(dtype)  # the constants and arithmetic: float32
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
    return dy, x, te.compute((M, N), lambda i, j: down(
        up(dy[i, j], io) * grad(up(x[i, j], io)), io), name="dx")
