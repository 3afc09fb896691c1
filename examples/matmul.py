"""Dense matrix multiplication C = A @ B (fp32 by default)."""
from tvm import te

import autosched


@autosched.workload
def matmul(M=512, N=512, K=512, dtype="float32"):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C
