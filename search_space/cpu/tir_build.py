"""Building TIR for program rewrites: buffer regions, iteration variables, loop nests,
variable substitution, and splicing new loop nests into a function's root block."""
from __future__ import annotations


def is_load(expr) -> bool:
    """A buffer load (TVM 0.27 names the node TensorLoad, its buffer `source`)."""
    return type(expr).__name__ in ("TensorLoad", "BufferLoad")


def region(buffer, indices):
    """The one-element region of `buffer` at `indices`."""
    import tvm
    from tvm import tirx

    one = tirx.const(1, "int32")
    return tirx.BufferRegion(buffer, [tvm.ir.Range.from_min_extent(i, one) for i in indices])


def iter_var(name: str, extent: int, reduce: bool):
    """A fresh block iteration variable over [0, extent), spatial or reduction."""
    import tvm
    from tvm import tirx

    var = tirx.Var(name, "int32")
    dom = tvm.ir.Range.from_min_extent(tirx.const(0, "int32"), tirx.const(extent, "int32"))
    return tirx.IterVar(dom, var, 2 if reduce else 0)


def nest(iters, block):
    """`block` in a loop nest binding its iter vars one to one, in order."""
    from tvm import s_tir, tirx

    loops = [tirx.Var(iv.var.name.replace("v_", "") or "i", "int32") for iv in iters]
    stmt = s_tir.SBlockRealize(loops, True, block)
    for loop, iv in reversed(list(zip(loops, iters))):
        stmt = tirx.For(loop, tirx.const(0, "int32"), iv.dom.extent, tirx.ForKind.SERIAL, stmt)
    return stmt


def substitute(expr, pairs):
    """`expr` with each var of `pairs` ((old, new expression), ...) replaced."""
    import tvm_ffi
    from tvm import tirx

    def swap(var):
        for old, new in pairs:
            if var.same_as(old):
                return new
        return var

    return tvm_ffi.structural_map(expr, ((tirx.Var, swap),))


def replace_loads(expr, buffer, value):
    """`expr` with every load of `buffer` replaced by `value`."""
    import tvm_ffi
    from tvm import ir

    def swap(load):
        return value if load.source.same_as(buffer) else load

    return tvm_ffi.structural_map(expr, ((ir.TensorLoad, swap),))


def _holds(stmt, name: str) -> bool:
    from ..tir import iter_nodes

    return any(type(n).__name__ == "SBlock" and n.name_hint == name for n in iter_nodes(stmt))


def splice(func, replace: dict, remove: set, buffers: list):
    """`func` with the root-level loop nest holding block `name` replaced by the
    statements `replace[name]`, the nests holding a block of `remove` dropped, and
    `buffers` allocated in the root block."""
    from tvm import s_tir, tirx

    root = func.body.block
    seq = list(root.body.seq) if type(root.body).__name__ == "SeqStmt" else [root.body]
    out = []
    for stmt in seq:
        if any(_holds(stmt, name) for name in remove):
            continue
        hit = next((name for name in replace if _holds(stmt, name)), None)
        out.extend(replace[hit] if hit else [stmt])
    body = out[0] if len(out) == 1 else tirx.SeqStmt(out)   # TIR has no 1-long SeqStmt
    new_root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint,
                            body, root.init, list(root.alloc_buffers) + buffers,
                            root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize([], True, new_root))
