"""Grouped contractions with the group as an iteration axis of its own.

A grouped convolution (torch's Conv2d(groups=G)) reads its data at channel
f // (F / G) * (C / G) + c: the output channel f, the axis a micro-kernel vectorises,
also picks the data's channel block, so no register tile streams along f. Splitting
f into the group f // (F / G) and the channel within it f % (F / G)
(`transform_block_layout`; the buffers keep their layout) makes the data's channel
g * (C / G) + c, independent of the vector axis; the weights then hold group after
group along their first dimension (weight[g * F / G + f_in]), which packing takes as
panels within a group (`Access.panel_dim`).
"""
from __future__ import annotations

from ..analysis import analyse
from ..blocks import blocks


def _group_sizes(block_stmt, spatial: set[str]) -> dict[str, int]:
    """Spatial iter var name -> K for every read index that divides it by a constant K
    (1 < K < its extent, K dividing it); the first K found per var."""
    import tvm_ffi
    from tvm import tirx

    extents = {iv.var.name: int(iv.dom.extent) for iv in block_stmt.iter_vars}
    found: dict[str, int] = {}

    def note(div):
        var, k = div.a, div.b
        if type(var).__name__ == "Var" and type(k).__name__ == "IntImm" \
                and var.name in spatial and var.name not in found:
            k = int(k)
            if 1 < k < extents[var.name] and extents[var.name] % k == 0:
                found[var.name] = k
        return div

    for region in block_stmt.reads:
        for rng in region.region:
            tvm_ffi.structural_map(rng.min, ((tirx.FloorDiv, note),))
    return found


def _splitter(order: list):
    """The block index map: iter var i kept where order[i] is None, else split by it."""

    def split(*ivs):
        out = []
        for iv, k in zip(ivs, order):
            out += [iv] if k is None else [iv // k, iv % k]
        return tuple(out)

    return split


def group_split(func):
    """`func` with every spatial iter var of a contraction block that a read divides
    by a constant K (see `_group_sizes`) split into two iter vars, v // K and v % K;
    None when no block has one."""
    import tvm
    from tvm import s_tir
    from tvm.tirx import IndexMap

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    analyzer = tvm.sym.Analyzer()   # knows the domains of the split blocks' iter vars
    changed = False
    for block in blocks(sch):
        info = analyse(sch, block)
        if not (info.is_contraction and info.loops_bound):
            continue
        sizes = _group_sizes(sch.get(block), {v.name for v in info.spatial})
        if not sizes:
            continue
        order = [sizes.get(v.name) for v in info.iters]
        index_map = IndexMap.from_func(_splitter(order), ndim=len(order),
                                       index_dtype="int32")
        sch.transform_block_layout(block, index_map)
        for iv in sch.get(block).iter_vars:
            analyzer.bind(iv.var, iv.dom)
        changed = True
    return _simplified(sch.mod["main"], analyzer) if changed else None


def _simplified(func, analyzer):
    """`func` with its divisions and remainders simplified over the iter vars'
    domains: (g * K + f) // K * C + c becomes g * C + c, so the data index no longer
    varies along the vector axis f (the schedule would gather it lane by lane)."""
    import tvm_ffi
    from tvm import tirx

    def simplify(expr):
        return analyzer.simplify(expr)

    return tvm_ffi.structural_map(func, ((tirx.FloorDiv, simplify), (tirx.FloorMod, simplify)),
                                  order="post")
