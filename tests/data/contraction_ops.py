"""Contractions written the way users write them (topi), beyond the examples: the
micro-kernel rules must fit them by analysis alone."""
from tvm import te, topi

import autosched


def _t(shape, name, dtype):
    return te.placeholder(shape, name=name, dtype=dtype)


@autosched.workload
def conv1d(C=8, W=30, F=32, dtype="float32"):
    data, weight = _t((2, C, W), "data", dtype), _t((F, C, 3), "weight", dtype)
    return data, weight, topi.nn.conv1d_ncw(data, weight, 1, 1, 1)


@autosched.workload
def conv3d(C=4, D=6, H=6, W=8, F=16, dtype="float32"):
    data, weight = _t((1, C, D, H, W), "data", dtype), _t((F, C, 3, 3, 3), "weight", dtype)
    return data, weight, topi.nn.conv3d_ncdhw(data, weight, 1, 1, 1, 1)


@autosched.workload
def conv2d_strided(C=8, H=17, W=17, F=32, dtype="float32"):
    data, weight = _t((1, C, H, W), "data", dtype), _t((F, C, 3, 3), "weight", dtype)
    return data, weight, topi.nn.conv2d_nchw(data, weight, 2, 1, 1)


@autosched.workload
def conv2d_dilated(C=8, H=12, W=12, F=16, dtype="float32"):
    data, weight = _t((1, C, H, W), "data", dtype), _t((F, C, 3, 3), "weight", dtype)
    return data, weight, topi.nn.conv2d_nchw(data, weight, 1, 2, 2)


@autosched.workload
def conv2d_grouped(C=16, H=10, W=10, F=32, G=2, dtype="float32"):
    data, weight = _t((1, C, H, W), "data", dtype), _t((F, C // G, 3, 3), "weight", dtype)
    return data, weight, topi.nn.group_conv2d_nchw(data, weight, 1, 1, 1, G)


@autosched.workload
def conv2d_nhwc(C=8, H=10, W=10, F=32, dtype="float32"):
    data, weight = _t((1, H, W, C), "data", dtype), _t((3, 3, C, F), "weight", dtype)
    return data, weight, topi.nn.conv2d_nhwc(data, weight, 1, 1, 1)


@autosched.workload
def conv2d_transposed(C=8, H=7, W=7, F=16, dtype="float32"):
    data, weight = _t((1, C, H, W), "data", dtype), _t((C, F, 4, 4), "weight", dtype)
    return data, weight, topi.nn.conv2d_transpose_nchw(data, weight, (2, 2), (1, 1), dtype,
                                                       (0, 0))


@autosched.workload
def conv_bn_relu(C=8, H=8, W=8, F=32, dtype="float32"):
    data, weight = _t((1, C, H, W), "data", dtype), _t((F, C, 3, 3), "weight", dtype)
    scale, shift = _t((F,), "scale", dtype), _t((F,), "shift", dtype)
    conv = topi.nn.conv2d_nchw(data, weight, 1, 1, 1)
    affine = te.compute(conv.shape, lambda n, f, y, x: conv[n, f, y, x] * scale[f] + shift[f],
                        name="affine")
    return data, weight, scale, shift, topi.nn.relu(affine)


@autosched.workload
def attention_scores(H=4, S=40, D=24, dtype="float32"):
    q, k = _t((H, S, D), "q", dtype), _t((H, S, D), "k", dtype)
    return q, k, topi.nn.batch_matmul(q, k)


@autosched.workload
def dense_relu(M=33, N=80, K=40, dtype="float32"):
    x, w = _t((M, K), "x", dtype), _t((N, K), "w", dtype)
    return x, w, topi.nn.relu(topi.nn.dense(x, w))


@autosched.workload
def conv1d_grouped(C=24, W=20, F=48, G=3, dtype="float32"):
    """A grouped 1-d convolution written by hand, the group as its own loop over the
    data's channel blocks (torch's Conv1d(groups=G), no padding)."""
    cg, fg = C // G, F // G
    data, weight = _t((2, C, W), "data", dtype), _t((F, cg, 3), "weight", dtype)
    c = te.reduce_axis((0, cg), name="c")
    k = te.reduce_axis((0, 3), name="k")
    out = te.compute((2, F, W - 2), lambda n, f, x: te.sum(
        data[n, f // fg * cg + c, x + k] * weight[f, c, k], axis=[c, k]), name="conv1d_g")
    return data, weight, out


@autosched.workload
def conv1d_transposed(C=8, W=9, F=16, R=6, S=3, dtype="float32"):
    """topi's 1-d transposed convolution, stride 3 (ConvTranspose1d)."""
    data, weight = _t((2, C, W), "data", dtype), _t((C, F, R), "weight", dtype)
    return data, weight, topi.nn.conv1d_transpose_ncw(data, weight, S, 0, dtype, 0)


@autosched.workload
def conv1d_upsampled(C=8, W=9, F=16, R=4, dtype="float32"):
    """A convolution over the input upsampled 2x by repetition: its index (x + k) // 2
    looks like a transposed convolution's, but every tap meets data."""
    data, weight = _t((2, C, W), "data", dtype), _t((F, C, R), "weight", dtype)
    c = te.reduce_axis((0, C), name="c")
    k = te.reduce_axis((0, R), name="k")
    out = te.compute((2, F, 2 * W - R + 1), lambda n, f, x: te.sum(
        data[n, c, (x + k) // 2] * weight[f, c, k], axis=[c, k]), name="conv_up")
    return data, weight, out


@autosched.workload
def conv2d_transposed_bias_relu(C=8, H=5, W=6, F=32, dtype="float32"):
    """A transposed convolution with its bias and ReLU, as a decoder layer writes it."""
    data, weight = _t((1, C, H, W), "data", dtype), _t((C, F, 4, 4), "weight", dtype)
    bias = _t((F,), "bias", dtype)
    up = topi.nn.conv2d_transpose_nchw(data, weight, (2, 2), (1, 1), dtype, (0, 0))
    out = te.compute(up.shape, lambda n, f, y, x: te.max(up[n, f, y, x] + bias[f], 0.0),
                     name="bias_relu")
    return data, weight, bias, out
