"""The register form of `rows_onchip` (`rows.stage = registers`): each thread loads
its share of a row once, with vector loads, into a per-thread array that stays in
registers, computes every statistic from it and writes the output from it.

A thread's share is the elements it writes: element k = (s x T + t) x V + v for its
thread t, steps s < S = ceil(N / (T V)) and lanes v < V. TVM keeps a `local` array in
registers when it is small and every index into it is a constant. The size TVM gives
it (`CompactBufferAllocation`) is the box of the indices one thread touches: loops
below the array's allocation are relaxed, the thread loops above it (where
`LiftThreadBinding` puts threadIdx.x) are not. Two things defeat a plain copy of the
row (`cache_read` to "local"): laid out like the row, a thread's elements span
almost the whole row (the box [t V, t V + (S - 1) T V + V)); laid out (row, t, s, v)
by `transform_layout`, the indices are k mod T V / V, which the region estimate
cannot bound by t (threadIdx.x is a symbol to it), so the box is again every
thread's. Either way each thread kept nearly a row.

So the program itself is rewritten (the form this module returns): every block of
the row (its reductions and its output) iterates over (row..., s, t, v) instead of
the row's element, the inputs the kernel reads more than once are copied first into
per-row arrays laid out (row..., t, s, v), and the blocks read those at [row..., t,
s, v]: affine in the thread's own indices, so one thread's box is [t, 0:S, 0:V],
S x V values, and once the step loops are unrolled each index is a constant. A row
that is no whole number of T x V vectors leaves the last step's threads past the row
idle in the output (an `if` on whole vectors, so accesses stay vectors) and the
reductions (they combine their identity there); the copy fills those slots with the
row's last vector, which nothing reads.

A row over several warps passes each statistic through shared memory once
(`statistic_copies`); a warp per row keeps it in registers throughout (shuffles).
Such a row is alone in its thread block: the statistic is written by the row's
first thread, and TVM's barrier placement (`ThreadSync`) takes accesses at the same
index that depends on the innermost thread variable as each thread's own -- with
rows over threadIdx.y that index is the row's, so no barrier would separate the
write from the other threads' reads. With one row a block it depends on no thread
variable, and the barrier is there.
"""
from __future__ import annotations

from ..cpu.tir_build import iter_var, region, substitute

# 32-bit registers a thread may spend on its share of the rows, at most: with the
# statistics, addresses and temporaries beside them a thread stays at a register
# count that keeps many warps resident, which a memory-bound kernel needs to keep
# enough loads in flight; longer shares take the shared-memory form
REGISTER_WORDS = 32
COPY_SUFFIX = "_registers"


