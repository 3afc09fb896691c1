"""Row softmax and layer normalisation: reductions along the last axis."""
from tvm import te

import autosched


@autosched.workload
def softmax(M=1024, N=1024, dtype="float32"):
    x = te.placeholder((M, N), name="x", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    row_max = te.compute((M,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    exp = te.compute((M, N), lambda i, j: te.exp(x[i, j] - row_max[i]), name="exp")
    k2 = te.reduce_axis((0, N), name="k2")
    row_sum = te.compute((M,), lambda i: te.sum(exp[i, k2], axis=k2), name="row_sum")
    y = te.compute((M, N), lambda i, j: exp[i, j] / row_sum[i], name="softmax")
    return x, y


@autosched.workload
def layer_norm(M=1024, N=768, eps=1e-5, dtype="float32"):
    x = te.placeholder((M, N), name="x", dtype=dtype)
    gamma = te.placeholder((N,), name="gamma", dtype=dtype)
    beta = te.placeholder((N,), name="beta", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    total = te.compute((M,), lambda i: te.sum(x[i, k1], axis=k1), name="total")
    mean = te.compute((M,), lambda i: total[i] / N, name="mean")
    k2 = te.reduce_axis((0, N), name="k2")
    sq = te.compute((M,), lambda i: te.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]), axis=k2),
                    name="sq")
    var = te.compute((M,), lambda i: sq[i] / N, name="var")
    y = te.compute(
        (M, N),
        lambda i, j: (x[i, j] - mean[i]) * te.rsqrt(var[i] + te.const(eps, dtype)) * gamma[j] + beta[j],
        name="layer_norm")
    return x, gamma, beta, y
