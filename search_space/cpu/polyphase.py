"""Transposed convolutions in polyphase form: only the taps that meet data.

A transposed convolution with stride S (torch's ConvTranspose2d) is written as a
convolution over the input spread S apart: out[y] = sum_r spread[y + r] * w[R-1-r],
where spread[t] is data[(t - e) / S] when (t - e) % S == 0 and 0 otherwise. For an
output of phase y % S = p only the taps r of one residue rr(p) modulo S meet data.
The polyphase form iterates y = S * qy + p and r = S * ry + rr(p) instead of y and r:
the phase p becomes a spatial axis of its own, the tap axis shrinks to R / S, every
term multiplies data (data[qy + ry + k(p)]) and 1 / S of the multiply-adds remain per
such axis. It stays one block (a cache of its register tile needs a single writer),
a plain convolution the micro-kernel schedules like any other, writing a buffer that
keeps each phase axis as (qy, p): the output's own memory order, so a contiguous copy
(the interleaving stage) makes the output, while a register tile along qy writes
only its own elements (along y they would lie S apart, the other phases between).

The form is found by analysis: after inlining the contraction's producers (the spread,
its padding, a kernel flip), an index `(y + r + k) % S` or `// S` names the phase axis
y, its tap axis r and S. Both extents must be multiples of S.
"""
from __future__ import annotations

from ..analysis import analyse
from ..blocks import blocks
from ..tir import expr_dtype, iter_nodes
from .tir_build import is_load, iter_var, nest, region, replace_loads, splice, substitute


def _phase_index(node, spatial: list, reduce: list):
    """(spatial var name, (tap var name, S, the tap's sign, constant)) when `node` is
    `e % S` or `e // S` (S >= 2) with e = y + sign * r + constant, y spatial, r a
    reduction var, sign +-1; else None."""
    import tvm

    if type(node).__name__ not in ("FloorMod", "FloorDiv") \
            or type(node.b).__name__ != "IntImm" or int(node.b) < 2:
        return None
    names = [iv.var for iv in spatial + reduce]
    coefs = tvm.sym.detect_linear_equation(node.a, names)
    if not coefs or type(coefs[-1]).__name__ != "IntImm":
        return None
    used = [(k, int(c)) for k, c in enumerate(coefs[:-1]) if int(c) != 0]
    if len(used) != 2 or used[0][0] >= len(spatial) or used[1][0] < len(spatial):
        return None
    (y, cy), (r, cr) = used
    if cy != 1 or cr not in (1, -1):
        return None
    return names[y].name, (names[r].name, int(node.b), cr, int(coefs[-1]))


def _iters(block, kind: int) -> list:
    return [iv for iv in block.iter_vars if int(iv.iter_type) == kind]


def _phase_axes(block) -> dict | None:
    """Spatial var name -> (tap var name, S, sign, constant) over every phase index of
    the block's value (see `_phase_index`); None when two disagree about an axis."""
    spatial, reduce = _iters(block, 0), _iters(block, 2)
    axes: dict = {}
    for node in iter_nodes(block.body):
        found = _phase_index(node, spatial, reduce)
        if found is not None and axes.setdefault(*found) != found[1]:
            return None
    return axes


def _other_taps_are_zero(block, axes: dict) -> bool:
    """Whether every term of a tap the polyphase form drops (residue other than rr(p)
    for phase p) is 0: the form is exact only for a spread input, not, say, for
    an input upsampled by repetition (data[(y + r) // S], every tap non-zero)."""
    import tvm
    from tvm import tirx

    store = block.body
    term = replace_loads(store.value, store.buffer, tirx.const(0, expr_dtype(store.value)))
    vars_ = {iv.var.name: iv.var for iv in block.iter_vars}
    analyzer = tvm.sym.Analyzer()
    for y, (r, s, sign, const) in axes.items():
        qy, ry = tirx.Var("q", "int32"), tirx.Var("t", "int32")
        for p in range(s):
            for rr in range(s):
                if (p + sign * rr + const) % s == 0:
                    continue
                dropped = substitute(term, ((vars_[y], s * qy + p), (vars_[r], s * ry + rr)))
                if not _is_zero(analyzer.simplify(dropped)):
                    return False
    return True


def _is_zero(expr) -> bool:
    """Whether `expr` is 0 by its form: a zero constant, a product with a zero factor,
    a sum of zeros, or a choice between zeros (the simplifier leaves
    if_then_else(c, 0, 0) * w standing)."""
    kind = type(expr).__name__
    if kind in ("FloatImm", "IntImm"):
        return float(expr.value) == 0.0
    if kind == "Mul":
        return _is_zero(expr.a) or _is_zero(expr.b)
    if kind == "Add":
        return _is_zero(expr.a) and _is_zero(expr.b)
    if kind == "Call" and "if_then_else" in str(expr.op.name):
        return _is_zero(expr.args[1]) and _is_zero(expr.args[2])
    if kind == "Select":
        return _is_zero(expr.true_value) and _is_zero(expr.false_value)
    return False


def _without_phase_remainders(expr, block, axes: dict):
    """`expr` with every phase remainder `e % S` as 0: in the polyphase form e is a
    multiple of S by construction (the tap residue is chosen so)."""
    import tvm_ffi
    from tvm import tirx

    spatial, reduce = _iters(block, 0), _iters(block, 2)

    def zero(node):
        found = _phase_index(node, spatial, reduce)
        if found is None or axes.get(found[0]) != found[1]:
            return node
        return tirx.const(0, expr_dtype(node))

    return tvm_ffi.structural_map(expr, ((tirx.FloorMod, zero),))


