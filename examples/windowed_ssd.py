"""Block matching by patch SSD, as in image denoising (non-local means, BM3D): for every
pixel (i, j) of a region and every offset (dy, dx) of a search window, the sum of squared
differences between the 8x8 patch at (i, j) and the patch at (i + dy, j + dx).

    out[i, j, dy, dx] = sum_{u, v} (X[i + u, j + v] - X[i + dy + u, j + dx + v])^2

A reduction over two axes whose reads are windows shifted by spatial and reduction
indices at once (no operand misses a whole spatial axis the way a matmul's do): no
contraction-specific rule describes it, so it exercises the general space."""
from tvm import te

import autosched


@autosched.workload
def windowed_ssd(R=64, S=12, P=8, dtype="float32"):
    """R x R pixels, an S x S search window, P x P patches; X carries the margin the
    window and the patch need (R + S + P - 2 pixels a side)."""
    side = R + S + P - 2
    x = te.placeholder((side, side), name="X", dtype=dtype)
    u = te.reduce_axis((0, P), name="u")
    v = te.reduce_axis((0, P), name="v")

    def ssd(i, j, dy, dx):
        d = x[i + u, j + v] - x[i + dy + u, j + dx + v]
        return te.sum(d * d, axis=[u, v])

    return x, te.compute((R, R, S, S), ssd, name="ssd")
