"""Workloads beyond the examples: the CPU rules must fit them by analysis alone."""
from tvm import te, topi

import autosched


@autosched.workload
def row_sum(M=16, N=96, dtype="float32"):
    x = te.placeholder((M, N), name="x", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    return x, te.compute((M,), lambda i: te.sum(x[i, k], axis=k), name="s")


@autosched.workload
def relu(M=16, N=100, dtype="float32"):
    x = te.placeholder((M, N), name="x", dtype=dtype)
    return x, te.compute((M, N), lambda i, j: te.max(x[i, j], te.const(0, dtype)), name="r")


@autosched.workload
def matmul_bias_relu(M=20, N=60, K=14, dtype="float32"):
    a = te.placeholder((M, K), name="a", dtype=dtype)
    b = te.placeholder((K, N), name="b", dtype=dtype)
    bias = te.placeholder((N,), name="bias", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    d = te.compute((M, N), lambda i, j: c[i, j] + bias[j], name="d")
    return a, b, bias, te.compute((M, N), lambda i, j: te.max(d[i, j], te.const(0, dtype)),
                                  name="e")


@autosched.workload
def two_matmuls(M=16, N=32, K=16, dtype="float32"):
    a = te.placeholder((M, K), name="a", dtype=dtype)
    b = te.placeholder((K, N), name="b", dtype=dtype)
    w = te.placeholder((N, K), name="w", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    n = te.reduce_axis((0, N), name="n")
    return a, b, w, te.compute((M, K), lambda i, j: te.sum(c[i, n] * w[n, j], axis=n), name="d")


@autosched.workload
def conv_relu(C=4, H=8, W=8, F=16, dtype="float32"):
    data = te.placeholder((1, C, H, W), name="data", dtype=dtype)
    weight = te.placeholder((F, C, 3, 3), name="weight", dtype=dtype)
    return data, weight, topi.nn.relu(topi.nn.conv2d_nchw(data, weight, 1, 1, 1))
