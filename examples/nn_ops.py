"""Neural-network operators with their backward workloads, ready for training in PyTorch.

Each forward workload names, in its `backward=` metadata, the workload that computes the
gradient of each input and what that workload takes, in order:

* an input or output name of the forward workload (saved from the forward pass), or
* ``grad:<output name>``, the incoming gradient of that output.

`torch_reference=` names a PyTorch implementation (``module:function``) that
`autosched.torch.load_library(..., fallback=True)` runs for shapes the library lacks.
The references live in `nn_reference.py` next to this file.

The default variants are the shapes of `examples/train_mlp.py` (a 64 -> 256 -> 16 MLP on
batches of 128); override them with `--arg`, e.g. `--arg M=512 --arg N=1024`.

    autosched tune examples/nn_ops.py --target llvm --trials 64
    autosched export examples/nn_ops.py --target llvm -o mlp_kernels
"""
import math

from tvm import te

import autosched
from autosched.model.te_ops import gelu as model_gelu
from autosched.model.te_ops import gelu_backward as model_gelu_backward
from autosched.model.te_ops import layer_norm as row_layer_norm
from autosched.model.te_ops import linear as model_linear
from autosched.model.te_ops import row_mean, row_stats, softmax_backward
from autosched.model.te_ops import softmax as row_softmax

# (M, N, K) of the two linear layers of the MLP example: batch x out x in.
LINEAR_SHAPES = [{"M": 128, "N": 256, "K": 64}, {"M": 128, "N": 16, "K": 256}]
ROW_SHAPES = [{"M": 128, "N": 256}]


def _rows(shapes):
    """(M, N) of each (M, N, K) shape, without duplicates."""
    seen = []
    for s in shapes:
        mn = {"M": s["M"], "N": s["N"]}
        if mn not in seen:
            seen.append(mn)
    return seen


# ---------------------------------------------------------------- linear: y = x @ w.T + b

@autosched.workload(
    variants=LINEAR_SHAPES,
    backward={"x": {"workload": "linear_grad_x", "inputs": ["grad:y", "w"]},
              "w": {"workload": "linear_grad_w", "inputs": ["grad:y", "x"]},
              "b": {"workload": "linear_grad_b", "inputs": ["grad:y"]}},
    torch_reference="nn_reference:linear")
def linear(M=128, N=256, K=64, dtype="float32"):
    x = te.placeholder((M, K), name="x", dtype=dtype)
    w = te.placeholder((N, K), name="w", dtype=dtype)
    b = te.placeholder((N,), name="b", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    xw = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), name="xw")
    y = te.compute((M, N), lambda i, j: xw[i, j] + b[j], name="y")
    return x, w, b, y


@autosched.workload(variants=LINEAR_SHAPES, torch_reference="nn_reference:linear_grad_x")
def linear_grad_x(M=128, N=256, K=64, dtype="float32"):
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    w = te.placeholder((N, K), name="w", dtype=dtype)
    n = te.reduce_axis((0, N), name="n")
    dx = te.compute((M, K), lambda i, j: te.sum(dy[i, n] * w[n, j], axis=n), name="dx")
    return dy, w, dx


@autosched.workload(variants=LINEAR_SHAPES, torch_reference="nn_reference:linear_grad_w")
def linear_grad_w(M=128, N=256, K=64, dtype="float32"):
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    x = te.placeholder((M, K), name="x", dtype=dtype)
    m = te.reduce_axis((0, M), name="m")
    dw = te.compute((N, K), lambda i, j: te.sum(dy[m, i] * x[m, j], axis=m), name="dw")
    return dy, x, dw


@autosched.workload(variants=_rows(LINEAR_SHAPES), torch_reference="nn_reference:column_sum")
def linear_grad_b(M=128, N=256, dtype="float32"):
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    m = te.reduce_axis((0, M), name="m")
    db = te.compute((N,), lambda j: te.sum(dy[m, j], axis=m), name="db")
    return dy, db


