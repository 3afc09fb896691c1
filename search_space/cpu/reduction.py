"""Row-wise schedules for reductions without reuse (softmax, layer norm, row sums).

The output's leading spatial loops become one parallel "row" loop; every other stage
is computed inside it, so a row's intermediates (its max, its sum, its exp values)
live in a small buffer that stays in cache. Row reductions are vectorised by
splitting off a vector of partial results (rfactor); elementwise stages are
vectorised along their inner loop.
"""
from __future__ import annotations

from ..analysis import BlockAnalysis, loop_kinds
from ..blocks import blocks
from ..decisions import Decider
from ..sketch import Sketch
from .reciprocal import reciprocal_form
from .common import (
    CpuParams,
    annotate_unroll,
    inline_candidates,
    inline_producers,
    unchecked,
    vector_width,
    vectorize_inner,
)


def vector_widths(extent: int, params: CpuParams) -> tuple[int, ...]:
    """Vector widths (multiples of the lanes) that divide `extent`."""
    widths = tuple(params.lanes * m for m in (1, 2, 4) if extent % (params.lanes * m) == 0)
    if widths:
        return widths
    return (vector_width(extent, params),)


def tail_widths(extent: int, params: CpuParams) -> tuple[int, ...]:
    """`vector_widths`, then the multiples of the lanes up to `extent` that leave a
    tail (1000 on 16 lanes): the tail runs as a masked vector or peeled off (a
    decision, `tail`), never as scalar code."""
    ragged = tuple(params.lanes * m for m in (1, 2, 4)
                   if params.lanes * m <= extent and extent % (params.lanes * m))
    return vector_widths(extent, params) + ragged


def split_tail(sch, decide: Decider, loop, width: int, name: str):
    """Split `loop` into vectors of `width` and vectorise them; a ragged tail is
    masked (the vector loop runs under a predicate) or peeled into its own shorter
    vector loop (TVM's loop partitioning), as decided. Returns the outer loop."""
    extent = int(sch.get(loop).extent)
    outer, inner = sch.split(loop, [None, width])
    sch.vectorize(inner)
    if extent % width and decide.choice(f"{name}.tail", ("masked", "peeled")) == "peeled":
        sch.annotate(outer, "pragma_loop_partition_hint", 1)
    return outer


def row_depth(infos: list[BlockAnalysis], out: BlockAnalysis) -> int:
    """How many leading loops of the output form the row loop: the spatial loops
    every stage shares (an elementwise output keeps its last loop to vectorise)."""
    lead = 0
    for v in out.iters:
        if v.kind != "S":
            break
        lead += 1
    if out.is_spatial:
        lead = min(lead, len(out.iters) - 1)
    return min([lead] + [len(i.spatial) for i in infos if i.name != out.name])


class RowSketch(Sketch):
    """Parallel rows, every stage computed at the row, vectorised inner loops."""

    name = "rows"
    math_variants = True

    def __init__(self, infos: tuple[BlockAnalysis, ...], inline: tuple[str, ...],
                 params: CpuParams):
        self.infos = infos      # the unscheduled program's blocks, in program order
        self.inline = inline
        self.params = params
        self.out = next(i for i in infos if i.is_output)
        self.depth = row_depth(list(infos), self.out)
        self._rewritten: tuple | None = None   # (the computation, its reciprocal form)

    def program(self, func, decide: Decider):
        """Divisions by a row's statistic as multiplications by its reciprocal. The
        rewrite is made once per computation: the same object each time, so what the
        search space derives from it (the fast-math form) is derived once too."""
        if self._rewritten is None or self._rewritten[0] is not func:
            self._rewritten = (func, reciprocal_form(func))
        return self._rewritten[1]

    def apply(self, sch, decide: Decider) -> None:
        sch = unchecked(sch)
        inlined = inline_producers(sch, decide, self.inline)
        infos = [i for i in self.infos if i.name not in inlined]
        out = self.out
        partials = {p for info in infos if info.is_reduction
                    for p in [self._rfactor(sch, decide, info)] if p is not None}
        # a reduction of several values at once (the online softmax's lanes of (max,
        # sum)) that keeps a spatial axis past the row is already a vector of partials
        partials |= {i.name for i in infos if i.is_reduction and len(i.writes) > 1
                     and len(i.spatial) > self.depth}
        loops = sch.get_loops(sch.get_sblock(out.name))
        if out.is_spatial:
            width = decide.choice(f"{out.name}.vector", tail_widths(out.iters[-1].extent,
                                                                   self.params))
            split_tail(sch, decide, loops[-1], width, out.name)
        row = sch.fuse(*loops[:self.depth]) if self.depth > 1 else loops[0]
        sch.parallel(row)
        stages = [sch.get(b).name_hint for b in blocks(sch)]
        for name in reversed(stages):
            if name != out.name:
                sch.compute_at(sch.get_sblock(name), row)
        spatial = {i.name for i in infos if i.is_spatial and i.name != out.name}
        for name in stages:
            if name in partials:
                self._vectorise_partial(sch, sch.get_sblock(name))
            elif name in spatial:
                vectorize_inner(sch, sch.get_sblock(name), self.params, keep=1)
        annotate_unroll(sch, row, decide, out.name)

    def _rfactor(self, sch, decide: Decider, info: BlockAnalysis) -> str | None:
        """Split a vector of partial results off the block's reduction (a decision);
        returns the name of the partial-reduction block, or None when not split."""
        block = sch.get_sblock(info.name)
        kinds = loop_kinds(sch, block)
        # TVM's rfactor knows single-value reducers only
        if kinds.count("R") != 1 or kinds[-1] != "R" or len(info.writes) != 1:
            return None
        loop = sch.get_loops(block)[-1]
        extent = int(sch.get(loop).extent)
        widths = vector_widths(extent, self.params)  # a part vector when no whole fits
        if widths == (1,):
            return None
        # always split when a vector fits: a scalar float reduction does not
        # vectorise (LLVM keeps its order), and was 4-6x slower in every sample
        width = decide.choice(f"{info.name}.rfactor", widths)
        inner = sch.split(loop, [None, width])[1]
        return sch.get(sch.rfactor(inner, len(info.writes[0].uses))).name_hint

    def _vectorise_partial(self, sch, block) -> None:
        """Inside the row: reduction loop outside, the vector of partials inside, its
        initialisation hoisted and vectorised."""
        loops = sch.get_loops(block)
        kinds = loop_kinds(sch, block)
        first = next((i for i, k in enumerate(kinds) if k in "RS" and i > 0), None)
        if first is None:  # rows of one element: nothing to vectorise
            return
        inner = loops[first:]
        ordered = [lp for lp, k in zip(inner, kinds[first:]) if k == "R"] + \
                  [lp for lp, k in zip(inner, kinds[first:]) if k != "R"]
        sch.reorder(*ordered)
        sch.vectorize(ordered[-1])  # before decomposing: the update alone is no reduction
        init = sch.decompose_reduction(block, ordered[0])
        vectorize_inner(sch, init, self.params, keep=1)


def row_sketches(sch, infos, params: CpuParams) -> list[RowSketch]:
    """`rows` for a program of row reductions and elementwise stages with one output
    that has an outer loop to parallelise and an inner one to vectorise."""
    outs = [i for i in infos if i.is_output]
    if len(outs) != 1 or not all(i.loops_bound for i in infos):
        return []
    if any(i.is_contraction for i in infos) or row_depth(infos, outs[0]) < 1:
        return []
    return [RowSketch(tuple(infos), inline_candidates(sch), params)]
