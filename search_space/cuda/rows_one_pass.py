"""The one-pass form of a program's row statistics, shaped for a GPU thread block.

The pairs are those `search_space/cpu/one_pass.py` finds (softmax's max and sum of exp,
a norm's mean and centred sum of squares; found by analysis, never by names), with its
per-element math (the online update with one exp; sums shifted by the row's first
element). What differs is the shape: the CPU rewrite folds its lanes with the online
combiner, which TVM's cross-thread reduction (warp shuffles) cannot lower. Here:

* the lane partials are indexed (row, thread t, vector lane v), element
  k = (step x T + t) x V + v, so a thread's V elements of a step are consecutive (the
  elements of one 128-bit vector in the sketch's staged copy, `rows_onchip.py`);
  a row that is no whole number of T x V steps ends in a step whose threads past the
  row reload its last vector and keep their old values (a select, not a predicate,
  so that each stage still covers what the next one reads);
* the lanes are folded by plain reductions, which lower to warp shuffles: softmax
  M = max_l m_l, then S = sum_l s_l exp(m_l - M); moments S = sum_l S_l, Q = sum_l Q_l;
* the moments' shift is undone in two elementwise stages (t = S + N c, and
  q = Q - 2 d S + N d^2 with d = u - c), which inline into their consumers.
Every statistic is written to its original buffer, so the rest of the program is
unchanged. Results equal the two-pass computation up to rounding.
"""
from __future__ import annotations

from ..cpu.one_pass import Rows, one_pass_pairs, online, reduction_operand
from ..cpu.tir_build import iter_var, nest, region, splice, substitute
from ..tir import free_vars


def _inlined(func):
    """A schedule of `func` with its elementwise stages inlined (softmax's exp stage
    and a norm's mean fold into their consumers, as the pairs' patterns expect)."""
    import tvm
    from tvm import s_tir

    from .analysis import classify
    from .common import inline_spatial

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    inline_spatial(sch, classify(sch).spatial)
    return sch


def one_pass_rows(func) -> tuple[int, ...]:
    """The row lengths of `func`'s one-pass pairs (empty when it has none)."""
    return tuple(sorted({int(p[1].iter_vars[-1].dom.extent)
                         for p in one_pass_pairs(_inlined(func))}))


def gpu_one_pass_form(func, threads: int, vector: int):
    """`func` (a PrimFunc) with each pair computed in one pass by `threads` x `vector`
    lanes (module docstring); None when it has no pair, a row is not a whole number of
    vectors, or shorter than the lanes."""
    pairs = one_pass_pairs(_inlined(func))
    extents = {int(p[1].iter_vars[-1].dom.extent) for p in pairs}
    if not pairs or any(n % vector or n < threads * vector for n in extents):
        return None
    func = _inlined(func).mod["main"]
    replace, remove, buffers = {}, set(), []
    for kind, first, second, details in pairs:
        lanes = _Lanes(first, threads, vector)
        build = _softmax if kind == "softmax" else _moments
        stmts, bufs = build(lanes, first, second, *details)
        replace[first.name_hint] = stmts
        remove.add(second.name_hint)
        buffers += bufs
    return splice(func, replace, remove, buffers)


def _whole_rows(rows: Rows):
    """The reads of a pair's element as whole rows: one region a buffer (a block that
    reads a row's element k and its first element declares the row once)."""
    import tvm
    from tvm import tirx

    pairs = list(zip([iv.var for iv in rows.first.iter_vars], rows.vars + [None]))
    k = rows.first.iter_vars[-1].var
    out = []
    for r in rows.first.reads:
        ranges = []
        for x, dim in zip(r.region, r.source.shape):
            uses_k = any(v.same_as(k) for v in free_vars(x.min))
            ranges.append(tvm.ir.Range.from_min_extent(tirx.const(0, "int32"), dim) if uses_k
                          else tvm.ir.Range.from_min_extent(substitute(x.min, pairs[:-1]),
                                                            x.extent))
        out.append(tirx.BufferRegion(r.source, ranges))
    return out


def _block(name, iters, reads, writes, stores, inits=None):
    from tvm import s_tir, tirx

    seq = tirx.SeqStmt
    body = seq(stores) if len(stores) > 1 else stores[0]
    init = None if not inits else (seq(inits) if len(inits) > 1 else inits[0])
    return nest(iters, s_tir.SBlock(iters, reads, writes, name, body, init))


