"""`split_reduce`: a grid-level reduction for reductions to few outputs.

The rows sketches give each output row one thread block; a reduction to one value per
batch (a norm, the sum of a whole tensor) then runs on one block of one SM while the
others idle. Here the reduction itself is split over the grid: its reduce loops are
fused and cut into (blocks x serial steps x threads). A first rfactor gives each
thread its partial (a register, summed over its serial steps), a second one a partial
per thread block, combined from its threads' by a cross-thread reduction (TVM's
lowering: warp shuffles, then shared memory across the warps). A second, small kernel
combines the partials of each output with one more cross-thread reduction, and
epilogues (a norm's sqrt) run after it. Consecutive threads read consecutive
elements, so every step of a warp is one coalesced load.

Any combiner TVM's rfactor knows (sum, max, min) and any number of reduce axes; a
reduce extent that (blocks x threads) does not divide ends in a predicated step.

Decisions: `<block>.blocks` (thread blocks of the first kernel), `<block>.threads`
(threads per block), `<block>.unroll`.
"""
from __future__ import annotations

from ..blocks import block_info, blocks
from ..decisions import Decider, InvalidCandidate
from ..sketch import Sketch
from .analysis import REDUCE, SPATIAL, classify, loop_kinds
from .common import UNROLL_STEPS, annotate_unroll, bind_unbound, inline_spatial, thread_options
from .limits import GpuLimits

# a reduction goes to "few outputs" when it has fewer rows than a large GPU has SMs
# (one block per row would leave most of them idle) and enough work to fill them
MAX_ROWS = 128
MIN_WORK = 1 << 16
BLOCK_COUNTS = (64, 128, 256, 512, 1024)


def _few_output(sch, block) -> bool:
    info = block_info(sch, block)
    if not info.is_reduction or info.other or len(sch.get(block).writes) != 1:
        return False
    rows = 1
    for e in info.spatial:
        rows *= e
    work = 1
    for e in info.reduce:
        work *= e
    return rows < MAX_ROWS and work >= MIN_WORK


class GridReductionSketch(Sketch):
    """Few-output reductions split over the grid (see the module docstring)."""

    name = "split_reduce"

    def __init__(self, limits: GpuLimits, reductions: tuple[str, ...]):
        self.limits = limits
        self.reductions = reductions

    def apply(self, sch, decide: Decider) -> None:
        inline_spatial(sch, classify(sch).spatial)
        for name in self.reductions:
            self._split(sch, decide, name)
        bind_unbound(sch, self.limits, None)

    def _split(self, sch, decide: Decider, name: str) -> None:
        block = sch.get_sblock(name)
        loops = sch.get_loops(block)
        kinds = loop_kinds(sch, block)
        if set(kinds) - {SPATIAL, REDUCE}:
            raise InvalidCandidate(f"split_reduce: {name} has loops of no kind")
        spatial = [lp for lp, k in zip(loops, kinds) if k == SPATIAL]
        reduce = [lp for lp, k in zip(loops, kinds) if k == REDUCE]
        if kinds != [SPATIAL] * len(spatial) + [REDUCE] * len(reduce):
            sch.reorder(*spatial, *reduce)
        fused = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
        work = int(sch.get(fused).extent)
        threads = decide.choice(f"{name}.threads",
                                [t for t in thread_options(self.limits) if t >= 64] or
                                thread_options(self.limits))
        # the combining kernel gives each part a thread: no more parts than a block has
        grid = decide.choice(f"{name}.blocks", [
            g for g in BLOCK_COUNTS if g * threads * 2 <= work
            and g <= self.limits.max_threads_per_block] or BLOCK_COUNTS[:1])
        unroll = decide.choice(f"{name}.unroll", UNROLL_STEPS)
        part, step, thread = sch.split(fused, [grid, None, threads])
        sch.reorder(thread, step)
        ndim = len(sch.get(block).writes[0].region)
        # a partial per (part, thread): each thread's serial sum over its steps (where a
        # ragged extent puts its predicate: TVM's cross-thread lowering leaves a block
        # alone when its predicate involves the block index), kept in a register
        per_thread = sch.rfactor(sch.fuse(part, thread), ndim)
        # then a partial per part: a cross-thread reduction over exactly `threads`
        part_thread = sch.get_loops(sch.get_sblock(name))[-1]
        part, thread = sch.split(part_thread, [grid, threads])
        per_part = sch.rfactor(part, ndim)
        bx = self._first_kernel(sch, per_thread, per_part, grid, threads)
        annotate_unroll(sch, bx, unroll)
        self._combine(sch, name)

    @staticmethod
    def _first_kernel(sch, per_thread, per_part, grid: int, threads: int):
        """(outputs x parts) thread blocks, each reducing its part: the per-thread
        partials stay where they are (compute_at would drop the ragged predicate), the
        cross-thread step moves in after them. Returns the blockIdx loop."""
        *outer, part_thread, step = sch.get_loops(per_thread)
        part, thread = sch.split(part_thread, [grid, threads])
        bx = sch.fuse(*outer, part) if outer else part
        sch.bind(bx, "blockIdx.x")
        sch.bind(thread, "threadIdx.x")
        sch.set_scope(per_thread, 0, "local")
        # every thread starts from the identity, also one whose steps all lie past the end
        sch.decompose_reduction(per_thread, step)
        sch.reverse_compute_at(per_part, bx)
        inner = sch.get_loops(per_part)[1:]
        kinds = loop_kinds(sch, per_part)[1:]
        sch.bind(next(lp for lp, k in zip(inner, kinds)
                      if k == REDUCE and int(sch.get(lp).extent) == threads), "threadIdx.x")
        return bx

    @staticmethod
    def _combine(sch, name: str) -> None:
        """The second kernel: one thread block per output, a thread per part."""
        block = sch.get_sblock(name)
        loops = sch.get_loops(block)
        kinds = loop_kinds(sch, block)
        rows = [lp for lp, k in zip(loops, kinds) if k == SPATIAL]
        parts = [lp for lp, k in zip(loops, kinds) if k == REDUCE]
        if len(parts) != 1:
            raise InvalidCandidate(f"split_reduce: {name}'s partials do not combine")
        if rows:
            sch.reorder(*rows, *parts)
        row = (sch.fuse(*rows) if len(rows) > 1 else rows[0]) if rows else \
            sch.add_unit_loop(block)
        sch.bind(row, "blockIdx.x")
        sch.bind(parts[0], "threadIdx.x")


def split_reduction_sketches(task, limits: GpuLimits) -> list[GridReductionSketch]:
    """`split_reduce` for a task whose reductions all go to few outputs."""
    from tvm import s_tir

    sch = s_tir.Schedule(task.mod)
    reductions = [sch.get(b).name_hint for b in blocks(sch) if block_info(sch, b).reduce]
    if not reductions or not all(_few_output(sch, sch.get_sblock(n)) for n in reductions):
        return []
    return [GridReductionSketch(limits, tuple(reductions))]
