"""The dtypes the model path generates kernels for, and how each computes.

A workload's ``dtype`` parameter is the dtype of its tensors, inputs and output alike.
For the half types (float16, bfloat16) the kernel does its arithmetic in float32: it
casts its inputs in, accumulates sums (matmul, convolution, the row sums of softmax and
layer norm) and evaluates transcendental functions in float32, and casts the result to
``dtype`` once at the end, as torch's own CPU and CUDA kernels of these operators do.
So a half kernel and torch differ by float32 rounding in another order plus the final
rounding to the half type, and `TWIN_TOLERANCE` is sized by the half type's precision:
bfloat16 keeps 8 significant bits (a rounding step of up to 2^-8 = 3.9e-3 relative),
float16 11 (2^-11 = 4.9e-4).
"""
from __future__ import annotations

HALF = ("float16", "bfloat16")
DTYPE_NAMES = ("float32",) + HALF

# rtol / atol of a kernel against its torch twin (and the model against eager) per dtype:
# two roundings of the output (ours and torch's) can each be a rounding step apart, so
# the half types get about two of their rounding steps; float32 sums of a few hundred
# terms in another order stay within 1e-4.
TWIN_TOLERANCE = {
    "float32": {"rtol": 1e-4, "atol": 1e-4},
    "float16": {"rtol": 2e-3, "atol": 2e-3},
    "bfloat16": {"rtol": 1.6e-2, "atol": 1.6e-2},
}


def accumulate_dtype(dtype: str) -> str:
    """The dtype a kernel of `dtype` computes in: float32 for the half types, else
    `dtype` itself."""
    return "float32" if dtype in HALF else dtype


def dtype_name(torch_dtype) -> str | None:
    """``"bfloat16"`` for torch.bfloat16; None for a dtype the model path does not
    generate (so the operator stays torch's)."""
    name = str(torch_dtype).removeprefix("torch.")
    return name if name in DTYPE_NAMES else None
