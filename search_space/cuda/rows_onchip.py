"""`rows_onchip`: memory-bound row kernels (softmax, layer norm, RMS norm and their
backward kernels; any program whose row reductions all feed one elementwise output)
as one kernel that reads each row from DRAM once.

The row reductions are computed inside the output kernel (as `rows_fused` does), and
every input the kernel reads more than once per row (x of a norm; x and dy of its
backward) may be staged in shared memory first, with 128-bit loads: the reductions and
the output then read the staged row, so DRAM sees one pass over the input and one over
the output, however many passes the math makes. The elements a thread reads are the
ones it writes, V consecutive per thread, so the output's loads and stores are vectors
too. The reductions combine across a row's threads with warp shuffles, then shared
memory across its warps (TVM's cross-thread reduction); each thread keeps the result
in a register.

Where the program's statistics have a one-pass form (online softmax; shifted sums for
mean and variance; `rows_one_pass.py`), the `rows.form` decision may take it: each
thread sweeps its elements of the row once, keeping V running lanes in registers, and
the lanes fold through the same shuffles. Without staging, this reads the row twice
(statistics, output) instead of once per pass.

Where a thread's share of the row is small (`rows_registers.py`), the row may instead
stay in registers: each thread loads the elements it will write once, computes the
statistics from them and writes the output from them (no shared memory for the row).

Decisions (all samples fit the target by construction):
- `rows.vector`: elements per thread per access, V: the widest that holds 16 bytes at
  most and divides the row length (so every vector is aligned: 4 float32, 8 float16;
  an odd row takes V = 1). One option: a memory-bound row gains nothing from
  narrower accesses, and 128-bit loads are what the DRAM bandwidth needs;
- `rows.threads`: threads per row, T (a warp for short rows, up to the block for long
  ones; the reductions then combine through warp shuffles and shared memory);
- `rows.form`: `two_pass` (the program as written) or `one_pass` (where it has a
  one-pass form and a row holds at least T x V elements);
- `rows.stage`: `registers` (two-pass, while each thread's share of the rows it
  reads more than once takes at most `REGISTER_WORDS` registers), `shared` (row
  staged on chip, while a row fits the shared memory) or `global` (each pass reads
  the row again, from L1/L2 for short rows);
- `rows.per_block`: rows per thread block, R (R x T threads; several short rows per
  block keep the SMs' warps busy; staged in shared memory, R rows must fit);
- `rows.unroll`.
A row that is no whole number of T x V vectors ends in a predicated step (the vector
width always divides the row, so the predicate guards whole vectors).
"""
from __future__ import annotations

from ..blocks import block_info, blocks
from ..decisions import Decider, InvalidCandidate
from ..sketch import Sketch
from .analysis import REDUCE, classify, loop_kinds
from .common import UNROLL_STEPS, annotate_unroll, bind_unbound, inline_spatial, thread_options
from .limits import GpuLimits
from .reduction import FusionPlan, fusion_plan
from .rows_one_pass import gpu_one_pass_form, one_pass_rows
from .rows_registers import (COPY_SUFFIX, REGISTER_WORDS, register_program, register_words,
                             schedule_registers, statistic_copies)

ROWS_PER_BLOCK = (1, 2, 4, 8, 16)
VECTOR_BYTES = 16


