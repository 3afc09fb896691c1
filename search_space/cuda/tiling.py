"""Multi-level tiling for GPU reductions with data reuse (matmul, convolution, ...).

Each spatial loop is split five ways (grid, virtual thread, thread, and two register
levels) and each reduction loop three ways, ordered SSSRRSRS: blockIdx.x / vthread.x /
threadIdx.x over the fused outer spatial levels, the reduction tile loop, then the
register tile. The inputs are staged in shared memory at the reduction tile loop and
copied by all threads of the block together (optionally with vector loads); the
outputs (several when one reduction computes several results) accumulate in registers
and are written back by each thread, with elementwise consumers (bias, activation)
inlined into that write-back. A tiled reduction whose only consumer is another tiled
reduction (a chain) is placed by its consumer: its own kernel, or computed in the
consumer's thread block into shared memory (`chains.py`).

Decisions are made so that every sample fits the target by construction: the thread,
virtual-thread and register factors are chosen within what the earlier dimensions
left of each budget, the reduction tile within the shared memory the spatial tile
leaves. `check` still measures the lowered kernel, which is what replayed or mutated
candidates (or another target's limits) are held to.
"""
from __future__ import annotations

from dataclasses import replace

from ..blocks import block_info
from ..decisions import Decider, divisors
from ..sketch import Sketch
from ..tir import free_vars, iter_nodes
from .analysis import (REDUCE, SPATIAL, TaskBlocks, classify, footprint_bytes,
                       innermost_var_position, loop_kinds, loop_positions, read_indices, reads)
from .chains import PLACEMENTS, attach, chain_producers
from .common import UNROLL_STEPS, annotate_unroll, bind_unbound, inline_spatial
from .limits import GpuLimits
from .reduction import cross_thread

MAX_REGISTER_TILE = 64   # accumulators per thread (virtual threads included)


def _var_names(stmt) -> list[str]:
    names = [str(iv.var.name) for iv in stmt.iter_vars]
    if len(set(names)) == len(names):
        return names
    return [f"{n}{i}" for i, n in enumerate(names)]


def can_tile(sch, block) -> bool:
    """Every loop of the block is bound to one spatial or reduction variable."""
    kinds = loop_kinds(sch, block)
    return (REDUCE in kinds and all(k in (SPATIAL, REDUCE) for k in kinds)
            and None not in loop_positions(sch, block))


def _loads_reuse(sch, block) -> bool:
    """Whether some load in the block's value (not of a buffer it writes) misses a
    spatial variable: its elements serve several outputs. Read one load at a time,
    unlike the read regions, which merge two loads of one buffer (both patches of a
    patch distance read X, together at every output)."""
    stmt = sch.get(block)
    written = {str(w.source.name) for w in stmt.writes}
    spatial = [iv.var for iv in stmt.iter_vars
               if int(iv.iter_type) == 0 and int(iv.dom.extent) > 1]
    for node in iter_nodes(stmt.body):
        if type(node).__name__ not in ("TensorLoad", "BufferLoad") \
                or str(node.source.name) in written:
            continue
        used = [v for e in node.indices for v in free_vars(e)]
        if any(not any(v.same_as(u) for u in used) for v in spatial):
            return True
    return False


def tile_roles(sch) -> TaskBlocks:
    """`classify`'s roles, with the reductions whose loads have reuse (a windowed or
    shifted read that the read regions merge) moved from `rows` to `tiled`."""
    roles = classify(sch)
    moved = tuple(n for n in roles.rows if _loads_reuse(sch, sch.get_sblock(n)))
    if not moved:
        return roles
    return replace(roles, tiled=roles.tiled + moved,
                   rows=tuple(n for n in roles.rows if n not in moved))


class TiledGpuSketch(Sketch):
    """Multi-level tiling of the reductions with data reuse; a reduction feeding
    another (a chain) is computed in its consumer's kernel or kept separate, a
    decision (`chains.py`); row reductions get a cross-thread kernel; the remaining
    elementwise blocks are inlined or bound."""

    name = "tile"

    def __init__(self, limits: GpuLimits):
        self.limits = limits

    def apply(self, sch, decide: Decider) -> None:
        roles = tile_roles(sch)
        chains = chain_producers(sch, roles.tiled, can_tile)
        placed = {p for producers in chains.values() for p in producers}
        for name in roles.tiled:
            if name not in placed and can_tile(sch, sch.get_sblock(name)):
                _tile_chain(sch, name, decide, self.limits, chains)
        inline_spatial(sch, roles.spatial)
        for name in roles.rows:
            cross_thread(sch, name, decide, self.limits)
        bind_unbound(sch, self.limits, decide)


