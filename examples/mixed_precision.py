"""Mixed-precision operators as tensor cores run them: 16-bit inputs (fp16 or bf16),
products accumulated in `acc` (fp32 by default, as cuBLAS and cuDNN do).

- `matmul_mp`: C = A @ B;
- `batch_matmul_mp`: C[b] = A[b] @ B[b];
- `dense_bias_gelu_mp`: y = gelu(x @ w.T + b) (tanh approximation), y in the input dtype;
- `conv2d_nhwc_mp`: a 2-D convolution in NHWC with OHWI weights (ResNet-50's layouts on
  tensor cores), zero padding, stride `stride`.
"""
import math

from tvm import te

import autosched


def _widen(t, acc):
    return t.astype(acc) if t.dtype != acc else t


@autosched.workload
def matmul_mp(M=4096, N=4096, K=4096, dtype="float16", acc="float32"):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(
        _widen(A[i, k], acc) * _widen(B[k, j], acc), axis=k), name="C")
    return A, B, C


@autosched.workload
def batch_matmul_mp(B=32, M=1024, N=1024, K=128, dtype="float16", acc="float32"):
    a = te.placeholder((B, M, K), name="A", dtype=dtype)
    b = te.placeholder((B, K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((B, M, N), lambda n, i, j: te.sum(
        _widen(a[n, i, k], acc) * _widen(b[n, k, j], acc), axis=k), name="C")
    return a, b, c


@autosched.workload
def dense_bias_gelu_mp(M=2048, N=4096, K=1024, dtype="float16", acc="float32"):
    x = te.placeholder((M, K), name="x", dtype=dtype)
    w = te.placeholder((N, K), name="w", dtype=dtype)
    b = te.placeholder((N,), name="b", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    dense = te.compute((M, N), lambda i, j: te.sum(
        _widen(x[i, k], acc) * _widen(w[j, k], acc), axis=k), name="dense")
    c = math.sqrt(2.0 / math.pi)

    def gelu(i, j):
        v = dense[i, j] + _widen(b[j], acc)
        inner = te.const(c, acc) * (v + te.const(0.044715, acc) * v * v * v)
        return (te.const(0.5, acc) * v * (te.const(1.0, acc) + te.tanh(inner))).astype(dtype)

    y = te.compute((M, N), gelu, name="gelu")
    return x, w, b, y


@autosched.workload
def conv2d_nhwc_mp(N=8, H=56, W=56, C=64, F=64, R=3, S=3, pad=1, stride=1,
                   dtype="float16", acc="float32"):
    data = te.placeholder((N, H, W, C), name="data", dtype=dtype)
    weight = te.placeholder((F, R, S, C), name="weight", dtype=dtype)
    padded = te.compute(
        (N, H + 2 * pad, W + 2 * pad, C),
        lambda n, y, x, c: te.if_then_else(
            te.all(y >= pad, y < H + pad, x >= pad, x < W + pad),
            data[n, y - pad, x - pad, c], te.const(0.0, dtype)),
        name="pad")
    OH = (H + 2 * pad - R) // stride + 1
    OW = (W + 2 * pad - S) // stride + 1
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    c = te.reduce_axis((0, C), name="c")
    out = te.compute(
        (N, OH, OW, F),
        lambda n, y, x, f: te.sum(
            _widen(padded[n, y * stride + r, x * stride + s, c], acc)
            * _widen(weight[f, r, s, c], acc), axis=[r, s, c]),
        name="conv")
    return data, weight, out
