"""2-D convolutions in NCHW layout: a dense 3x3 convolution and a depthwise one."""
from tvm import te

import autosched


def _pad(data, pad):
    n, c, h, w = (int(s) for s in data.shape)
    return te.compute(
        (n, c, h + 2 * pad, w + 2 * pad),
        lambda b, ch, y, x: te.if_then_else(
            te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
            data[b, ch, y - pad, x - pad], te.const(0.0, data.dtype)),
        name="pad")


@autosched.workload
def conv2d(N=1, C=64, H=56, W=56, F=64, R=3, S=3, pad=1, dtype="float32"):
    data = te.placeholder((N, C, H, W), name="data", dtype=dtype)
    weight = te.placeholder((F, C, R, S), name="weight", dtype=dtype)
    padded = _pad(data, pad)
    OH, OW = H + 2 * pad - R + 1, W + 2 * pad - S + 1
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    out = te.compute(
        (N, F, OH, OW),
        lambda n, f, y, x: te.sum(padded[n, c, y + r, x + s] * weight[f, c, r, s], axis=[c, r, s]),
        name="conv")
    return data, weight, out


@autosched.workload
def depthwise_conv2d(N=1, C=128, H=56, W=56, R=3, S=3, pad=1, dtype="float32"):
    data = te.placeholder((N, C, H, W), name="data", dtype=dtype)
    weight = te.placeholder((C, R, S), name="weight", dtype=dtype)
    padded = _pad(data, pad)
    OH, OW = H + 2 * pad - R + 1, W + 2 * pad - S + 1
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    out = te.compute(
        (N, C, OH, OW),
        lambda n, ch, y, x: te.sum(padded[n, ch, y + r, x + s] * weight[ch, r, s], axis=[r, s]),
        name="depthwise")
    return data, weight, out
