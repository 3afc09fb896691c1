"""Convolution variants and norms as users write them: 1-d and 3-d convolutions, grouped,
dilated, strided and transposed 2-d convolutions, NHWC layout, a convolution with a
batch-norm + ReLU epilogue, and RMS norm."""
from tvm import te

import autosched


def _padded(data, pads):
    """`data` zero-padded by pads[d] on both sides of axis d (pads: one per axis)."""
    shape = [int(s) for s in data.shape]
    if not any(pads):
        return data

    def element(*idx):
        inside = te.all(*[te.all(i >= p, i < s + p)
                          for i, s, p in zip(idx, shape, pads) if p])
        src = tuple(i - p for i, p in zip(idx, pads))
        return te.if_then_else(inside, data[src], te.const(0.0, data.dtype))

    return te.compute([s + 2 * p for s, p in zip(shape, pads)], element, name="pad")


def _out(size, kernel, stride, pad, dilation=1):
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


@autosched.workload
def conv1d(N=4, C=64, L=512, F=128, R=5, stride=1, pad=2, dtype="float32"):
    data = te.placeholder((N, C, L), name="data", dtype=dtype)
    weight = te.placeholder((F, C, R), name="weight", dtype=dtype)
    padded = _padded(data, (0, 0, pad))
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R), name="r")
    out = te.compute(
        (N, F, _out(L, R, stride, pad)),
        lambda n, f, x: te.sum(padded[n, c, x * stride + r] * weight[f, c, r], axis=[c, r]),
        name="conv1d")
    return data, weight, out


@autosched.workload
def conv3d(N=1, C=32, D=16, H=28, W=28, F=32, R=3, pad=1, dtype="float32"):
    data = te.placeholder((N, C, D, H, W), name="data", dtype=dtype)
    weight = te.placeholder((F, C, R, R, R), name="weight", dtype=dtype)
    padded = _padded(data, (0, 0, pad, pad, pad))
    c = te.reduce_axis((0, C), name="c")
    rz, ry, rx = (te.reduce_axis((0, R), name=n) for n in ("rz", "ry", "rx"))
    out = te.compute(
        (N, F, _out(D, R, 1, pad), _out(H, R, 1, pad), _out(W, R, 1, pad)),
        lambda n, f, z, y, x: te.sum(padded[n, c, z + rz, y + ry, x + rx]
                                     * weight[f, c, rz, ry, rx], axis=[c, rz, ry, rx]),
        name="conv3d")
    return data, weight, out


@autosched.workload
def conv2d_general(N=1, C=64, H=56, W=56, F=64, R=3, stride=1, pad=1, dilation=1, groups=1,
                   dtype="float32"):
    """NCHW convolution with stride, dilation and groups (torch's Conv2d); weight
    (F, C / groups, R, R)."""
    cg, fg = C // groups, F // groups
    data = te.placeholder((N, C, H, W), name="data", dtype=dtype)
    weight = te.placeholder((F, cg, R, R), name="weight", dtype=dtype)
    padded = _padded(data, (0, 0, pad, pad))
    c = te.reduce_axis((0, cg), name="c")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, R), name="s")
    out = te.compute(
        (N, F, _out(H, R, stride, pad, dilation), _out(W, R, stride, pad, dilation)),
        lambda n, f, y, x: te.sum(
            padded[n, f // fg * cg + c, y * stride + r * dilation, x * stride + s * dilation]
            * weight[f, c, r, s], axis=[c, r, s]),
        name="conv")
    return data, weight, out


@autosched.workload
def conv2d_transpose(N=1, C=64, H=28, W=28, F=32, R=4, stride=2, pad=1, dtype="float32"):
    """Transposed NCHW convolution (torch's ConvTranspose2d, weight (C, F, R, R)): the
    input spread `stride` apart, padded by R - 1 - pad, convolved with the flipped
    kernel."""
    data = te.placeholder((N, C, H, W), name="data", dtype=dtype)
    weight = te.placeholder((C, F, R, R), name="weight", dtype=dtype)
    edge = R - 1 - pad
    sh, sw = (H - 1) * stride + 1 + 2 * edge, (W - 1) * stride + 1 + 2 * edge

    def spread(n, c, y, x):
        yy, xx = y - edge, x - edge
        on = te.all(yy >= 0, xx >= 0, yy % stride == 0, xx % stride == 0,
                    yy < (H - 1) * stride + 1, xx < (W - 1) * stride + 1)
        return te.if_then_else(on, data[n, c, yy // stride, xx // stride],
                               te.const(0.0, dtype))

    spread_data = te.compute((N, C, sh, sw), spread, name="spread")
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, R), name="s")
    out = te.compute(
        (N, F, sh - R + 1, sw - R + 1),
        lambda n, f, y, x: te.sum(spread_data[n, c, y + r, x + s]
                                  * weight[c, f, R - 1 - r, R - 1 - s], axis=[c, r, s]),
        name="conv_transpose")
    return data, weight, out


