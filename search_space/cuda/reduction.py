"""Cross-thread reduction for row reductions (softmax, norms): one row per thread
block, the reduction loop spread over threadIdx.x and combined across threads.

`rows`: every row reduction is its own kernel. `rows_fused`: the reductions are
computed inside the output kernel, once per row, right where the output row needs
them (the whole softmax or layer norm becomes one kernel and reads its row from DRAM
once per pass instead of once per kernel).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..blocks import block_info
from ..decisions import Decider, InvalidCandidate
from ..sketch import Sketch
from ..tir import free_vars
from .analysis import REDUCE, SPATIAL, classify, loop_kinds, loop_positions
from .common import (UNROLL_STEPS, annotate_unroll, bind_unbound, inline_spatial,
                     spatial_outer, thread_options)
from .limits import GpuLimits


def _row_thread_options(limits: GpuLimits, work: int) -> list[int]:
    """Thread counts for a reduction over `work` elements: never more than one warp
    beyond the work (idle threads only add to the combine step)."""
    return [t for t in thread_options(limits) if t <= max(limits.warp_size, work)]


def _reduce_extent(sch, block) -> int:
    n = 1
    for lp, k in zip(sch.get_loops(block), loop_kinds(sch, block)):
        if k == REDUCE:
            n *= int(sch.get(lp).extent)
    return n


def _spread_reduction(sch, block, threads: int) -> None:
    """Fuse the block's reduction loops and bind the inner `threads` to threadIdx.x."""
    red = [lp for lp, k in zip(sch.get_loops(block), loop_kinds(sch, block)) if k == REDUCE]
    fused = sch.fuse(*red) if len(red) > 1 else red[0]
    _, tx = sch.split(fused, [None, threads])
    sch.bind(tx, "threadIdx.x")


def cross_thread(sch, name: str, decide: Decider, limits: GpuLimits) -> None:
    """One row reduction as its own kernel: rows over blockIdx.x, the reduction over
    threadIdx.x."""
    block = sch.get_sblock(name)
    threads = decide.choice(f"{name}.threads",
                            _row_thread_options(limits, _reduce_extent(sch, block)))
    unroll = decide.choice(f"{name}.unroll", UNROLL_STEPS)
    sp, _ = spatial_outer(sch, block)
    if not sp:
        sp = [sch.add_unit_loop(block)]
    bx = sch.fuse(*sp) if len(sp) > 1 else sp[0]
    sch.bind(bx, "blockIdx.x")
    _spread_reduction(sch, block, threads)
    annotate_unroll(sch, bx, unroll)


@dataclass(frozen=True)
class FusionPlan:
    """The output block, how many of its leading loops index a row, and the row
    reductions to compute inside it (program order)."""

    output: str
    row_loops: int
    reductions: tuple[str, ...]


def _row_prefix(sch, out_block, buffer_name: str) -> int | None:
    """How many leading iteration variables of `out_block` index its reads of the
    named buffer, when they are exactly a prefix of its loops."""
    stmt = sch.get(out_block)
    ivs = [iv.var for iv in stmt.iter_vars]
    for region in stmt.reads:
        if str(region.source.name) != buffer_name:
            continue
        used = {pos for r in region.region for v in free_vars(r.min)
                for pos, iv in enumerate(ivs) if iv.same_as(v)}
        return len(used) if used == set(range(len(used))) else None
    return 0


def fusion_plan(sch, reductions: tuple[str, ...] | None = None) -> FusionPlan | None:
    """Where the row reductions (`classify`'s, or the named `reductions`) can be fused
    into the (single, spatial) output block, on a schedule whose elementwise blocks
    have been inlined; None when they cannot."""
    roles = classify(sch)
    candidates = roles.rows if reductions is None else reductions
    outs = [n for n in roles.outputs if block_info(sch, sch.get_sblock(n)).is_spatial]
    if len(outs) != 1 or not candidates:
        return None
    out = sch.get_sblock(outs[0])
    if None in loop_positions(sch, out) or set(loop_kinds(sch, out)) != {SPATIAL}:
        return None
    group, prefix = [], set()
    for name in reversed(candidates):
        block = sch.get_sblock(name)
        consumers = {sch.get(c).name_hint for c in sch.get_consumers(block)}
        if not consumers or not consumers <= {outs[0], *group}:
            continue
        if outs[0] in consumers:
            written = str(sch.get(block).writes[0].source.name)
            prefix.add(_row_prefix(sch, out, written))
        group.append(name)
    n_loops = len(sch.get_loops(out))
    if not group or len(prefix) != 1 or None in prefix:
        return None
    p = prefix.pop()
    if not 0 < p < n_loops:
        return None
    return FusionPlan(outs[0], p, tuple(reversed(group)))


class RowReductionSketch(Sketch):
    """Each row reduction its own cross-thread kernel; everything else inlined or bound."""

    name = "rows"

    def __init__(self, limits: GpuLimits):
        self.limits = limits

    def apply(self, sch, decide: Decider) -> None:
        roles = classify(sch)
        inline_spatial(sch, roles.spatial)
        for name in roles.rows:
            cross_thread(sch, name, decide, self.limits)
        bind_unbound(sch, self.limits, decide)


class FusedRowReductionSketch(Sketch):
    """The row reductions computed per row inside the output kernel (one kernel)."""

    name = "rows_fused"

    def __init__(self, limits: GpuLimits):
        self.limits = limits

    def apply(self, sch, decide: Decider) -> None:
        roles = classify(sch)
        inline_spatial(sch, roles.spatial)
        plan = fusion_plan(sch)
        if plan is None:
            raise InvalidCandidate("rows_fused: the row reductions do not feed one output")
        out = sch.get_sblock(plan.output)
        loops = sch.get_loops(out)
        row_work = 1
        for lp in loops[plan.row_loops:]:
            row_work *= int(sch.get(lp).extent)
        threads = decide.choice(f"{plan.output}.threads", _row_thread_options(self.limits, row_work))
        unroll = decide.choice(f"{plan.output}.unroll", UNROLL_STEPS)
        rows = loops[:plan.row_loops]
        bx = sch.fuse(*rows) if len(rows) > 1 else rows[0]
        rest = loops[plan.row_loops:]
        inner = sch.fuse(*rest) if len(rest) > 1 else rest[0]
        sch.bind(bx, "blockIdx.x")
        _, tx = sch.split(inner, [None, threads])
        sch.bind(tx, "threadIdx.x")
        for name in reversed(plan.reductions):
            block = sch.get_sblock(name)
            sch.compute_at(block, bx, preserve_unit_loops=True)
            # the row's result lives in the thread block, read by all its threads
            sch.set_scope(block, 0, "shared")
            _spread_reduction(sch, block, threads)
        annotate_unroll(sch, bx, unroll)
        bind_unbound(sch, self.limits, decide)
