"""Op file: the memory-efficient GELU backward as one fused autosched workload.

    autosched tune autosched/runtime/memeff/workloads.py --arg M=1024 --arg N=1024
    autosched export autosched/runtime/memeff/workloads.py -o memeff_lib --arg M=1024 ...

`memeff_gelu_grad` computes what kernels.gelu_backward computes with a dozen eager
torch operators, in one pass over the elements: from the saved GELU output y and its
1-byte branch mask, the table coordinate sqrt(y - y*), a linear interpolation in the
branch's derivative table, times the incoming gradient. Its inputs, in order: grad_y, y,
mask (uint8, 0 or 1), table and slope (kernels.device_tables: 2 x TABLE_SIZE
entries each). The numerics are the torch kernel's, so its tolerance (kernels.py)
holds for this kernel too.
`library.memeff_library_kernels` turns an exported library of it into the Kernel
the runtime swaps in.
"""
import autosched
from autosched.runtime.memeff.kernels import TABLE_SIZE, gelu_tables
from tvm import te, tirx


@autosched.workload(torch_reference="autosched.runtime.memeff.kernels:gelu_grad_reference")
def memeff_gelu_grad(M=1024, N=1024, approximate="none", dtype="float32"):
    tables = gelu_tables(approximate)
    n = TABLE_SIZE
    grad = te.placeholder((M, N), name="grad_y", dtype=dtype)
    y = te.placeholder((M, N), name="y", dtype=dtype)
    mask = te.placeholder((M, N), name="mask", dtype="uint8")
    table = te.placeholder((2 * n,), name="table", dtype=dtype)
    slope = te.placeholder((2 * n,), name="slope", dtype=dtype)

    def c(v):
        return tirx.const(v, dtype)

    def f(i, j):
        right = mask[i, j] != tirx.const(0, "uint8")
        s = te.sqrt(te.max(y[i, j] - c(tables.y_min), c(0.0)))
        pos = te.min(s * tirx.Select(right, c(1.0 / tables.h_right), c(1.0 / tables.h_left)),
                     c(n - 1))
        k = te.min(pos.astype("int32"), tirx.const(n - 2, "int32"))
        frac = pos - k.astype(dtype)
        idx = k + tirx.Select(right, tirx.const(n, "int32"), tirx.const(0, "int32"))
        return grad[i, j] * (table[idx] + frac * slope[idx])

    return grad, y, mask, table, slope, te.compute((M, N), f, name="grad_x")
