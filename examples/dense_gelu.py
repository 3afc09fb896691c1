"""Fused dense + bias + GELU (tanh approximation), the MLP block of a transformer."""
import math

from tvm import te

import autosched


@autosched.workload
def dense_bias_gelu(M=256, N=1024, K=1024, dtype="float32"):
    x = te.placeholder((M, K), name="x", dtype=dtype)
    w = te.placeholder((N, K), name="w", dtype=dtype)
    b = te.placeholder((N,), name="b", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    dense = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), name="dense")
    c = math.sqrt(2.0 / math.pi)

    def gelu(i, j):
        v = dense[i, j] + b[j]
        inner = te.const(c, dtype) * (v + te.const(0.044715, dtype) * v * v * v)
        return te.const(0.5, dtype) * v * (te.const(1.0, dtype) + te.tanh(inner))

    y = te.compute((M, N), gelu, name="gelu")
    return x, w, b, y
