"""Multi-level tiling of contractions (matmul, conv, ...) for CPUs.

Spatial loops are split in four levels and reduction loops in two, interleaved as
S0 S1 R0 S2 R1 S3: S0 runs in parallel, S3 is the register tile (its vector axis
innermost), R1 streams through the reduction while the accumulators stay in
registers, and S1/S2/R0 block for the caches. The output tile is written back
through a cache stage, or through the elementwise consumer fused behind it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .analysis import analyse
from .cpu_common import (CpuParams, annotate_unroll, finish_root_blocks, fuse_consumers,
                         inline_producers, vector_tile, vectorize_inner)
from .cpu_packing import PackPlan, pack_operand
from .decisions import Decider


@dataclass(frozen=True)
class TilePlan:
    """How one contraction block is tiled: its vector axis, and the operand packed
    into a blocked layout along that axis (or None)."""

    block: str
    vec_iter: str
    pack: PackPlan | None = None


class TileSketch:
    """SSRSRS tiling of every contraction block of the task; the rest is inlined,
    fused, or parallelised and vectorised at the root."""

    def __init__(self, name: str, plans: tuple[TilePlan, ...], params: CpuParams):
        self.name = name
        self.plans = plans
        self.params = params

    def apply(self, sch, decide: Decider) -> None:
        inline_producers(sch, decide, keep=frozenset(p.block for p in self.plans))
        done = set()
        for plan in self.plans:
            done |= tile_block(sch, decide, plan, self.params)
        finish_root_blocks(sch, self.params, done)


def _decide_tiles(decide: Decider, info, plan: TilePlan, params: CpuParams) -> dict:
    """Tile factors per iter var (extent-1 iter vars get none). The register tile is
    bounded: accumulators (vectors) = product of S3 factors / lanes."""
    p = plan.block
    tiles = {}
    vec = next(v for v in info.spatial if v.name == plan.vec_iter)
    tiles[vec.name] = vector_tile(decide, f"{p}.{vec.name}", vec.extent, 4, params)
    budget = max(1, params.max_accumulators // -(-tiles[vec.name][-1] // params.lanes))
    for v in info.spatial:
        if v.name == vec.name or v.extent == 1:
            continue
        tiles[v.name] = decide.tile(f"{p}.{v.name}", v.extent, 4, budget)
        budget = max(1, budget // tiles[v.name][-1])
    for v in info.reduce:
        if v.extent > 1:
            tiles[v.name] = decide.tile(f"{p}.{v.name}", v.extent, 2, v.extent)
    return tiles


def _split_and_reorder(sch, block, info, tiles: dict, vec_iter: str):
    """Split every loop by its tile and reorder to S0 S1 R0 S2 R1 S3 (vector axis last
    in each spatial group). Returns the spatial groups and the reduction groups."""
    loops = sch.get_loops(block)
    s_groups = [[], [], [], []]
    r_groups = [[], []]
    vec_parts = None
    for iv, loop in zip(info.iters, loops):
        if iv.name not in tiles:  # extent 1
            (s_groups[0] if iv.kind == "S" else r_groups[0]).append(loop)
            continue
        parts = sch.split(loop, list(tiles[iv.name]))
        if iv.kind == "R":
            for level, part in enumerate(parts):
                r_groups[level].append(part)
        elif iv.name == vec_iter:
            vec_parts = parts
        else:
            for level, part in enumerate(parts):
                s_groups[level].append(part)
    if vec_parts is not None:
        for level, part in enumerate(vec_parts):
            s_groups[level].append(part)
    order = s_groups[0] + s_groups[1] + r_groups[0] + s_groups[2] + r_groups[1] + s_groups[3]
    sch.reorder(*order)
    return s_groups, r_groups


def _write_stage(sch, block, decide: Decider, prefix: str):
    """The stage that writes the output tile: the fused elementwise consumer when
    there is one, else a cache of the accumulator."""
    consumer = fuse_consumers(sch, block)
    if consumer is not None:
        return consumer
    if not decide.choice(f"{prefix}.cache_write", (True, False)):
        return None
    return sch.cache_write(block, 0, "global")


def tile_block(sch, decide: Decider, plan: TilePlan, params: CpuParams) -> set:
    """Tile one contraction block; returns the names of the blocks it scheduled."""
    block = sch.get_sblock(plan.block)
    info = analyse(sch, block)
    tiles = _decide_tiles(decide, info, plan, params)
    scheduled = {plan.block}
    if plan.pack is not None:  # the packing stage is parallelised with the other root blocks
        pack_operand(sch, block, plan.pack, tiles[plan.vec_iter][-1])
    write = _write_stage(sch, block, decide, plan.block)
    s_groups, r_groups = _split_and_reorder(sch, block, info, tiles, plan.vec_iter)
    level = 2
    if write is not None:
        scheduled.add(sch.get(write).name_hint)
        level = decide.choice(f"{plan.block}.write_at", (1, 2))
        anchor = (s_groups[0] + s_groups[1])[-1] if level == 2 else s_groups[0][-1]
        sch.reverse_compute_at(write, anchor)
    outer = _parallelise(sch, s_groups, level, params)
    if tiles.get(plan.vec_iter, (1,))[-1] > 1:
        sch.vectorize(s_groups[3][-1])
    reduce_loops = r_groups[0] + r_groups[1]
    if reduce_loops:
        init = sch.decompose_reduction(block, reduce_loops[0])
        vectorize_inner(sch, init, params)
    if write is not None:
        vectorize_inner(sch, write, params)
    annotate_unroll(sch, outer, decide, plan.block)
    return scheduled


def _parallelise(sch, s_groups, level: int, params: CpuParams):
    """Fuse the outer tile loops and run them in parallel. S1 joins S0 when S0 alone
    gives the cores too few chunks and nothing sits between the two levels."""
    loops = list(s_groups[0])
    extent = _product(sch, loops)
    if extent < 4 * params.cores and level == 2:
        loops += s_groups[1]
        extent = _product(sch, loops)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if extent > 1:
        sch.parallel(fused)
    return fused


def _product(sch, loops) -> int:
    out = 1
    for loop in loops:
        out *= int(sch.get(loop).extent)
    return out
