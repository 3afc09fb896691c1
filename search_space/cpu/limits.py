"""The CPU target's limit check on a scheduled module.

Buffers in "local" scope live on the stack of every thread that runs a tile. The
sketches only put small register-tile caches there; the check holds any module to
a bound well inside a thread's stack, measured after TVM compacts each buffer to
the region its tile touches.
"""
from __future__ import annotations

MAX_LOCAL_BYTES = 1 << 20


def check_stack(mod) -> str | None:
    """None when every function's stack buffers fit in MAX_LOCAL_BYTES, else why not."""
    for gvar, func in _compacted(mod).functions.items():
        local = _local_bytes(func.body)
        if local > MAX_LOCAL_BYTES:
            return (f"{gvar.name_hint}: {local} bytes of stack buffers per thread "
                    f"(limit {MAX_LOCAL_BYTES})")
    return None


def _compacted(mod):
    import tvm
    from tvm.s_tir import transform as st

    return tvm.transform.Sequential([
        st.LowerInitBlock(), st.PlanAndUpdateBufferAllocationLocation(),
        st.ConvertBlocksToOpaque(), st.CompactBufferAllocation()])(mod)


def _local_bytes(stmt) -> int:
    """Bytes of local-scope buffers allocated by the blocks under `stmt`."""
    kind = type(stmt).__name__
    if kind == "SeqStmt":
        return sum(_local_bytes(s) for s in stmt.seq)
    if kind == "SBlockRealize":
        return _local_bytes(stmt.block)
    total = 0
    if kind == "SBlock":
        for buf in stmt.alloc_buffers:
            if buf.scope() == "local":
                elems = 1
                for dim in buf.shape:
                    elems *= int(dim)
                total += elems * _dtype_bytes(buf.dtype)
    for attr in ("body", "then_case", "else_case"):
        child = getattr(stmt, attr, None)
        if child is not None:
            total += _local_bytes(child)
    return total


def _dtype_bytes(dtype) -> int:
    import tvm

    t = tvm.DataType(str(dtype))
    return max(1, t.bits * t.lanes // 8)
