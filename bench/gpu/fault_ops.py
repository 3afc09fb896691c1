"""The device check's fault test: a kernel for the `scale` workload that reads far
outside its input (an illegal address on any GPU, which poisons the CUDA context), put
into a bundle ahead of a correct kernel of the same workload. The runner must record the
first as a run_error and measure the second in a fresh context."""
from tvm import te

import autosched

# 2**28 float32 elements (1 GiB) past the end of the input: never mapped memory
FAR = 1 << 28


@autosched.workload
def scale(N=1024):
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: A[i] * 2.0, name="B")
    return A, B


def out_of_bounds(N=1024):
    """The same signature as `scale`, reading A[i + FAR]: a kernel with a wild load."""
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: A[i + FAR] * 2.0, name="B")
    return te.create_prim_func([A, B])
