"""Row statistics written the ways users write them: TOPI's softmax, log-softmax and
layer norm, and a hand-written RMS norm."""
from tvm import te, topi

import autosched


@autosched.workload
def topi_softmax(M=4, N=48, dtype="float32"):
    x = te.placeholder((M, N), name="x", dtype=dtype)
    return x, topi.nn.softmax(x, axis=1)


@autosched.workload
def topi_log_softmax(M=4, N=48, dtype="float32"):
    x = te.placeholder((M, N), name="x", dtype=dtype)
    return x, topi.nn.log_softmax(x, axis=1)


@autosched.workload
def topi_layer_norm(M=4, N=48, dtype="float32"):
    x = te.placeholder((M, N), name="x", dtype=dtype)
    gamma = te.placeholder((N,), name="gamma", dtype=dtype)
    beta = te.placeholder((N,), name="beta", dtype=dtype)
    return x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[1], epsilon=1e-5)


@autosched.workload
def rms_norm(M=4, N=48, eps=1e-6, dtype="float32"):
    x = te.placeholder((M, N), name="x", dtype=dtype)
    w = te.placeholder((N,), name="w", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    sq = te.compute((M,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="sq")
    return x, w, te.compute((M, N), lambda i, j: x[i, j] * te.rsqrt(
        sq[i] / te.const(N, dtype) + te.const(eps, dtype)) * w[j], name="y")