# ---------------------------------------------------------------- matmul: C = A @ B

@autosched.workload(
    backward={"A": {"workload": "matmul_grad_a", "inputs": ["grad:C", "B"]},
              "B": {"workload": "matmul_grad_b", "inputs": ["A", "grad:C"]}},
    torch_reference="nn_reference:matmul")
def matmul(M=128, N=128, K=128, dtype="float32"):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@autosched.workload(torch_reference="nn_reference:matmul_grad_a")
def matmul_grad_a(M=128, N=128, K=128, dtype="float32"):
    """dA = dC @ B.T"""
    dC = te.placeholder((M, N), name="dC", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    n = te.reduce_axis((0, N), name="n")
    dA = te.compute((M, K), lambda i, j: te.sum(dC[i, n] * B[j, n], axis=n), name="dA")
    return dC, B, dA


@autosched.workload(torch_reference="nn_reference:matmul_grad_b")
def matmul_grad_b(M=128, N=128, K=128, dtype="float32"):
    """dB = A.T @ dC"""
    A = te.placeholder((M, K), name="A", dtype=dtype)
    dC = te.placeholder((M, N), name="dC", dtype=dtype)
    m = te.reduce_axis((0, M), name="m")
    dB = te.compute((K, N), lambda i, j: te.sum(A[m, i] * dC[m, j], axis=m), name="dB")
    return A, dC, dB


# ---------------------------------------------------------------- GELU (tanh approximation)

_GELU_C = math.sqrt(2.0 / math.pi)


@autosched.workload(
    variants=ROW_SHAPES,
    backward={"x": {"workload": "gelu_grad", "inputs": ["x", "grad:y"]}},
    torch_reference="nn_reference:gelu")
def gelu(M=128, N=256, dtype="float32"):
    x = te.placeholder((M, N), name="x", dtype=dtype)

    def f(i, j):
        v = x[i, j]
        inner = te.const(_GELU_C, dtype) * (v + te.const(0.044715, dtype) * v * v * v)
        return te.const(0.5, dtype) * v * (te.const(1.0, dtype) + te.tanh(inner))

    return x, te.compute((M, N), f, name="y")


@autosched.workload(variants=ROW_SHAPES, torch_reference="nn_reference:gelu_grad")
def gelu_grad(M=128, N=256, dtype="float32"):
    """dx = dy * d/dx [0.5 x (1 + tanh(u))], u = c (x + 0.044715 x^3)."""
    x = te.placeholder((M, N), name="x", dtype=dtype)
    dy = te.placeholder((M, N), name="dy", dtype=dtype)

    def f(i, j):
        v = x[i, j]
        t = te.tanh(te.const(_GELU_C, dtype) * (v + te.const(0.044715, dtype) * v * v * v))
        du = te.const(_GELU_C, dtype) * (te.const(1.0, dtype) + te.const(3 * 0.044715, dtype) * v * v)
        half = te.const(0.5, dtype)
        d = half * (te.const(1.0, dtype) + t) + half * v * (te.const(1.0, dtype) - t * t) * du
        return dy[i, j] * d

    return x, dy, te.compute((M, N), f, name="dx")


# ---------------------------------------------------------------- GELU, exact (erf)

@autosched.workload(
    variants=ROW_SHAPES,
    backward={"x": {"workload": "gelu_exact_grad", "inputs": ["grad:y", "x"]}},
    torch_reference="nn_reference:gelu_exact")
def gelu_exact(M=128, N=256, dtype="float32"):
    """y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): torch's default `nn.GELU()`."""
    return model_gelu(M, N, "none", dtype)


@autosched.workload(variants=ROW_SHAPES, torch_reference="nn_reference:gelu_exact_grad")
def gelu_exact_grad(M=128, N=256, dtype="float32"):
    """dx = dy (Phi(x) + x phi(x)): aten.gelu_backward of the exact GELU."""
    return model_gelu_backward(M, N, "none", dtype)


@autosched.workload(variants=LINEAR_SHAPES, torch_reference="nn_reference:linear_gelu_exact")
def linear_gelu_exact(M=128, N=256, K=64, dtype="float32"):
    """y = GELU(x @ w.T + b), the exact GELU fused as the epilogue of `linear`."""
    return model_linear(M, N, K, "gelu", dtype)


# ---------------------------------------------------------------- softmax over rows

@autosched.workload(
    variants=ROW_SHAPES,
    backward={"x": {"workload": "softmax_grad", "inputs": ["y", "grad:y"]}},
    torch_reference="nn_reference:softmax")
def softmax(M=128, N=256, dtype="float32"):
    return row_softmax(M, N, dtype)


@autosched.workload(variants=ROW_SHAPES, torch_reference="nn_reference:softmax_grad")
def softmax_grad(M=128, N=256, dtype="float32"):
    """dx = y * (dy - sum_j dy * y)"""
    dy, y, dx = softmax_backward(M, N, dtype)
    return y, dy, dx


# ---------------------------------------------------------------- layer normalisation over rows

@autosched.workload(
    variants=ROW_SHAPES,
    backward={"x": {"workload": "layer_norm_grad_x", "inputs": ["x", "gamma", "grad:y"]},
              "gamma": {"workload": "layer_norm_grad_gamma", "inputs": ["x", "grad:y"]},
              "beta": {"workload": "layer_norm_grad_beta", "inputs": ["grad:y"]}},
    torch_reference="nn_reference:layer_norm")
def layer_norm(M=128, N=256, eps=1e-5, dtype="float32"):
    return row_layer_norm(M, N, eps, dtype)


@autosched.workload(variants=ROW_SHAPES, torch_reference="nn_reference:layer_norm_grad_x")
def layer_norm_grad_x(M=128, N=256, eps=1e-5, dtype="float32"):
    """dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat)), g = dy * gamma."""
    x = te.placeholder((M, N), name="x", dtype=dtype)
    gamma = te.placeholder((N,), name="gamma", dtype=dtype)
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    mean, rstd = row_stats(x, M, N, eps, dtype)
    xhat = te.compute((M, N), lambda i, j: (x[i, j] - mean[i]) * rstd[i], name="xhat")
    g = te.compute((M, N), lambda i, j: dy[i, j] * gamma[j], name="g")
    g_mean = row_mean(lambda i, j: g[i, j], M, N, dtype, "g_mean")
    gx_mean = row_mean(lambda i, j: g[i, j] * xhat[i, j], M, N, dtype, "gx_mean")
    dx = te.compute((M, N), lambda i, j: rstd[i] * (g[i, j] - g_mean[i] - xhat[i, j] * gx_mean[i]),
                    name="dx")
    return x, gamma, dy, dx


@autosched.workload(variants=ROW_SHAPES, torch_reference="nn_reference:layer_norm_grad_gamma")
def layer_norm_grad_gamma(M=128, N=256, eps=1e-5, dtype="float32"):
    """dgamma = sum_i dy * xhat"""
    x = te.placeholder((M, N), name="x", dtype=dtype)
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    mean, rstd = row_stats(x, M, N, eps, dtype)
    m = te.reduce_axis((0, M), name="m")
    dgamma = te.compute((N,), lambda j: te.sum(dy[m, j] * (x[m, j] - mean[m]) * rstd[m], axis=m),
                        name="dgamma")
    return x, dy, dgamma


@autosched.workload(variants=ROW_SHAPES, torch_reference="nn_reference:column_sum")
def layer_norm_grad_beta(M=128, N=256, dtype="float32"):
    """dbeta = sum_i dy"""
    dy = te.placeholder((M, N), name="dy", dtype=dtype)
    m = te.reduce_axis((0, M), name="m")
    return dy, te.compute((N,), lambda j: te.sum(dy[m, j], axis=m), name="dbeta")