def _tile_chain(sch, name: str, decide: Decider, limits: GpuLimits, chains: dict) -> None:
    """Tile `name`, then the producers it left at the root, each with its own chain
    (the producers of one computed in this kernel are tiled as kernels of their own)."""
    for producer, where in tile_block(sch, name, decide, limits, chains.get(name, ())).items():
        if where == "root":
            _tile_chain(sch, producer, decide, limits, chains)
        else:
            for inner in chains.get(producer, ()):
                _tile_chain(sch, inner, decide, limits, chains)


def _spatial_factors(sch, block, decide: Decider, limits: GpuLimits, name: str, dims,
                     fp=footprint_bytes) -> dict:
    """[grid, vthread, thread, reg_outer, reg_inner] per spatial position. The
    innermost dimension chooses first, so threads run along contiguous memory. Each
    factor is chosen within what the earlier ones left of the thread, virtual-thread
    and register budgets, and so that the inputs of the block's tile (with a
    reduction tile of one) still fit in shared memory (`fp` counts them)."""
    # a block with several outputs (one reduction computing two results) keeps an
    # accumulator of each per output point: the register budget is shared
    outputs = max(1, len(sch.get(block).writes))
    threads, vthreads = limits.max_threads_per_block, limits.max_vthread
    regs = max(1, MAX_REGISTER_TILE // outputs)
    tiles, out = {}, {}

    def fitting(options, pos, done):
        ok = [d for d in options if d == 1 or fp(
            sch, block, {**tiles, pos: done * d}) <= limits.max_shared_memory_per_block]
        return ok or [1]

    for pos, var, extent in reversed(dims):
        if extent == 1:
            out[pos] = (1, 1, 1, 1, 1)
            continue
        t = decide.choice(f"{name}.{var}.threads",
                          fitting([d for d in divisors(extent) if d <= threads], pos, 1))
        v = decide.choice(f"{name}.{var}.vthreads", fitting(
            [d for d in divisors(extent // t) if d <= min(vthreads, regs)], pos, t))
        r = decide.choice(f"{name}.{var}.regs", fitting(
            [d for d in divisors(extent // (t * v)) if d * v <= regs], pos, t * v))
        s3, s4 = decide.tile(f"{name}.{var}.inner", r, 2)
        threads, vthreads, regs = threads // t, vthreads // v, regs // (r * v)
        tiles[pos] = t * v * r
        out[pos] = (extent // (t * v * r), v, t, s3, s4)
    return out


def _reduce_factors(sch, block, decide: Decider, limits: GpuLimits, name: str, dims,
                    tiles: dict, fp=footprint_bytes) -> dict:
    """[tile loop, outer, inner] per reduction position; each tile is chosen among the
    divisors whose staged inputs still fit in shared memory."""
    out = {}
    for pos, var, extent in dims:
        if extent == 1:
            out[pos] = (1, 1, 1)
            continue
        fits = [d for d in divisors(extent)
                if fp(sch, block, {**tiles, pos: d})
                <= limits.max_shared_memory_per_block]
        kt = decide.choice(f"{name}.{var}.tile", fits or [1])
        tiles[pos] = kt
        r1, r2 = decide.tile(f"{name}.{var}.inner", kt, 2)
        out[pos] = (extent // kt, r1, r2)
    return out


def _vector_options(sch, block, acc, tiles: dict, limits: GpuLimits) -> list[int]:
    """Vector widths a cooperative fetch of `acc` can use with aligned accesses: the
    buffer is a kernel argument (its rows start aligned), its innermost index is one
    variable, and both that variable's tile and the row length are multiples."""
    opts = [1]
    pos = innermost_var_position(sch, block, acc)
    if not acc.is_param or pos is None:
        return opts
    elem = max(1, (int(acc.buffer.dtype.bits) * int(acc.buffer.dtype.lanes)) // 8)
    row, tile = int(acc.buffer.shape[-1]), int(tiles.get(pos, 1))
    w = 2
    while w * elem <= limits.max_vector_bytes:
        if row % w == 0 and tile % w == 0:
            opts.append(w)
        w *= 2
    return opts


def _cooperative_fetch(sch, copy, depth: int, threads: int, vector: int) -> None:
    """All threads of the block copy the staged tile together."""
    loops = sch.get_loops(copy)[depth:]
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if vector > 1:
        _, t, v = sch.split(fused, [None, threads, vector])
        sch.vectorize(v)
    else:
        _, t = sch.split(fused, [None, threads])
    sch.bind(t, "threadIdx.x")


def _inline_epilogue(sch, writeback) -> None:
    """Fold single elementwise consumers (bias, activation) into the write-back; not
    a copy into shared memory or registers (a tiled consumer's staging of this
    result: it belongs to that consumer's kernel)."""
    while True:
        consumers = sch.get_consumers(writeback)
        if len(consumers) != 1 or not block_info(sch, consumers[0]).is_spatial \
                or any(w.source.scope() != "global" for w in sch.get(consumers[0]).writes):
            return
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception:  # reads the result at other points: stays its own kernel
            return


def tile_block(sch, name: str, decide: Decider, limits: GpuLimits,
               producers: tuple[str, ...] = ()) -> dict[str, str]:
    """Multi-level tiling of one reduction block (see the module docstring), with each
    of `producers` (chained reductions it reads) placed by a decision; returns
    producer -> placement (`chains.PLACEMENTS`)."""
    block = sch.get_sblock(name)
    names = _var_names(sch.get(block))
    loops, kinds, positions = sch.get_loops(block), loop_kinds(sch, block), loop_positions(sch, block)
    extents = [int(sch.get(lp).extent) for lp in loops]
    sp = [(p, names[p], e) for p, k, e in zip(positions, kinds, extents) if k == SPATIAL]
    rd = [(p, names[p], e) for p, k, e in zip(positions, kinds, extents) if k == REDUCE]

    # every decision first (they only read the block), then the schedule
    placed = {p: decide.choice(f"{p}.compute_at", PLACEMENTS) for p in producers}
    whole = frozenset(p for p, where in placed.items() if where == "block")

    def fp(s, b, t):
        return footprint_bytes(s, b, t, whole)

    sf = _spatial_factors(sch, block, decide, limits, name, sp, fp)
    tiles = {p: e // sf[p][0] for p, _, e in sp}
    factors = {**sf, **_reduce_factors(sch, block, decide, limits, name, rd, tiles, fp)}
    attached = {p: w for p, w in placed.items() if w != "root"}
    vectors = {acc.name: decide.choice(f"{name}.{acc.name}.vector",
                                       _vector_options(sch, block, acc, tiles, limits))
               for acc in reads(sch, block) if acc.name not in attached}
    unroll = decide.choice(f"{name}.unroll", UNROLL_STEPS)

    parts = {p: sch.split(lp, list(factors[p])) for lp, p in zip(loops, positions)}
    s_parts = [parts[p] for p, _, _ in sp]
    r_parts = [parts[p] for p, _, _ in rd]
    sch.reorder(*[s[0] for s in s_parts], *[s[1] for s in s_parts], *[s[2] for s in s_parts],
                *[r[0] for r in r_parts], *[r[1] for r in r_parts], *[s[3] for s in s_parts],
                *[r[2] for r in r_parts], *[s[4] for s in s_parts])
    bx = _fuse_bind(sch, [s[0] for s in s_parts], "blockIdx.x")
    _fuse_bind(sch, [s[1] for s in s_parts], "vthread.x")
    _fuse_bind(sch, [s[2] for s in s_parts], "threadIdx.x")
    threads = 1
    for p, _, _ in sp:
        threads *= sf[p][2]
    _stage(sch, block, len(rd), threads, vectors, attached)
    annotate_unroll(sch, bx, unroll)
    return placed


def _stage(sch, block, n_reduce: int, threads: int, vectors: dict[str, int],
           attached: dict[str, str]) -> None:
    """Registers for the outputs (written back per thread, epilogue folded in), shared
    memory for the inputs at the innermost reduction tile loop (only this block reads
    the copy: another block may read the same input), the producers in `attached`
    computed at the block tile or reduction tile loop instead of staged, the
    accumulator's initialisation hoisted out of the reduction."""
    writebacks = [sch.cache_write(block, index, "local")  # every output of the block
                  for index in range(len(sch.get(block).writes))]
    for writeback in writebacks:
        sch.reverse_compute_at(writeback, sch.get_loops(block)[2], preserve_unit_loops=True)
    depth = 3 + n_reduce   # blockIdx, vthread, threadIdx, then the reduction tile loops
    for acc_index, acc in zip(read_indices(sch, block), reads(sch, block)):
        if acc.name in attached:
            continue
        copy = sch.cache_read(block, acc_index, "shared", consumer_blocks=[block])
        sch.compute_at(copy, sch.get_loops(block)[depth - 1], preserve_unit_loops=True)
        _cooperative_fetch(sch, copy, depth, threads, vectors[acc.name])
    for producer, where in attached.items():
        anchor = sch.get_loops(block)[0 if where == "block" else depth - 1]
        attach(sch, producer, anchor, threads)
    sch.decompose_reduction(block, sch.get_loops(block)[3])
    for writeback in writebacks:
        _inline_epilogue(sch, writeback)


def _fuse_bind(sch, loops, thread: str):
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    sch.bind(fused, thread)
    return fused
