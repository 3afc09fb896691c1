"""A separable 2-D transform of many 8x8 blocks, as in image and video codecs (a DCT
applied block by block): for every block b, T = C X[b], then Y[b] = T Cᵀ. Two small
contractions in a chain, the second reading the first's result; C is the 8x8 transform
matrix shared by all blocks."""
from tvm import te

import autosched


@autosched.workload
def block_transform(B=256, N=8, dtype="float32"):
    x = te.placeholder((B, N, N), name="X", dtype=dtype)
    c = te.placeholder((N, N), name="C", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    t = te.compute((B, N, N), lambda b, i, j: te.sum(c[i, k] * x[b, k, j], axis=k), name="T")
    m = te.reduce_axis((0, N), name="m")
    y = te.compute((B, N, N), lambda b, i, j: te.sum(t[b, i, m] * c[j, m], axis=m), name="Y")
    return x, c, y
