"""Reductions of a whole tensor to few values: a norm per batch (Ansor's `norm_bmn`),
the sum of a matrix or of a vector, and the largest magnitude of a tensor.

With one output per batch there are no rows to share out among the cores: a fast
kernel splits the reduction itself (a partial result per core and vector lane, then one
combine), which is what the `split_reduce` sketches do.
"""
from tvm import te

import autosched


@autosched.workload
def norm_bmn(B=1, M=1024, N=1024, dtype="float32"):
    """sqrt(sum(A[b, m, n]^2)) over m and n, one value per batch."""
    a = te.placeholder((B, M, N), name="A", dtype=dtype)
    m = te.reduce_axis((0, M), name="m")
    n = te.reduce_axis((0, N), name="n")
    sq = te.compute((B,), lambda b: te.sum(a[b, m, n] * a[b, m, n], axis=[m, n]), name="sq")
    out = te.compute((B,), lambda b: te.sqrt(sq[b]), name="norm")
    return a, out


@autosched.workload
def matrix_sum(M=4096, N=4096, dtype="float32"):
    """The sum of every element of an M x N matrix, as one value."""
    a = te.placeholder((M, N), name="A", dtype=dtype)
    m = te.reduce_axis((0, M), name="m")
    n = te.reduce_axis((0, N), name="n")
    return a, te.compute((1,), lambda _: te.sum(a[m, n], axis=[m, n]), name="total")


@autosched.workload
def vector_sum(N=1000003, dtype="float32"):
    """The sum of a vector (a length no vector width divides, by default)."""
    a = te.placeholder((N,), name="A", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    return a, te.compute((1,), lambda _: te.sum(a[k], axis=k), name="total")


@autosched.workload
def max_abs(B=2, M=255, N=1023, dtype="float32"):
    """The largest magnitude of each batch (a max reduction over two axes), with the
    magnitude computed by its own elementwise stage first."""
    a = te.placeholder((B, M, N), name="A", dtype=dtype)
    mag = te.compute((B, M, N), lambda b, i, j: te.abs(a[b, i, j]), name="mag")
    i = te.reduce_axis((0, M), name="i")
    j = te.reduce_axis((0, N), name="j")
    return a, te.compute((B,), lambda b: te.max(mag[b, i, j], axis=[i, j]), name="amax")


@autosched.workload
def column_min(M=4097, N=3, dtype="float32"):
    """The smallest value of each of a few columns: the reduced axis is the outer one."""
    a = te.placeholder((M, N), name="A", dtype=dtype)
    k = te.reduce_axis((0, M), name="k")
    return a, te.compute((N,), lambda j: te.min(a[k, j], axis=k), name="colmin")