@autosched.workload
def conv2d_nhwc(N=1, H=56, W=56, C=64, F=64, R=3, pad=1, dtype="float32"):
    """NHWC convolution, weight HWIO (R, R, C, F)."""
    data = te.placeholder((N, H, W, C), name="data", dtype=dtype)
    weight = te.placeholder((R, R, C, F), name="weight", dtype=dtype)
    padded = _padded(data, (0, pad, pad, 0))
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, R), name="s")
    out = te.compute(
        (N, _out(H, R, 1, pad), _out(W, R, 1, pad), F),
        lambda n, y, x, f: te.sum(padded[n, y + r, x + s, c] * weight[r, s, c, f],
                                  axis=[c, r, s]),
        name="conv_nhwc")
    return data, weight, out


@autosched.workload
def conv2d_bn_relu(N=1, C=64, H=56, W=56, F=64, R=3, pad=1, eps=1e-5, dtype="float32"):
    """3x3 convolution, then inference batch norm (running mean and variance, scale
    and shift per output channel) and ReLU, fused."""
    data = te.placeholder((N, C, H, W), name="data", dtype=dtype)
    weight = te.placeholder((F, C, R, R), name="weight", dtype=dtype)
    mean = te.placeholder((F,), name="mean", dtype=dtype)
    var = te.placeholder((F,), name="var", dtype=dtype)
    gamma = te.placeholder((F,), name="gamma", dtype=dtype)
    beta = te.placeholder((F,), name="beta", dtype=dtype)
    padded = _padded(data, (0, 0, pad, pad))
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, R), name="s")
    conv = te.compute(
        (N, F, _out(H, R, 1, pad), _out(W, R, 1, pad)),
        lambda n, f, y, x: te.sum(padded[n, c, y + r, x + s] * weight[f, c, r, s],
                                  axis=[c, r, s]),
        name="conv")
    out = te.compute(
        conv.shape,
        lambda n, f, y, x: te.max(
            (conv[n, f, y, x] - mean[f]) * te.rsqrt(var[f] + te.const(eps, dtype)) * gamma[f]
            + beta[f], te.const(0.0, dtype)),
        name="bn_relu")
    return data, weight, mean, var, gamma, beta, out


@autosched.workload
def rms_norm(M=1024, N=768, eps=1e-6, dtype="float32"):
    """y = x / sqrt(mean(x^2) + eps) * weight, along the last axis."""
    x = te.placeholder((M, N), name="x", dtype=dtype)
    weight = te.placeholder((N,), name="weight", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    sq = te.compute((M,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="sq")
    y = te.compute(
        (M, N),
        lambda i, j: x[i, j] * te.rsqrt(sq[i] / N + te.const(eps, dtype)) * weight[j],
        name="rms_norm")
    return x, weight, y
