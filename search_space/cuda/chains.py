"""Chains of reductions on CUDA: a tiled reduction whose input is another tiled
reduction's result (a block transform's T = C X then Y = T Cᵀ, two dense layers).

Where the producer runs is a decision of the consumer's tiling, `<producer>.compute_at`:
- "root": its own kernel, tiled on its own (the intermediate goes through global memory);
- "block": inside the consumer's thread block, at its block-level tile loop: the block
  computes the producer's values its output tile reads (the whole reduction extent of
  the consumer) into shared memory once, then runs its own reduction on them;
- "reduce_tile": at the consumer's reduction tile loop, where the consumer would stage
  that input: each step computes the producer's slice it is about to read.
In both attached placements the producer's values never leave the chip, and its loops
are spread over the consumer's threads (an accumulator per thread, in a register).

The shared memory a "block" placement takes depends on the consumer's spatial tile, so
the consumer chooses its tile with the producer's region counted (analysis.py's
`footprint_bytes` with the producer `whole`): every
sample fits the shared memory limit by construction, as the tiling's own staging does.
"""
from __future__ import annotations

from .analysis import REDUCE, SPATIAL, loop_kinds

PLACEMENTS = ("root", "block", "reduce_tile")


def chain_producers(sch, tiled, can_tile) -> dict[str, tuple[str, ...]]:
    """Consumer name -> the tiled reductions it may compute in its kernel: each is not an
    output, writes one buffer, and has exactly this consumer (program order); consumer
    and producer both pass `can_tile(sch, block)`."""
    from ..blocks import output_names

    names = set(tiled)
    outputs = output_names(sch)
    out: dict[str, list[str]] = {}
    for name in tiled:
        block = sch.get_sblock(name)
        if not can_tile(sch, block):
            continue
        for producer in sch.get_producers(block):
            stmt = sch.get(producer)
            pname = stmt.name_hint
            consumers = sch.get_consumers(producer)
            if (pname in names and pname not in outputs and len(stmt.writes) == 1
                    and len(consumers) == 1 and can_tile(sch, producer)):
                out.setdefault(name, []).append(pname)
    return {k: tuple(v) for k, v in out.items()}


def attach(sch, producer: str, anchor, threads: int) -> None:
    """Compute `producer` at loop `anchor` of its consumer's kernel: its result in shared
    memory (the region the consumer reads below `anchor`, over all the block's threads),
    its spatial loops fused and spread over `threads` threads, its reduction serial in
    each thread into a register, then written to shared memory."""
    block = sch.get_sblock(producer)
    n_iters = len(sch.get(block).iter_vars)
    sch.set_scope(block, 0, "shared")
    sch.compute_at(block, anchor, preserve_unit_loops=True)
    loops = sch.get_loops(block)
    own = loops[len(loops) - n_iters:]
    kinds = loop_kinds(sch, block)[len(loops) - n_iters:]
    spatial = [lp for lp, k in zip(own, kinds) if k == SPATIAL]
    reduce = [lp for lp, k in zip(own, kinds) if k == REDUCE]
    if reduce and spatial:
        sch.reorder(*spatial, *reduce)
    if not spatial:
        spatial = [sch.add_unit_loop(block)]
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    _, tx = sch.split(fused, [None, max(1, threads)])
    sch.bind(tx, "threadIdx.x")
    writeback = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(writeback, tx, preserve_unit_loops=True)
