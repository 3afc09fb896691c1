"""Memory-efficient kernels from an exported autosched library (of workloads.py).

    library = autosched.torch.load_library("memeff_lib")
    kernels = memeff_library_kernels(library)             # {"gelu": Kernel} (or {})
    plan = autosched.runtime.plan(model, inputs, "40%", kernels=kernels)
    trained = autosched.runtime.apply(model, plan, kernels)

The fused `memeff_gelu_grad` kernel replaces the eager backward of the memory-efficient
GELU for the shapes (rows x last dimension), GELU variant and dtype the library was built
for; any other call runs the torch kernel, so a model with several GELU widths stays
correct. The Kernel's id names the records the kernels came from, which plans report.
A library built from another definition of the workload (an older table layout or
formula) is refused: its task keys differ from the current definition's.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .kernels import Kernel, device_tables, gelu_backward, gelu_forward

GELU_WORKLOAD = "memeff_gelu_grad"
OP_FILE = str(Path(__file__).with_name("workloads.py"))


def memeff_library_kernels(library) -> dict:
    """{"gelu": Kernel} when `library` (what `autosched.torch.load_library(DIR)` returned)
    has `memeff_gelu_grad` kernels, else {}. Raises autosched.torch's LibraryError for
    kernels built from another definition of the workload."""
    entries = library.entries(GELU_WORKLOAD)
    if not entries:
        return {}
    _check_current(entries, library.path)
    variants = {(e.args["M"], e.args["N"], e.args["approximate"], e.args["dtype"])
                for e in entries}
    ids = sorted({str(e.record_id) for e in entries if e.record_id is not None})
    kernel_id = f"{GELU_WORKLOAD}#" + ",".join(ids or ["unrecorded"])
    return {"gelu": Kernel(kernel_id, gelu_forward,
                           _fused_gelu_backward(library[GELU_WORKLOAD], variants))}


def _check_current(entries, library_dir) -> None:
    """Every kernel must come from today's definition of the workload (same task key)."""
    from autosched.torch.errors import LibraryError
    from autosched.workload import load_op_file, make_task

    wdef = load_op_file(OP_FILE)[GELU_WORKLOAD]
    for e in entries:
        if make_task(wdef, dict(e.args)).key != e.task_key:
            raise LibraryError(
                f"{library_dir}: its {GELU_WORKLOAD} kernel ({e.args}) was built from another "
                f"definition of the workload; tune and export {OP_FILE} again")


def _fused_gelu_backward(op, variants: set):
    def backward(grad_y, y, mask, approximate: str = "none"):
        n = y.shape[-1] if y.dim() else 1
        rows = y.numel() // max(n, 1)
        dtype = str(y.dtype).removeprefix("torch.")
        if (rows, n, approximate, dtype) not in variants:
            return gelu_backward(grad_y, y, mask, approximate)
        table, slope = device_tables(approximate, y.dtype, str(y.device))
        grad_x = op(grad_y.reshape(rows, n).contiguous(), y.reshape(rows, n).contiguous(),
                    mask.reshape(rows, n).contiguous().view(torch.uint8), table, slope)
        return grad_x.reshape(y.shape)

    return backward