class _Lanes:
    """A pair's rows with their T x V lanes: fresh iteration variables, the partial
    block's element index, and lane buffers (row..., T, V)."""

    def __init__(self, first, threads: int, vector: int):
        self.rows = Rows(first, threads * vector)
        self.threads, self.vector = threads, vector
        self.vectors = self.rows.extent // vector

    def fresh(self):
        return Rows(self.rows.first, self.rows.width)

    def buffer(self, name, dtype):
        from tvm import tirx

        shape = [iv.dom.extent for iv in self.rows.iters] + [self.threads, self.vector]
        return tirx.decl_buffer(shape, dtype, name)

    def partial(self, name, bufs, update, inits, operand, lead=False):
        """The lane block: bufs[row, t, v] updated by `update(old values, element k,
        element(j))` over the row's steps, element k = (step T + t) V + v."""
        from tvm import tirx

        rows = self.fresh()
        steps = -(-self.vectors // self.threads)
        t, step, v = (iter_var("v_t", self.threads, False), iter_var("v_step", steps, True),
                      iter_var("v_v", self.vector, False))
        at = rows.vars + [t.var, v.var]
        lane_vector = step.var * tirx.const(self.threads, "int32") + t.var
        tail = self.vectors % self.threads != 0
        if tail:   # the last step's threads past the row load its last vector and drop it
            lane_vector = tirx.min(lane_vector, tirx.const(self.vectors - 1, "int32"))
        k = lane_vector * tirx.const(self.vector, "int32") + v.var
        old = [tirx.BufferLoad(b, at) for b in bufs]
        new = update(old, lambda j: rows.element(operand, j), k)
        if tail:
            inside = step.var * tirx.const(self.threads, "int32") + t.var < self.vectors
            new = [tirx.Select(inside, x, o) for x, o in zip(new, old)]
        stores = [tirx.BufferStore(b, x, at) for b, x in reversed(list(zip(bufs, new)))]
        reads = _whole_rows(rows) if lead else rows.reads(k)
        return _block(name, rows.iters + [t, step, v], reads, [region(b, at) for b in bufs],
                      stores, [tirx.BufferStore(b, x, at) for b, x in zip(bufs, inits)])

    def fold(self, name, out, term, combine, identity, extra=()):
        """out[row] = combine over the lanes of term(lane loads, row loads)."""
        from tvm import tirx

        rows = self.fresh()
        t, v = iter_var("v_t", self.threads, True), iter_var("v_v", self.vector, True)
        value = term(lambda b: tirx.BufferLoad(b, rows.vars + [t.var, v.var]),
                     lambda b: tirx.BufferLoad(b, rows.vars))
        old = tirx.BufferLoad(out, rows.vars)
        reads = [region(b, rows.vars + [t.var, v.var]) for b in extra[0]] + \
            [region(b, rows.vars) for b in extra[1]]
        return _block(name, rows.iters + [t, v], reads, [region(out, rows.vars)],
                      [tirx.BufferStore(out, combine(old, value), rows.vars)],
                      [tirx.BufferStore(out, identity, rows.vars)])


def _softmax(lanes: _Lanes, first, second):
    from tvm import tirx

    m_buf, s_buf = first.writes[0].source, second.writes[0].source
    dtype = m_buf.dtype
    identity, zero, one = first.init.value, tirx.const(0.0, dtype), tirx.const(1.0, dtype)
    bufs = [lanes.buffer(m_buf.name + "_lanes", dtype), lanes.buffer(s_buf.name + "_lanes", dtype)]
    partial = lanes.partial(f"{m_buf.name}_{s_buf.name}_lanes", bufs,
                            lambda old, elem, k: online(old[0], old[1], elem(k), one),
                            [identity, zero], reduction_operand(first, "Max"))
    fold_m = lanes.fold(first.name_hint, m_buf, lambda lane, row: lane(bufs[0]), tirx.max,
                        identity, ([bufs[0]], []))
    fold_s = lanes.fold(second.name_hint, s_buf,
                        lambda lane, row: lane(bufs[1]) * tirx.exp(lane(bufs[0]) - row(m_buf)),
                        lambda a, b: a + b, zero, (bufs, [m_buf]))
    return [partial, fold_m, fold_s], bufs


def _moments(lanes: _Lanes, first, second, u):
    from tvm import s_tir, tirx

    t_buf, q_buf = first.writes[0].source, second.writes[0].source
    dtype = t_buf.dtype
    zero = tirx.const(0.0, dtype)
    a = reduction_operand(first, "Add")
    bufs = [lanes.buffer(t_buf.name + "_lanes", dtype), lanes.buffer(q_buf.name + "_lanes", dtype)]
    rows = lanes.fresh()
    shifted = [rows.buffer(t_buf.name + "_shifted", dtype, False),
               rows.buffer(q_buf.name + "_shifted", dtype, False)]

    def moments(old, elem, k):
        d = elem(k) - elem(tirx.const(0, "int32"))
        return [old[0] + d, old[1] + d * d]

    partial = lanes.partial(f"{t_buf.name}_{q_buf.name}_lanes", bufs, moments, [zero, zero], a,
                            lead=True)
    add = lambda x, y: x + y  # noqa: E731
    folds = [lanes.fold(f"{b.name}_fold", s, lambda lane, row, b=b: lane(b), add, zero,
                        ([b], [])) for b, s in zip(bufs, shifted)]
    # undo the shift: t = S + N c, q = Q - 2 d S + N d^2 with d = u - c (two stages,
    # each with its own iteration variables)
    finish = []
    for name, buf in ((first.name_hint, t_buf), (second.name_hint + "_unshift", q_buf)):
        rows = lanes.fresh()
        n = tirx.const(float(rows.extent), dtype)
        lead = rows.element(a, tirx.const(0, "int32"))
        s_, q_ = (tirx.BufferLoad(b, rows.vars) for b in shifted)
        if buf is t_buf:
            value, reads = s_ + n * lead, [shifted[0]]
        else:
            # u reads the row's t (the stage above) at this row
            d = substitute(u, list(zip([iv.var for iv in first.iter_vars[:-1]], rows.vars))) \
                - lead
            value, reads = q_ - tirx.const(2.0, dtype) * d * s_ + n * d * d, [*shifted, t_buf]
        finish.append(nest(rows.iters, s_tir.SBlock(
            rows.iters, [region(b, rows.vars) for b in reads] + rows.reads(tirx.const(0, "int32")),
            [region(buf, rows.vars)], name, tirx.BufferStore(buf, value, rows.vars))))
    return [partial, *folds, *finish], bufs + shifted