def _dtype_bytes(dtype: str) -> int:
    import tvm

    t = tvm.DataType(str(dtype))
    return max(1, t.bits // 8) * t.lanes


def row_plan(sch) -> FusionPlan | None:
    """Where every reduction of the (inlined) program can be computed inside the one
    spatial output block, one row at a time; None when they cannot. Unlike
    `fusion_plan`, any reduction counts (a backward kernel's dy * gamma sum reads a
    vector shared by all rows, which `classify` calls tiled)."""
    reductions = tuple(sch.get(b).name_hint for b in blocks(sch)
                       if block_info(sch, b).is_reduction and not block_info(sch, b).is_output)
    return fusion_plan(sch, reductions) if reductions else None


def _staged_buffers(sch, plan: FusionPlan) -> list[tuple[str, str, int]]:
    """(buffer, first consumer, read index) of each function input read by two or more
    blocks of the kernel at a full row (indexed by the row and the row's element)."""
    params = {str(b.name) for b in sch.mod["main"].params}
    seen: dict[str, list] = {}
    for name in (*plan.reductions, plan.output):
        stmt = sch.get(sch.get_sblock(name))
        for i, region in enumerate(stmt.reads):
            buf = str(region.source.name)
            if buf in params and len(region.region) >= 2:
                seen.setdefault(buf, []).append((name, i))
    return [(buf, uses[0][0], uses[0][1]) for buf, uses in seen.items() if len(uses) >= 2]


def _row_extents(stmt, plan: FusionPlan) -> tuple[int, ...]:
    """The extents of a reduction block's first `plan.row_loops` spatial iter vars."""
    spatial = [int(iv.dom.extent) for iv in stmt.iter_vars if int(iv.iter_type) == 0]
    return tuple(spatial[:plan.row_loops])


def _widest_bytes(sch, plan: FusionPlan) -> int:
    """Bytes of the widest value the output block computes with (a float16 norm that
    computes in float32 vectorises float32 arithmetic: V x 4 bytes must fit too)."""
    from tvm.ir import ExprWithOp

    from ..tir import expr_dtype, iter_nodes

    stmt = sch.get(sch.get_sblock(plan.output))
    dtypes = [expr_dtype(n) for n in iter_nodes(stmt.body) if isinstance(n, ExprWithOp)]
    widths = [_dtype_bytes(d) for d in dtypes if d.startswith(("float", "bfloat"))]
    return max(widths or [1])


def _widest_vector(row: int, elem_bytes: int) -> int:
    """The most elements of `elem_bytes` a 16-byte access holds that divide the row
    (a power of two: 4 float32 where the row is a multiple of 4, 1 for an odd row)."""
    v = 1
    while 2 * v * elem_bytes <= VECTOR_BYTES and row % (2 * v) == 0:
        v *= 2
    return v


def _split_row(sch, loop, vector: int, threads: int):
    """(step, thread, lane) of a row loop: V-element vectors, T threads a step."""
    extent = int(sch.get(loop).extent)
    outer, lane = sch.split(loop, [extent // vector, vector])
    step, tx = sch.split(outer, [None, threads])
    return step, tx, lane


def _geometry(sch, plan: FusionPlan) -> tuple[int, int, str]:
    """(rows, row length, output dtype) of the plan's output block."""
    out = sch.get_sblock(plan.output)
    extents = [int(sch.get(lp).extent) for lp in sch.get_loops(out)]
    rows = row = 1
    for e in extents[:plan.row_loops]:
        rows *= e
    for e in extents[plan.row_loops:]:
        row *= e
    return rows, row, str(sch.get(out).writes[0].source.dtype)


def _reserve(reductions: int, per_block: int, threads: int, lim: GpuLimits) -> int:
    """Shared bytes beside the staged rows: each reduction's one value per warp and
    result, per row of the block."""
    return reductions * per_block * (threads // lim.warp_size + 1) * 8


def _inlined_plan(func):
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    inline_spatial(sch, classify(sch).spatial)
    return sch, row_plan(sch)


class OnChipRowSketch(Sketch):
    """Rows staged on chip, vector loads, warp or block per row, the statistics in one
    pass where the math allows (module docstring)."""

    name = "rows_onchip"

    def __init__(self, limits: GpuLimits):
        self.limits = limits
        # func -> (row length, widest value's bytes, has pairs, staged rows' bytes)
        self._shapes: dict = {}
        self._forms: dict = {}   # (func, threads, vector) -> one-pass program or None
        self._registers: dict = {}   # (func, threads, vector) -> register program or None

    def program(self, func, decide: Decider):
        """The vector width and threads per row, the form (`rows.form`) and where the
        row lives (`rows.stage`): the task's program, its one-pass form for these
        lanes where it has one, or its register form (`rows_registers.py`)."""
        if func not in self._shapes:
            sch, plan = _inlined_plan(func)
            if plan is None:
                raise InvalidCandidate("rows_onchip: the row reductions do not feed one output")
            _, row, dtype = _geometry(sch, plan)
            staged = [_dtype_bytes(sch.get(sch.get_sblock(c)).reads[i].source.dtype)
                      for _, c, i in _staged_buffers(sch, plan)]
            self._shapes[func] = row, max(_dtype_bytes(dtype), _widest_bytes(sch, plan)), \
                bool(one_pass_rows(func)), staged, len(plan.reductions)
        row, widest, pairs, staged, reductions = self._shapes[func]
        lim = self.limits
        # always the widest: on a memory-bound row a narrower access only adds
        # instructions (a short row gets several rows per block instead)
        vector = decide.choice("rows.vector", [_widest_vector(row, widest)])
        per_thread = -(-row // vector)
        threads = decide.choice("rows.threads", [t for t in thread_options(lim)
                                                 if t <= max(lim.warp_size, per_thread)])
        key = (func, threads, vector)
        if key not in self._forms:
            self._forms[key] = gpu_one_pass_form(func, threads, vector) if pairs else None
        form = self._forms[key]
        one = decide.choice("rows.form", ["two_pass", "one_pass"] if form is not None
                            else ["two_pass"])
        regs = one == "two_pass" and bool(staged) and \
            register_words(row, threads, vector, staged) <= REGISTER_WORDS and \
            self._register_form(func, threads, vector) is not None
        # shared: while one row fits (rows per block are decided to fit, `apply`)
        fits = bool(staged) and row * sum(staged) + _reserve(reductions, 1, threads, lim) \
            <= lim.max_shared_memory_per_block
        stage = decide.choice("rows.stage", ["registers"] * regs + ["shared"] * fits
                              + ["global"])
        if stage == "registers":
            return self._register_form(func, threads, vector)
        return form if one == "one_pass" else func

    def _register_form(self, func, threads: int, vector: int):
        key = (func, threads, vector)
        if key not in self._registers:
            sch, plan = _inlined_plan(func)
            staged = [b for b, _, _ in _staged_buffers(sch, plan)]
            self._registers[key] = register_program(sch, plan, staged, threads, vector)
        return self._registers[key]

    def apply(self, sch, decide: Decider) -> None:
        # (the register form's copies are spatial blocks that stay)
        inline_spatial(sch, [n for n in classify(sch).spatial if not n.endswith(COPY_SUFFIX)])
        plan = row_plan(sch)
        if plan is None:
            raise InvalidCandidate("rows_onchip: the row reductions do not feed one output")
        rows, row, _ = _geometry(sch, plan)
        out = sch.get_sblock(plan.output)
        loops = sch.get_loops(out)
        staged = _staged_buffers(sch, plan)
        lim = self.limits
        vector, threads = decide.made["rows.vector"], decide.made["rows.threads"]
        stage = decide.made["rows.stage"]
        row_bytes = row * sum(_dtype_bytes(sch.get(sch.get_sblock(c)).reads[i].source.dtype)
                              for _, c, i in staged)
        # registers over several warps: one row a block (`rows_registers.py`, on
        # statistics in shared memory); staged: the block's rows fit shared memory
        alone = stage == "registers" and threads > lim.warp_size
        per_block = decide.choice("rows.per_block", [
            r for r in ROWS_PER_BLOCK
            if r * threads <= lim.max_threads_per_block and (r == 1 or r <= rows // 2)
            and not (alone and r > 1) and (stage != "shared" or r * row_bytes + _reserve(
                len(plan.reductions), r, threads, lim) <= lim.max_shared_memory_per_block)])
        unroll = decide.choice("rows.unroll", UNROLL_STEPS)

        row_loops = loops[:plan.row_loops]
        fused_rows = sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
        bx, ty = sch.split(fused_rows, [None, per_block])
        sch.bind(bx, "blockIdx.x")
        sch.bind(ty, "threadIdx.y")
        rest = loops[plan.row_loops:]
        if stage == "registers":   # the program's (s, t, v) loops (rows_registers.py)
            self._registers_at(sch, plan, rest, bx, ty, unroll, decide)
            return
        inner = sch.fuse(*rest) if len(rest) > 1 else rest[0]
        _, tx, lane = _split_row(sch, inner, vector, threads)
        sch.bind(tx, "threadIdx.x")
        if vector > 1:
            sch.vectorize(lane)
        lanes: set[str] = set()
        partials, folds = set(), set()
        for name in plan.reductions:   # lane partials write buffers their folds read
            stmt = sch.get(sch.get_sblock(name))
            if block_info(sch, sch.get_sblock(name)).spatial != _row_extents(stmt, plan):
                lanes |= {str(w.source.name) for w in stmt.writes}
                partials.add(name)
            elif any(str(r.source.name) in lanes for r in stmt.reads):
                folds.add(name)
        for name in reversed(plan.reductions):
            block = sch.get_sblock(name)
            sch.compute_at(block, ty, preserve_unit_loops=True)
            # every thread of the row gets the reduced value (the warp shuffles
            # broadcast it) and keeps it in a register; a thread's lanes too
            for i in range(len(sch.get(block).writes)):
                sch.set_scope(block, i, "local")
            if name in partials:
                self._lane_partial(sch, block, vector, stage == "global")
            elif name in folds:
                self._fold(sch, block)
            else:
                self._spread(sch, block, threads)
        if stage == "shared":
            for buf, consumer, index in staged:
                self._stage(sch, plan, buf, consumer, index, bx, per_block, threads)
        annotate_unroll(sch, bx, unroll)
        bind_unbound(sch, lim, decide)

    def _registers_at(self, sch, plan, rest, bx, ty, unroll: int, decide) -> None:
        """The register form: every reduction per row at `ty`, its result in a
        register of each thread of the row (a row over several warps passes it
        through shared memory once, `schedule_registers`), the loops bound by
        `schedule_registers`."""
        warps = decide.made["rows.threads"] > self.limits.warp_size
        reductions = [sch.get_sblock(n) for n in plan.reductions]
        placed = []
        for block in reductions:
            placed += [block] + (statistic_copies(sch, plan, block) if warps else [])
        for block in reversed(placed):
            sch.compute_at(block, ty, preserve_unit_loops=True)
        for block in reductions:   # (after compute_at: a row's threads make its value)
            for i in range(len(sch.get(block).writes)):
                sch.set_scope(block, i, "shared" if warps else "local")
        schedule_registers(sch, plan, rest, ty)
        annotate_unroll(sch, bx, unroll)
        bind_unbound(sch, self.limits, decide)

    @staticmethod
    def _lane_partial(sch, block, vector: int, from_global: bool) -> None:
        """A one-pass lane block (row, t, step, v): t over threadIdx.x, the V lanes of
        a step unrolled (the update, a select per lane, stays scalar). Reading global
        memory, a step's V elements are first loaded as one vector into registers
        (where the block reads single elements: a norm's block also reads the row's
        first element, and reads the staged row instead)."""
        own = [lp for lp in sch.get_loops(block) if sch.get(lp).thread_binding is None]
        t, step, v = own[-3:]
        sch.bind(t, "threadIdx.x")
        if vector == 1:
            return
        sch.unroll(v)
        reads = sch.get(block).reads
        single = [i for i, r in enumerate(reads) if all(int(x.extent) == 1 for x in r.region)]
        if from_global and len(single) == len(reads):
            for i in reversed(single):
                cache = sch.cache_read(block, i, "local", consumer_blocks=[block])
                sch.compute_at(cache, step, preserve_unit_loops=True)
                sch.vectorize(sch.get_loops(cache)[-1])

    @staticmethod
    def _fold(sch, block) -> None:
        """A fold of the lanes (row, t, v): t over threadIdx.x (each thread folds its
        own V lanes, then the threads' values combine through shuffles)."""
        own = [lp for lp in sch.get_loops(block) if sch.get(lp).thread_binding is None]
        t, v = own[-2:]
        sch.reorder(v, t)
        sch.bind(t, "threadIdx.x")

    @staticmethod
    def _spread(sch, block, threads: int) -> None:
        """The reduction's row loops over threadIdx.x (TVM's cross-thread reduction:
        warp shuffles, then shared memory across the warps of a row)."""
        kinds = loop_kinds(sch, block)
        red = [lp for lp, k in zip(sch.get_loops(block), kinds)
               if k == REDUCE and sch.get(lp).thread_binding is None]
        fused = sch.fuse(*red) if len(red) > 1 else red[0]
        _, tx = sch.split(fused, [None, threads])
        sch.bind(tx, "threadIdx.x")

    @staticmethod
    def _stage(sch, plan, buf, consumer, index, bx, per_block, threads) -> None:
        """Copy the block's rows of `buf` into shared memory before its rows are
        reduced, all its threads together, with loads of up to 16 bytes (V float32,
        2V float16 where the arithmetic is float32); every block of the kernel reads
        the copy."""
        users = [sch.get_sblock(n) for n in (*plan.reductions, plan.output)
                 if any(str(r.source.name) == buf for r in sch.get(sch.get_sblock(n)).reads)]
        read = sch.get(sch.get_sblock(consumer)).reads[index].source
        # a pure copy: as wide as 16 bytes allow, whatever the arithmetic's width
        vector = _widest_vector(int(read.shape[-1]), _dtype_bytes(read.dtype))
        cache = sch.cache_read(sch.get_sblock(consumer), index, "shared", consumer_blocks=users)
        sch.compute_at(cache, bx, preserve_unit_loops=True)
        own = [lp for lp in sch.get_loops(cache) if sch.get(lp).thread_binding is None]
        # the vector splits off the row's last axis alone: a last, partial row block
        # then guards whole vectors, which stay vectors
        outer, lane = sch.split(own[-1], [int(sch.get(own[-1]).extent) // vector, vector])
        loop = sch.fuse(*own[:-1], outer) if len(own) > 1 else outer
        _, ty, tx = sch.split(loop, [None, per_block, threads])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        if vector > 1:
            sch.vectorize(lane)


def onchip_sketches(sch, limits: GpuLimits) -> list[OnChipRowSketch]:
    """`rows_onchip` for a program (elementwise stages inlined on `sch`) whose row
    reductions all feed one output."""
    inline_spatial(sch, classify(sch).spatial)
    return [OnChipRowSketch(limits)] if row_plan(sch) is not None else []
