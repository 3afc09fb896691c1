"""Multi-level tiling of contractions (matmul, conv, ...) for CPUs.

Spatial loops are split in four levels and reduction loops in two, interleaved as
S0 S1 R0 S2 R1 S3: S0 runs in parallel, S3 is the register tile (its vector axis
innermost), R1 streams through the reduction while the accumulators stay in
registers, and S1/S2/R0 block for the caches. The output tile is written back
through a cache stage, or through the elementwise consumer fused behind it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..analysis import BlockAnalysis, computes_conditionally, param_buffers
from ..decisions import Decider, divisors
from ..sketch import Sketch
from .common import (CpuParams, annotate_unroll, consumer_chain, finish_root_blocks,
                     fold_chain, inline_candidates, inline_producers, unchecked, vector_tile,
                     vectorize_inner, vectorize_registers)
from .packing import PackPlan, find_pack_plan, pack_operand

# Reductions up to this many steps in all are never blocked for the caches.
_SHORT_REDUCTION = 64
# A blocked reduction axis streams at least this many steps per accumulator load.
_MIN_STREAM = 4


@dataclass(frozen=True)
class TilePlan:
    """How one contraction block is tiled: its vector axis, the operand packed into
    a blocked layout along that axis (or None), and the elementwise consumers fused
    behind it (found on the unscheduled program)."""

    info: BlockAnalysis
    vec_iter: str
    pack: PackPlan | None = None
    chain: tuple[str, ...] = ()

    @property
    def block(self) -> str:
        return self.info.name


class ContractionSketch(Sketch):
    """A sketch that schedules every contraction block of the task by one plan each
    (`schedule_block`); the other blocks are inlined, fused, or parallelised and
    vectorised at the root."""

    math_variants = True

    def __init__(self, plans: tuple, inline: tuple[str, ...], params: CpuParams):
        self.plans = plans
        self.inline = inline
        self.params = params

    def schedule_block(self, sch, decide: Decider, plan) -> set[str]:
        """Schedule one planned block; returns the names of the blocks it scheduled."""
        raise NotImplementedError

    def apply(self, sch, decide: Decider) -> None:
        sch = unchecked(sch)
        inline_producers(sch, decide, self.inline)
        done = set()
        for plan in self.plans:
            done |= self.schedule_block(sch, decide, plan)
        finish_root_blocks(sch, self.params, done)


class TileSketch(ContractionSketch):
    """SSRSRS tiling of every contraction block of the task (see the module doc)."""

    def __init__(self, name: str, plans: tuple[TilePlan, ...], inline: tuple[str, ...],
                 params: CpuParams):
        super().__init__(plans, inline, params)
        self.name = name

    def schedule_block(self, sch, decide: Decider, plan: TilePlan) -> set[str]:
        return tile_block(sch, decide, plan, self.params)


def tile_sketches(sch, infos, params: CpuParams) -> list[TileSketch]:
    """`tile` for a task with contraction blocks, and `tile_pack` when an operand of
    one is worth packing (`sch` is the unscheduled program, `infos` its blocks)."""
    found = []
    for name, packed in (("tile", False), ("tile_pack", True)):
        plans = contraction_plans(sch, infos, packed)
        if plans:
            keep = frozenset(p.block for p in plans).union(*(p.chain for p in plans),
                                                          _branchy_inputs(sch, plans))
            found.append(TileSketch(name, plans, inline_candidates(sch, keep), params))
    return found


def contraction_plans(sch, infos, packed: bool) -> tuple[TilePlan, ...] | None:
    """A plan per contraction block with a vector axis (and, `packed`, an operand
    worth packing); None when there is none."""
    params = param_buffers(sch)
    plans = []
    for info in infos:
        if not (info.is_contraction and info.loops_bound):
            continue
        pack = find_pack_plan(info, params) if packed else None
        # unpacked, the vector axis must stream through every operand as it is
        vec = pack.iter if pack else next((v.name for v in reversed(info.spatial)
                                           if v.extent > 1 and info.streams(v.name)), None)
        if vec is None:
            continue
        chain = consumer_chain(sch, sch.get_sblock(info.name))
        plans.append(TilePlan(info, vec, pack, chain))
    if not plans or (packed and not any(p.pack for p in plans)):
        return None
    return tuple(plans)


def _branchy_inputs(sch, plans) -> set[str]:
    """Producers with a branch (padding) read along a plan's vector axis: inlined,
    every vector load would carry the branch, so they are never inlined there."""
    out = set()
    for plan in plans:
        along = {a.buffer for a in plan.info.reads if plan.vec_iter in a.iters()}
        for producer in sch.get_producers(sch.get_sblock(plan.block)):
            stmt = sch.get(producer)
            if stmt.writes[0].source.name in along and computes_conditionally(sch, producer):
                out.add(stmt.name_hint)
    return out


def _decide_tiles(decide: Decider, info, plan: TilePlan, params: CpuParams) -> dict:
    """Tile factors per iter var (extent-1 iter vars get none)."""
    vec = next(v for v in info.spatial if v.name == plan.vec_iter)
    tiles = register_tiles(decide, info, vec, params, plan.block)
    tiles.update(decide_reduce_tiles(decide, info, plan.block))
    return tiles


def register_tiles(decide: Decider, info, vec, params: CpuParams, p: str,
                   reads=None) -> dict:
    """Four-level tiles of the spatial axes: the vector axis `vec` (its innermost
    factor whole vectors when the extent allows), then the register tile of the
    others (`_register_tile`; `reads` are the accesses that decide reuse, by default
    the block's read regions)."""
    tiles = {vec.name: vector_tile(decide, f"{p}.{vec.name}", vec.extent, 4, params)}
    tiles.update(_register_tile(decide, info, vec, tiles[vec.name][-1], params, p, reads))
    return tiles


def decide_reduce_tiles(decide: Decider, info, p: str) -> dict:
    """Two-level tiles of the reduce axes (extent-1 axes get none)."""
    tiles = {}
    # A short reduction (a depthwise 3x3) is never blocked: R1 takes all of it, so
    # the accumulators are loaded and stored once per output tile.
    blocked = _product_of(v.extent for v in info.reduce) > _SHORT_REDUCTION
    for v in info.reduce:
        if v.extent == 1:
            continue
        if not blocked:
            tiles[v.name] = (1, v.extent)
        elif v.extent % _MIN_STREAM == 0 and v.extent >= 4 * _MIN_STREAM:
            # R1 streams at least a few steps between loads of the accumulators
            units = decide.tile(f"{p}.{v.name}@{_MIN_STREAM}", v.extent // _MIN_STREAM, 2,
                                v.extent // _MIN_STREAM)
            tiles[v.name] = (units[0], units[1] * _MIN_STREAM)
        else:
            tiles[v.name] = decide.tile(f"{p}.{v.name}", v.extent, 2, v.extent)
    return tiles


def _reused_along(access, var: str) -> bool:
    return all(var not in used or exact != var
               for used, exact in zip(access.uses, access.exact))


def _register_tile(decide: Decider, info, vec, vec_inner: int, params: CpuParams, p: str,
                   reads=None):
    """Tiles of the spatial axes besides the vector one. Their innermost factors span
    the register tile: between `min_accumulators` and `max_accumulators` vectors
    (one register each) when the extents allow; a decision each, and the outer three
    levels a tile decision of what is left."""
    vectors = -(-vec_inner // params.lanes)
    acc, tiles = vectors, {}
    # Only an axis along which some vector operand is reused helps: one the operand
    # does not depend on (the rows i of a matmul; not the batch n, whose B differs
    # per n), or only through a sliding window (y + r of a convolution).
    vector_reads = [a for a in (info.reads if reads is None else reads)
                    if vec.name in a.iters()]
    others = [v for v in info.spatial if v.name != vec.name and v.extent > 1]
    axes = [v for v in others if any(_reused_along(a, v.name) for a in vector_reads)]
    for v in others:
        if v not in axes:
            tiles[v.name] = decide.tile(f"{p}.{v.name}", v.extent, 3, v.extent) + (1,)
    for n, v in enumerate(axes):
        budget = max(1, params.max_accumulators // acc)
        options = [d for d in divisors(v.extent) if d <= budget]
        if n == len(axes) - 1:  # the last axis lifts the tile to the minimum if it can
            enough = [d for d in options if d * acc >= params.min_accumulators]
            options = enough or options
        inner = decide.choice(f"{p}.{v.name}.reg", options)
        rest = v.extent // inner
        tiles[v.name] = decide.tile(f"{p}.{v.name}", rest, 3, rest) + (inner,)
        acc *= inner
    return tiles


def _product_of(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


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


# A cached output tile up to this many elements lives in a stack ("local") buffer,
# where LLVM keeps it in registers; a larger one goes to the heap ("global").
_LOCAL_TILE_ELEMS = 16384


def vector_last(sch, block, info: BlockAnalysis, vec_iter: str) -> None:
    """Lay the block's (non-argument) output buffer out with the vector axis last, so
    the accumulators are contiguous vectors (conv vectorised over channels)."""
    from tvm.tirx import IndexMap

    dim = info.writes[0].panel_dim(vec_iter)
    ndim = len(info.writes[0].uses)
    if dim is None or dim == ndim - 1:
        return

    def to_vector_last(*idx):
        return tuple(idx[:dim]) + tuple(idx[dim + 1:]) + (idx[dim],)

    sch.transform_layout(block, ("write", 0),
                         IndexMap.from_func(to_vector_last, ndim=ndim, index_dtype="int32"))


def _tile_elems(info, tiles: dict, level: int) -> int:
    out = 1
    for v in info.spatial:
        for factor in tiles.get(v.name, (1, 1, 1, 1))[level:]:
            out *= factor
    return out


def write_stage(sch, block, decide: Decider, plan, vec_iter: str, tiles: dict, cores: int):
    """The stage that writes the output tile and the tile level it sits at: the fused
    elementwise consumers when there are some, else (a decision) a cache of the
    accumulator, else none. A cache is forced when the vector axis is not the
    output's contiguous one: the accumulators then need their own layout. A block
    with several outputs writes them in place."""
    if len(plan.info.writes) > 1:
        return None, 2
    write = plan.info.writes[0]
    transposed = write.dim_of(vec_iter) not in (None, len(write.uses) - 1)
    if plan.chain:
        stage = fold_chain(sch, plan.chain)
    elif transposed or decide.choice(f"{plan.block}.cache_write", (True, False)):
        stage = None
    else:
        return None, 2
    # Written back under S0, the tile loops below cannot join the parallel loop: only
    # offered when S0 alone gives every core work.
    outer = _tile_elems(plan.info, tiles, 0) // _tile_elems(plan.info, tiles, 1)
    level = decide.choice(f"{plan.block}.write_at", (1, 2) if outer >= 2 * cores else (2,))
    if stage is None:
        small = _tile_elems(plan.info, tiles, level) <= _LOCAL_TILE_ELEMS
        stage = sch.cache_write(block, 0, "local" if small else "global")
    if transposed:
        vector_last(sch, block, plan.info, vec_iter)
    return stage, level


def tile_block(sch, decide: Decider, plan: TilePlan, params: CpuParams) -> set:
    """Tile one contraction block; returns the names of the blocks it scheduled."""
    block = sch.get_sblock(plan.block)
    info = plan.info
    tiles = _decide_tiles(decide, info, plan, params)
    scheduled = {plan.block}
    if plan.pack is not None:  # the packing stage is parallelised with the other root blocks
        pack_operand(sch, block, plan.pack, tiles[plan.vec_iter][-1])
    write, level = write_stage(sch, block, decide, plan, plan.vec_iter, tiles, params.cores)
    s_groups, r_groups = _split_and_reorder(sch, block, info, tiles, plan.vec_iter)
    if write is not None:
        scheduled.add(sch.get(write).name_hint)
        anchor = (s_groups[0] + s_groups[1])[-1] if level == 2 else s_groups[0][-1]
        sch.reverse_compute_at(write, anchor)
    outer = _parallelise(sch, s_groups, level, params)
    if tiles.get(plan.vec_iter, (1,))[-1] > 1:
        vectorize_registers(sch, s_groups[3][-1], params.lanes)
    vectorize_init_and_write(sch, block, r_groups, write, params)
    annotate_unroll(sch, outer, decide, plan.block)
    return scheduled


def vectorize_init_and_write(sch, block, r_groups, write, params: CpuParams) -> None:
    """The tiled block's init (split off at its outermost reduce loop) and its write-back
    stage (None: none) vectorised along their inner loops."""
    reduce_loops = r_groups[0] + r_groups[1]
    if reduce_loops:
        init = sch.decompose_reduction(block, reduce_loops[0])
        vectorize_inner(sch, init, params)
    if write is not None:
        vectorize_inner(sch, write, params)


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
    return _product_of(int(sch.get(loop).extent) for loop in loops)
