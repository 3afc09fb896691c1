"""Batched matrix multiplication, as in attention scores: C[b] = A[b] @ B[b]."""
from tvm import te

import autosched


@autosched.workload
def batch_matmul(B=12, M=128, N=128, K=64, dtype="float32"):
    a = te.placeholder((B, M, K), name="A", dtype=dtype)
    b = te.placeholder((B, K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((B, M, N), lambda n, i, j: te.sum(a[n, i, k] * b[n, k, j], axis=k), name="C")
    return a, b, c
