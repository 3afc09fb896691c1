"""Row statistics in one pass over the row, where the math allows it.

Two patterns of a pair of row reductions, the second waiting for the first, are found by
analysis (after inlining elementwise stages, so `topi.nn.softmax`'s exp stage and a
layer norm's mean stage fold into their consumers) and computed in one pass:

* softmax: m = max_k a_k, then s = sum_k exp(a_k - m). (m, s) pairs combine as
  (m1, s1) + (m2, s2) = (max, s1 + s2 e) when m1 >= m2, else (max, s1 e + s2), with
  e = exp(-|m1 - m2|): one exp per element (the online softmax).
* centred moments (layer norm): t = sum_k a_k, then q = sum_k (a_k - u)^2 with u any
  expression of t (the mean). With c = a_0 the row's first element, one pass sums
  (a - c) and (a - c)^2; then t = S + N c and q = Q - 2 d S + N d^2, d = u - c (the
  shifted-data formula: no cancellation when the row's mean is far from 0).

Each pair becomes a partial block of `width` lanes per row (lane l takes the elements
l, l + width, ...; its lanes are data parallel, so it vectorises without rfactor, which
knows no such combiner), a block folding the lanes, and for the moments a block that
undoes the shift. They write the original buffers, which every later stage reads as
before; the normalising stage recomputes what it needs (nothing row-sized is
materialised). Results equal the two-pass computation up to rounding.
"""
from __future__ import annotations

from ..blocks import blocks
from ..tir import expr_dtype
from .reciprocal import reciprocal_form
from .tir_build import (
    is_load,
    iter_var,
    nest,
    region,
    replace_loads,
    splice,
    substitute,
)


def _reduction_operand(block, op: str):
    """a when `block` is `B[v] = op(B[v], a)` over one trailing reduction var, the write
    indexed exactly by the spatial vars; else None."""
    store = block.body
    kinds = [int(iv.iter_type) for iv in block.iter_vars]
    if type(store).__name__ != "BufferStore" or block.init is None or len(block.writes) != 1:
        return None
    if kinds[-1] != 2 or any(k != 0 for k in kinds[:-1]) \
            or len(store.indices) != len(kinds) - 1:
        return None
    if not all(i.same_as(iv.var) for i, iv in zip(store.indices, block.iter_vars)):
        return None
    value = store.value
    if type(value).__name__ != op:
        return None
    for mine, other in ((value.a, value.b), (value.b, value.a)):
        if is_load(mine) and mine.source.same_as(store.buffer) \
                and all(a.same_as(b) for a, b in zip(mine.indices, store.indices)):
            return other
    return None


def _same_row(first, second) -> list | None:
    """Var pairs mapping `second`'s iter vars to `first`'s when both iterate alike."""
    a, b = first.iter_vars, second.iter_vars
    if len(a) != len(b) or any(int(x.dom.extent) != int(y.dom.extent) for x, y in zip(a, b)):
        return None
    return [(y.var, x.var) for x, y in zip(a, b)]


def _uses(expr, var) -> bool:
    from ..tir import free_vars

    return any(v.same_as(var) for v in free_vars(expr))


def _softmax_pair(first, second):
    """() when `second` sums exp(a - m) with m = max a the output of `first`, at the
    same row; else None."""
    import tvm_ffi

    a, term, pairs = _reduction_operand(first, "Max"), _reduction_operand(second, "Add"), \
        _same_row(first, second)
    if a is None or term is None or pairs is None:
        return None
    if type(term).__name__ != "Call" or str(term.op.name) != "tirx.exp":
        return None
    arg = term.args[0]
    if type(arg).__name__ != "Sub" or not is_load(arg.b) \
            or not arg.b.source.same_as(first.writes[0].source) \
            or not all(i.same_as(iv.var) for i, iv in zip(arg.b.indices, second.iter_vars)):
        return None
    return () if tvm_ffi.structural_equal(substitute(arg.a, pairs), a) else None


def _moments_pair(first, second):
    """(u,) when `second` sums (a - u)^2 with a what `first` sums and u an expression of
    the rows only; else None."""
    import tvm_ffi

    a, term, pairs = _reduction_operand(first, "Add"), _reduction_operand(second, "Add"), \
        _same_row(first, second)
    if a is None or term is None or pairs is None or type(term).__name__ != "Mul":
        return None
    if not tvm_ffi.structural_equal(term.a, term.b) or type(term.a).__name__ != "Sub":
        return None
    centred, u = term.a.a, term.a.b
    if _uses(u, second.iter_vars[-1].var) or not tvm_ffi.structural_equal(
            substitute(centred, pairs), a):
        return None
    return (substitute(u, pairs),)


_PATTERNS = {"softmax": _softmax_pair, "moments": _moments_pair}