def register_words(row: int, threads: int, vector: int, staged_bytes: list[int]) -> int:
    """32-bit registers a thread needs to hold its share of each staged row (the
    padded last step included)."""
    steps = -(-row // (threads * vector))
    return sum(-(-steps * vector * b // 4) for b in staged_bytes)


def _plain(stmt, bufs: set[str], row_loops: int) -> bool:
    """Whether `stmt` reads each of `bufs` only at [row..., k], k its last iteration
    variable over the whole row and the rows its first ones, in order."""
    ivs = stmt.iter_vars
    if len(ivs) != row_loops + 1:
        return False
    for r in stmt.reads:
        if str(r.source.name) not in bufs:
            continue
        idx = [x.min for x in r.region]
        if len(idx) != row_loops + 1 or any(int(x.extent) != 1 for x in r.region):
            return False
        if not all(i.same_as(iv.var) for i, iv in zip(idx[:-1], ivs[:row_loops])) \
                or not idx[-1].same_as(ivs[-1].var) \
                or int(ivs[-1].dom.extent) != int(r.source.shape[-1]):
            return False
    return True


def register_program(sch, plan, staged: list[str], threads: int, vector: int):
    """The inlined program on `sch` with its row blocks regrouped for T = `threads`
    x V = `vector` lanes and the `staged` inputs read through per-thread copies
    (module docstring); None when a block reads them other than at [row..., k]."""
    from ..cpu.tir_build import splice

    names = (*plan.reductions, plan.output)
    stmts = {n: sch.get(sch.get_sblock(n)) for n in names}
    bufs = set(staged)
    if not all(_plain(s, bufs, plan.row_loops) for s in stmts.values()):
        return None
    out = stmts[plan.output]
    n = int(out.iter_vars[-1].dom.extent)
    rows = [int(iv.dom.extent) for iv in out.iter_vars[:plan.row_loops]]
    lay = _Layout(n, threads, vector)
    sources = {str(r.source.name): r.source for st in stmts.values() for r in st.reads
               if str(r.source.name) in bufs}
    copies = {b: lay.buffer(src, rows) for b, src in sources.items()}
    replace = {name: [lay.regroup(stmt, copies, plan.row_loops)] for name, stmt in stmts.items()}
    if any(r[0] is None for r in replace.values()):
        return None
    first = names[0]
    replace[first] = [lay.copy(sources[b], copies[b], rows) for b in staged] + replace[first]
    return splice(sch.mod["main"], replace, set(), list(copies.values()))


class _Layout:
    """A row of N elements as S steps x T threads x V lanes, k = (s T + t) V + v."""

    def __init__(self, n: int, threads: int, vector: int):
        self.n, self.threads, self.vector = n, threads, vector
        self.vectors = n // vector
        self.steps = -(-self.vectors // threads)

    def iters(self, reduce: bool):
        return [iter_var("v_s", self.steps, reduce), iter_var("v_t", self.threads, reduce),
                iter_var("v_v", self.vector, reduce)]

    def element(self, s, t, v):
        from tvm import tirx

        c = lambda x: tirx.const(x, "int32")  # noqa: E731
        return (s.var * c(self.threads) + t.var) * c(self.vector) + v.var

    def valid(self, s, t):
        """None, or for a row that ends inside a step: whether the thread's vector
        of step s is in the row."""
        from tvm import tirx

        if self.vectors % self.threads == 0:
            return None
        return s.var * tirx.const(self.threads, "int32") + t.var < tirx.const(self.vectors,
                                                                             "int32")

    def clamped(self, s, t, v):
        """The element k, or in a padded step past the row an element of the row's
        last vector (a load that stays in bounds; what it reads is dropped)."""
        from tvm import tirx

        if self.vectors % self.threads == 0:
            return self.element(s, t, v)
        c = lambda x: tirx.const(x, "int32")  # noqa: E731
        vec = tirx.min(s.var * c(self.threads) + t.var, c(self.vectors - 1))
        return vec * c(self.vector) + v.var

    def buffer(self, src, rows: list[int]):
        from tvm import tirx

        return tirx.decl_buffer([*rows, self.threads, self.steps, self.vector], src.dtype,
                                str(src.name) + COPY_SUFFIX, scope="local")

    def copy(self, src, dst, rows: list[int]):
        """dst[row..., t, s, v] = src[row..., k]. It writes every slot, so that it
        covers what its readers may read (TVM's `compute_at` asks it): a thread past
        the row's last vector loads that vector again (whole vectors, in bounds),
        and nobody reads its slots."""
        from tvm import s_tir, tirx

        r = [iter_var(f"v_r{i}", e, False) for i, e in enumerate(rows)]
        s, t, v = self.iters(False)
        at_src = [x.var for x in r] + [self.clamped(s, t, v)]
        at_dst = [x.var for x in r] + [t.var, s.var, v.var]
        block = s_tir.SBlock(r + [s, t, v], [region(src, at_src)], [region(dst, at_dst)],
                             str(dst.name), tirx.BufferStore(dst, tirx.BufferLoad(src, at_src),
                                                             at_dst))
        return _nest(r + [s, t, v], block)

    def regroup(self, stmt, copies: dict, row_loops: int):
        """`stmt` (a block over rows then the row's element k) over (row..., s, t, v),
        its reads of the staged inputs replaced by their copies; None when it is a
        reduction whose update is not `B = op(B, term)`.

        Past the row (a padded step) the output stores nothing (an `if` on the
        vector) and a reduction combines its identity (its other loads clamped into
        the row): a predicate on the block would leave its iteration not onto the
        (s, t, v) box, which TVM's cross-thread reduction refuses."""
        import tvm_ffi
        from tvm import ir, s_tir, tirx

        *keep, k = stmt.iter_vars
        reduce = int(k.iter_type) == 2
        s, t, v = self.iters(reduce)
        pairs = [(k.var, self.clamped(s, t, v) if reduce else self.element(s, t, v))]
        by_name = {str(c.name)[:-len(COPY_SUFFIX)]: c for c in copies.values()}
        own = [t.var, s.var, v.var]

        def swap(load):
            dst = by_name.get(str(load.source.name))
            if dst is None:
                return load
            return tirx.BufferLoad(dst, list(load.indices[:row_loops]) + own)

        def rewrite(x):
            return tvm_ffi.structural_map(substitute(x, pairs), ((ir.TensorLoad, swap),))

        def regions(rs):
            out = []
            for r in rs:
                dst = by_name.get(str(r.source.name))
                mins = [x.min for x in r.region]
                out.append(region(dst, mins[:row_loops] + own) if dst is not None else
                           tirx.BufferRegion(r.source, [
                               ir.Range.from_min_extent(substitute(m, pairs), x.extent)
                               for m, x in zip(mins, r.region)]))
            return out

        body, valid = rewrite(stmt.body), self.valid(s, t)
        if valid is not None and reduce:
            body = _guarded(body, stmt.init, valid)
            if body is None:
                return None
        elif valid is not None:
            body = tirx.IfThenElse(valid, body, None)
        block = s_tir.SBlock(list(keep) + [s, t, v], regions(stmt.reads), regions(stmt.writes),
                             stmt.name_hint, body,
                             None if stmt.init is None else rewrite(stmt.init),
                             stmt.alloc_buffers, stmt.match_buffers, stmt.annotations)
        return _nest(list(keep) + [s, t, v], block)


def _guarded(body, init, valid):
    """`B = op(B, term)` as `B = op(B, valid ? term : identity)`, the identity being
    what `init` stores; None for any other update."""
    from tvm import tirx

    from ..cpu.tir_build import is_load

    if not isinstance(body, tirx.BufferStore) or not isinstance(init, tirx.BufferStore):
        return None
    value = body.value
    if not isinstance(value, (tirx.Add, tirx.Mul, tirx.Max, tirx.Min)):
        return None

    def acc(x):
        return is_load(x) and x.source.same_as(body.buffer) \
            and all(i.same_as(j) for i, j in zip(x.indices, body.indices))

    a, b = value.a, value.b
    if acc(a):
        b = tirx.Select(valid, b, init.value)
    elif acc(b):
        a = tirx.Select(valid, a, init.value)
    else:
        return None
    return tirx.BufferStore(body.buffer, type(value)(a, b), body.indices)


def _nest(iters, block):
    """`block` in a loop nest binding its iter vars one to one."""
    from tvm import s_tir, tirx

    loops = [tirx.Var(iv.var.name.replace("v_", "") or "i", "int32") for iv in iters]
    stmt = s_tir.SBlockRealize(loops, tirx.const(True, "bool"), block)
    for loop, iv in reversed(list(zip(loops, iters))):
        stmt = tirx.For(loop, tirx.const(0, "int32"), iv.dom.extent, tirx.ForKind.SERIAL, stmt)
    return stmt


def schedule_registers(sch, plan, out_rest, ty) -> None:
    """Bind the register form's loops (each block's (s, t, v) loops, `out_rest` the
    output's): t over threadIdx.x, s unrolled (the registers' indices), v vectorised
    in the copies and the output, unrolled in the reductions; each copy computed per
    row at `ty`, before its first reader."""
    from ..blocks import blocks

    s, t, v = out_rest
    sch.bind(t, "threadIdx.x")
    sch.unroll(s)
    if int(sch.get(v).extent) > 1:
        sch.vectorize(v)
    for name in plan.reductions:
        s, t, v = _own(sch, sch.get_sblock(name))
        sch.reorder(s, v, t)
        sch.bind(t, "threadIdx.x")
        sch.unroll(s)
        sch.unroll(v)
    for block in blocks(sch):
        if not sch.get(block).name_hint.endswith(COPY_SUFFIX):
            continue
        sch.compute_at(block, ty, preserve_unit_loops=True)
        s, t, v = _own(sch, block)
        sch.bind(t, "threadIdx.x")
        sch.unroll(s)
        if int(sch.get(v).extent) > 1:
            sch.vectorize(v)


def _own(sch, block):
    return [lp for lp in sch.get_loops(block) if sch.get(lp).thread_binding is None][-3:]


def statistic_copies(sch, plan, block) -> list:
    """The reduction `block`'s statistic (in shared memory) copied into a register
    of every thread of the row, for the blocks that read it; the copies (one, or
    none when nothing reads it). Where a row spans several warps, TVM's cross-thread
    reduction leaves its result in shared memory, read through a volatile pointer:
    kept in a register, every use would load it again (a load per element), and a
    register copy of it would share the register's storage (`StorageRewrite`), so
    the statistic is written to shared memory and copied."""
    names = (*plan.reductions, plan.output)
    buf = str(sch.get(block).writes[0].source.name)
    readers = [sch.get_sblock(n) for n in names
               if any(str(r.source.name) == buf for r in sch.get(sch.get_sblock(n)).reads)]
    if not readers:
        return []
    index = next(i for i, r in enumerate(sch.get(readers[0]).reads)
                 if str(r.source.name) == buf)
    return [sch.cache_read(readers[0], index, "local", consumer_blocks=readers)]