def _phase_shape(block, axes: dict) -> list | None:
    """Per output dimension, the extents of the phases buffer: (E / S, S) for a phase
    axis, else (E,); None unless the output is indexed by plain spatial iter vars."""
    extents = {iv.var.name: int(iv.dom.extent) for iv in block.iter_vars}
    shape = []
    for index in block.body.indices:
        if type(index).__name__ != "Var" or index.name not in extents:
            return None
        name = index.name
        s = axes[name][1] if name in axes else None
        shape.append((extents[name] // s, s) if s else (extents[name],))
    return shape


def _polyphase_block(block, axes: dict, phases):
    """The block over (..., qy, p, ..., ry, ...) for every phase axis y and its tap
    axis r, writing `phases` (the output, each phase axis y as (qy, p)), as a nest."""
    import tvm
    from tvm import s_tir, tirx

    taps = {axis[0]: y for y, axis in axes.items()}
    iters, pairs, new_of = [], [], {}
    for iv in block.iter_vars:
        var, extent = iv.var.name, int(iv.dom.extent)
        if var in axes:
            s = axes[var][1]
            outer, p = iter_var(var, extent // s, False), iter_var(var + "_phase", s, False)
            iters += [outer, p]
            new_of[var] = (outer.var, p.var)
            pairs.append((iv.var, s * outer.var + p.var))
        elif var in taps:
            iters.append(iter_var(var, extent // axes[taps[var]][1], True))
            new_of[var] = (iters[-1].var,)
        else:
            iters.append(iter_var(var, extent, int(iv.iter_type) == 2))
            new_of[var] = (iters[-1].var,)
            pairs.append((iv.var, iters[-1].var))
    for iv in block.iter_vars:      # taps: r = S * ry + rr(p), (p + sign rr + k) % S == 0
        if iv.var.name in taps:
            y = taps[iv.var.name]
            _, s, sign, const = axes[y]
            residue = tirx.floormod(-sign * (new_of[y][1] + const), s)
            pairs.append((iv.var, s * new_of[iv.var.name][0] + residue))
    analyzer = tvm.sym.Analyzer()
    for new in iters:
        analyzer.bind(new.var, new.dom)
    store = block.body

    def rewrite(expr):
        return analyzer.simplify(substitute(_without_phase_remainders(expr, block, axes),
                                            pairs))

    value = rewrite(store.value)
    loads = [n for n in iter_nodes(value) if is_load(n) and not n.source.same_as(store.buffer)]
    if len({ld.source.name for ld in loads}) != len(loads):
        return None
    at = [v for index in store.indices for v in new_of[index.name]]
    value = replace_loads(value, store.buffer, tirx.BufferLoad(phases, at))
    write = region(phases, at)
    init = tirx.BufferStore(phases, rewrite(block.init.value), at)
    return nest(iters, s_tir.SBlock(iters, [region(ld.source, ld.indices) for ld in loads],
                                    [write], block.name_hint,
                                    tirx.BufferStore(phases, value, at), init))


def _interleave(block, axes: dict, phases):
    """The copy of `phases` into the block's output (y = S * qy + p): the same memory
    order, so a contiguous copy."""
    from tvm import s_tir, tirx

    store = block.body
    extents = {iv.var.name: int(iv.dom.extent) for iv in block.iter_vars}
    iters = [iter_var(i.name, extents[i.name], False) for i in store.indices]
    out, at = [n.var for n in iters], []
    for index, var in zip(store.indices, out):
        s = axes[index.name][1] if index.name in axes else None
        at += [tirx.floordiv(var, s), tirx.floormod(var, s)] if s else [var]
    copy = tirx.BufferStore(store.buffer, tirx.BufferLoad(phases, at), out)
    return nest(iters, s_tir.SBlock(iters, [region(phases, at)], [region(store.buffer, out)],
                                    block.name_hint + "_interleave", copy, None))


def _rewrite_block(block, axes: dict):
    """[the polyphase nest, the interleaving copy] and the phases buffer, or None."""
    from tvm import tirx

    shape = _phase_shape(block, axes)
    if shape is None:
        return None
    buffer = block.body.buffer
    phases = tirx.decl_buffer([e for dims in shape for e in dims], buffer.dtype,
                              buffer.name + "_phases")
    made = _polyphase_block(block, axes, phases)
    return None if made is None else ([made, _interleave(block, axes, phases)], phases)


def polyphase_form(func):
    """`func` with every transposed-convolution block (see the module docstring) in
    polyphase form, its producers inlined; None when there is none."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    for block in blocks(sch):
        info = analyse(sch, block)
        if not info.is_output and not info.is_contraction and info.is_spatial:
            try:
                sch.compute_inline(block)
            except Exception:  # noqa: BLE001 - a stage that cannot inline stays
                continue
    replace, buffers = {}, []
    for block in blocks(sch):
        info, stmt = analyse(sch, block), sch.get(block)
        if not (info.is_contraction and info.loops_bound) or stmt.init is None:
            continue
        axes = _phase_axes(stmt)
        extents = {v.name: v.extent for v in info.iters}
        if not axes or any(extents[y] % s or extents[r] % s
                           for y, (r, s, _, _) in axes.items()) \
                or not _other_taps_are_zero(stmt, axes):
            continue
        made = _rewrite_block(stmt, axes)
        if made is not None:
            replace[info.name], buffer = made
            buffers.append(buffer)
    return splice(sch.mod["main"], replace, set(), buffers) if replace else None
