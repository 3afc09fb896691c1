"""Divisions by a value that stays fixed along a block's innermost axis, as
multiplications by its reciprocal: softmax's exp / row_sum[i], a norm's x / n[i].

The reciprocal is loop-invariant in the vector loop, so LLVM hoists it: one division
per row instead of one per element (a vector division costs about ten
multiplications). Results differ from the division by rounding only (within half an
ulp of the reciprocal, then one multiplication).
"""
from __future__ import annotations

from ..blocks import blocks
from ..tir import expr_dtype, free_vars


def _innermost_vars(func) -> list:
    """The last iter var of every block of `func` (the axis a schedule vectorises)."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    found = (sch.get(b) for b in blocks(sch))
    return [block.iter_vars[-1].var for block in found if block.iter_vars]


def reciprocal_form(func):
    """`func` with every float division x / d, where d does not use its block's last
    iter var (but x does), written x * (1 / d); `func` itself when there is none."""
    import tvm_ffi
    from tvm import tirx

    inner = _innermost_vars(func)

    def uses_inner(expr) -> bool:
        return any(v.same_as(i) for v in free_vars(expr) for i in inner)

    def swap(div):
        if not expr_dtype(div.b).startswith("float") or uses_inner(div.b) \
                or not uses_inner(div.a):
            return div
        return div.a * (tirx.const(1.0, expr_dtype(div.b)) / div.b)

    return tvm_ffi.structural_map(func, ((tirx.Div, swap),))