def _inlined(func):
    """A schedule of `func` with its inlinable elementwise stages inlined."""
    import tvm
    from tvm import s_tir

    from .common import inline_candidates

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    for name in inline_candidates(sch):
        sch.compute_inline(sch.get_sblock(name))
    return sch


def one_pass_pairs(sch) -> list[tuple]:
    """(pattern, first block, second block, details) of every pair in `sch`."""
    found = [sch.get(b) for b in blocks(sch)]
    out = []
    for first in found:
        for second in found:
            for kind, match in _PATTERNS.items():
                got = None if first is second else match(first, second)
                if got is not None:
                    out.append((kind, first, second, got))
    return out


def row_extents(func) -> set[int]:
    """The row lengths of the one-pass pairs of `func` (empty when it has none)."""
    return {int(p[1].iter_vars[-1].dom.extent) for p in one_pass_pairs(_inlined(func))}


def one_pass_form(func, width: int):
    """`func` (a PrimFunc) with each pair computed in one pass over `width` lanes (see
    the module docstring); None when it has no pair or a row is shorter than `width`.
    A row that is no whole number of steps leaves a tail that the fold takes up."""
    pairs = one_pass_pairs(_inlined(func))
    if not pairs or any(int(p[1].iter_vars[-1].dom.extent) < width for p in pairs):
        return None
    func = _inlined(func).mod["main"]
    replace, remove, buffers = {}, set(), []
    for kind, first, second, details in pairs:
        build = _softmax_blocks if kind == "softmax" else _moments_blocks
        stmts, bufs = build(first, second, width, *details)
        replace[first.name_hint] = stmts
        remove.add(second.name_hint)
        buffers += bufs
    return reciprocal_form(splice(func, replace, remove, buffers))


class _Rows:
    """Fresh iteration variables of a pair's rows, and the element a of lane `lane`,
    step `step` (k = step * width + lane) or of the row's first element."""

    def __init__(self, first, width: int):
        self.first, self.width = first, width
        self.iters = [iter_var(iv.var.name, int(iv.dom.extent), False)
                      for iv in first.iter_vars[:-1]]
        self.vars = [iv.var for iv in self.iters]
        self.extent = int(first.iter_vars[-1].dom.extent)

    def element(self, a, k):
        return substitute(a, list(zip([iv.var for iv in self.first.iter_vars],
                                      self.vars + [k])))

    def reads(self, k):
        pairs = list(zip([iv.var for iv in self.first.iter_vars], self.vars + [k]))
        return [region(r.source, [substitute(x.min, pairs) for x in r.region])
                for r in self.first.reads]

    def buffer(self, name, dtype, lanes: bool):
        from tvm import tirx

        shape = [iv.dom.extent for iv in self.iters] + ([self.width] if lanes else [])
        return tirx.decl_buffer(shape, dtype, name)


def _block(name, iters, reads, writes, stores, inits=None):
    from tvm import s_tir, tirx

    seq = tirx.SeqStmt
    return nest(iters, s_tir.SBlock(iters, reads, writes, name, seq(stores),
                                    seq(inits) if inits else None))


