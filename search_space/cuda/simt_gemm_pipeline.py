"""The build pipeline of the SIMT GEMM sketch's double-buffered kernels: TVM's default
s_tir pipeline with one pass before its barrier planning.

Why: TVM's barrier planning (`s_tir.transform.ThreadSync`) treats any two accesses to one
shared buffer inside a loop as conflicting unless they have the same index, so a K loop
that stores the next tile into one copy of a double-buffered tile and reads the current
tile from the other gets two `__syncthreads` per K step where one suffices. TVM's own
double buffering (`InjectDoubleBuffer`) tells ThreadSync which stores fill the other
copy by wrapping them in a `double_buffer_write` attribute: a read that follows such a
store in the same iteration is no conflict, the loop-carried one still is. Schedules
cannot make that attribute, so the sketch marks the blocks that store the next tile with
the block annotation `MARK` (TVM keeps `pragma_` annotations as attributes), and
`mark_double_buffer_writes` turns each mark inside a serial loop -- the pipelined K loop,
whose stores go to the copy the same iteration does not read -- into TVM's attribute; a
mark outside any serial loop (the pipeline's prologue and epilogue, where a store may be
followed by a read of the same copy) is only removed. Everything else is TVM's default
pipeline itself (`tvm/s_tir/pipeline.py`), not a copy of it.

A module whose functions carry `PIPELINE_ATTR` = `PIPELINE_NAME` is built with it by
`autosched.measure.cuda.compiler`, which calls `register_pipeline()` first.
"""
from __future__ import annotations

from .common import PIPELINE_ATTR

PIPELINE_NAME = "autosched.simt_double_buffer"
MARK = "pragma_autosched_double_buffer_write"
_TVM_ATTR = "double_buffer_write"


def register_pipeline() -> None:
    """Make `PIPELINE_NAME` known to `tvm.compile` in this process (idempotent)."""
    from tvm.tirx import compilation_pipeline

    if PIPELINE_NAME not in compilation_pipeline.PIPELINE_MAP:
        compilation_pipeline.register_tir_pipeline(PIPELINE_NAME, _pipeline)


def _stored_var(stmt):
    """The data variable of the first buffer `stmt` stores to, or None."""
    from tvm import tirx

    if isinstance(stmt, tirx.BufferStore):
        return stmt.buffer.data
    for child in _children(stmt):
        var = _stored_var(child)
        if var is not None:
            return var
    return None


def _children(stmt) -> list:
    from tvm import tirx

    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, (tirx.For, tirx.While, tirx.AttrStmt)):
        return [stmt.body]
    if isinstance(stmt, tirx.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    return []


def _rewrite(stmt, in_loop: bool):
    """`stmt` with its marks turned into TVM's attribute (inside a serial loop) or
    removed (outside); the same object where nothing changed."""
    from tvm import tirx

    if isinstance(stmt, tirx.AttrStmt):
        body = _rewrite(stmt.body, in_loop)
        if str(stmt.attr_key) == MARK:
            var = _stored_var(body)
            return tirx.AttrStmt(var, _TVM_ATTR, 1, body) if in_loop and var is not None else body
        return stmt if body.same_as(stmt.body) else tirx.AttrStmt(
            stmt.node, stmt.attr_key, stmt.value, body)
    if isinstance(stmt, tirx.SeqStmt):
        seq = [_rewrite(s, in_loop) for s in stmt.seq]
        return stmt if all(a.same_as(b) for a, b in zip(seq, stmt.seq)) else tirx.SeqStmt(seq)
    if isinstance(stmt, tirx.For):
        body = _rewrite(stmt.body, in_loop or stmt.kind == tirx.ForKind.SERIAL)
        return stmt if body.same_as(stmt.body) else tirx.For(
            stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding,
            stmt.annotations, stmt.step)
    if isinstance(stmt, tirx.IfThenElse):
        then = _rewrite(stmt.then_case, in_loop)
        other = None if stmt.else_case is None else _rewrite(stmt.else_case, in_loop)
        if then.same_as(stmt.then_case) and (other is None or other.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(stmt.condition, then, other)
    if isinstance(stmt, tirx.While):
        body = _rewrite(stmt.body, in_loop)
        return stmt if body.same_as(stmt.body) else tirx.While(stmt.condition, body)
    return stmt


def mark_double_buffer_writes():
    """The pass described in the module docstring."""
    import tvm

    def run(func, _mod, _ctx):
        body = _rewrite(func.body, False)
        return func if body.same_as(func.body) else func.with_body(body)

    return tvm.tirx.transform.prim_func_pass(run, opt_level=0,
                                             name="autosched.MarkDoubleBufferWrites")


def _pipeline():
    """TVM's own default s_tir pipeline, run with `mark_double_buffer_writes` placed
    right before its first barrier planning pass. The pipeline builds its pass list when
    it runs, looking `ThreadSync` up in `s_tir.transform`; for that run the name answers
    with the marking pass followed by TVM's ThreadSync, so the rest is TVM's, whatever
    its version holds."""
    import tvm
    from tvm import s_tir
    from tvm.s_tir.pipeline import default_s_tir_pipeline

    lower, finalize_host, finalize_device = default_s_tir_pipeline()
    thread_sync = s_tir.transform.ThreadSync

    def sync_after_marking(scope):
        if scope == "shared":   # the first barrier planning pass of the pipeline
            return tvm.transform.Sequential([mark_double_buffer_writes(), thread_sync(scope)])
        return thread_sync(scope)

    @tvm.transform.module_pass(opt_level=0)
    def _run(mod, _ctx):
        s_tir.transform.ThreadSync = sync_after_marking
        try:
            return lower(mod)
        finally:
            s_tir.transform.ThreadSync = thread_sync

    return _run, finalize_host, finalize_device


__all__ = ["MARK", "PIPELINE_ATTR", "PIPELINE_NAME", "mark_double_buffer_writes",
           "register_pipeline"]