def _lane_pass(rows, name, bufs, update, inits, reads, shifted=False):
    """The partial block: lanes of `bufs` (row..., lane), reduced over the row's steps;
    `update(loads, element)` gives the new values, `element(k)` being the row's element
    k (stored in reverse order: a store may read an earlier buffer's old value)."""
    from tvm import tirx

    lane, step = iter_var("v_lane", rows.width, False), \
        iter_var("v_step", rows.extent // rows.width, True)
    rows_ = _Rows(rows.first, rows.width)
    at = rows_.vars + [lane.var]
    k = step.var * tirx.const(rows.width, "int32") + lane.var
    new = update([tirx.BufferLoad(b, at) for b in bufs], lambda j: rows_.element(reads, j), k)
    stores = [tirx.BufferStore(b, v, at) for b, v in reversed(list(zip(bufs, new)))]
    first = rows_.reads(tirx.const(0, "int32")) if shifted else []
    return _block(name, rows_.iters + [lane, step], rows_.reads(k) + first,
                  [region(b, at) for b in bufs], stores,
                  [tirx.BufferStore(b, v, at) for b, v in zip(bufs, inits)])


def _fold(rows, name, lanes, outs, combine, inits, tail_values=None, reads=()):
    """Fold the lanes of `lanes` into the row buffers `outs` with `combine`, then the
    row's tail (the elements past the last whole step), each as the lane values
    `tail_values(element, k)` gives for its element k. One reduction over
    width + tail terms, each read in bounds and selected."""
    from tvm import tirx

    rows_ = _Rows(rows.first, rows.width)
    tail = rows.extent % rows.width
    term = iter_var("v_lane", rows.width + tail, True)
    width = tirx.const(rows.width, "int32")
    lane = tirx.min(term.var, width - 1) if tail else term.var
    at, out = rows_.vars + [lane], rows_.vars
    values = [tirx.BufferLoad(b, at) for b in lanes]
    extra = []
    if tail:
        k = tirx.const(rows.extent - tail, "int32") + tirx.max(term.var - width, 0)
        past = tail_values(lambda j: rows_.element(reads, j), k)
        values = [tirx.Select(term.var < width, v, p) for v, p in zip(values, past)]
        extra = rows_.reads(k) + rows_.reads(tirx.const(0, "int32"))
    new = combine([tirx.BufferLoad(b, out) for b in outs], values)
    stores = [tirx.BufferStore(b, v, out) for b, v in reversed(list(zip(outs, new)))]
    return _block(name, rows_.iters + [term], [region(b, at) for b in lanes] + extra,
                  [region(b, out) for b in outs], stores,
                  [tirx.BufferStore(b, v, out) for b, v in zip(outs, inits)])


def _online(m, s, m2, s2):
    """(m, s) of two partial (max, sum) pairs, with one exp."""
    from tvm import tirx

    e = tirx.Var("rescale", expr_dtype(m2))
    s_new = tirx.Let(e, tirx.exp(-tirx.abs(m - m2)),
                     tirx.Select(m >= m2, s + s2 * e, s * e + s2))
    return [tirx.max(m, m2), s_new]


def _softmax_blocks(first, second, width):
    from tvm import tirx

    rows = _Rows(first, width)
    m_buf, s_buf = first.writes[0].source, second.writes[0].source
    dtype = m_buf.dtype
    identity, zero, one = first.init.value, tirx.const(0.0, dtype), tirx.const(1.0, dtype)
    lanes = [rows.buffer(m_buf.name + "_lanes", dtype, True),
             rows.buffer(s_buf.name + "_lanes", dtype, True)]
    a = _reduction_operand(first, "Max")
    partial = _lane_pass(rows, f"{m_buf.name}_{s_buf.name}_lanes", lanes,
                         lambda old, elem, k: _online(old[0], old[1], elem(k), one),
                         [identity, zero], a)
    fold = _fold(rows, first.name_hint, lanes, [m_buf, s_buf],
                 lambda o, p: _online(o[0], o[1], p[0], p[1]), [identity, zero],
                 lambda elem, k: [elem(k), one], a)
    return [partial, fold], lanes


def _moments_blocks(first, second, width, u):
    from tvm import s_tir, tirx

    rows = _Rows(first, width)
    t_buf, q_buf = first.writes[0].source, second.writes[0].source
    dtype = t_buf.dtype
    zero = tirx.const(0.0, dtype)
    a = _reduction_operand(first, "Add")
    lanes = [rows.buffer(t_buf.name + "_lanes", dtype, True),
             rows.buffer(q_buf.name + "_lanes", dtype, True)]
    shifted = [rows.buffer(t_buf.name + "_shifted", dtype, False),
               rows.buffer(q_buf.name + "_shifted", dtype, False)]
    lead = rows.element(a, tirx.const(0, "int32"))

    def moments(old, elem, k):
        d = elem(k) - elem(tirx.const(0, "int32"))
        return [old[0] + d, old[1] + d * d]

    partial = _lane_pass(rows, f"{t_buf.name}_{q_buf.name}_lanes", lanes, moments,
                         [zero, zero], a, shifted=True)
    fold = _fold(rows, f"{t_buf.name}_{q_buf.name}_shifted", lanes, shifted,
                 lambda o, p: [o[0] + p[0], o[1] + p[1]], [zero, zero],
                 lambda elem, k: moments([zero, zero], elem, k), a)
    # undo the shift: t = S + N c, q = Q - 2 d S + N d^2 with d = u - c
    n = tirx.const(float(rows.extent), dtype)
    s_, q_ = (tirx.BufferLoad(b, rows.vars) for b in shifted)
    t = s_ + n * lead
    d = replace_loads(substitute(u, list(zip([iv.var for iv in first.iter_vars[:-1]],
                                             rows.vars))), t_buf, t) - lead
    q = q_ - tirx.const(2.0, dtype) * d * s_ + n * d * d
    finish = nest(rows.iters, s_tir.SBlock(
        rows.iters, [region(b, rows.vars) for b in shifted] + rows.reads(tirx.const(0, "int32")),
        [region(t_buf, rows.vars), region(q_buf, rows.vars)], first.name_hint,
        tirx.SeqStmt([tirx.BufferStore(t_buf, t, rows.vars),
                      tirx.BufferStore(q_buf, q, rows.vars)])))
    return [partial, fold, finish], lanes + shifted


# the per-element pieces, shared with the GPU's one-pass form (search_space/cuda/rows_one_pass.py)
Rows, online, reduction_operand = _Rows, _online, _reduction_operand
