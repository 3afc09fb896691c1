"""Steps the CPU sketches share: inlining, unroll annotations, vector-aware tiles,
and parallel + vectorised loops for the blocks no other rule took."""
from __future__ import annotations

from dataclasses import dataclass

from .analysis import analyse, blocks, loop_kinds
from .decisions import Decider

UNROLL_STEPS = (0, 16, 64, 512)


@dataclass(frozen=True)
class CpuParams:
    """What the CPU rules need to know about the target."""

    lanes: int          # SIMD lanes of the task's dtype
    cores: int          # worker threads of the parallel runtime
    max_vectors: int = 4    # widest register tile along the vector axis, in vectors
    max_accumulators: int = 24  # vector registers a register tile may hold


def inline_producers(sch, decide: Decider, keep: frozenset = frozenset()) -> None:
    """Offer to inline every elementwise/injective stage that is not an output.

    Each inlinable block gets a yes/no decision; a block the schedule refuses to
    inline (it would change the result) is left alone without a decision.
    """
    for block in blocks(sch):
        info = analyse(sch, block)
        if info.is_output or not info.is_spatial or info.name in keep or len(info.writes) != 1:
            continue
        if not _can_inline(sch, block):
            continue
        if decide.choice(f"inline.{info.name}", (True, False)):
            sch.compute_inline(block)


def _can_inline(sch, block) -> bool:
    trial = sch.copy()
    try:
        trial.compute_inline(trial.get_sblock(trial.get(block).name_hint))
    except Exception:  # the primitive refused: not inlinable in this program
        return False
    return True


def fuse_consumers(sch, block) -> object | None:
    """The elementwise consumer chain after `block`, folded into one stage.

    Returns the first consumer (later elementwise consumers reverse-inlined into it),
    or None when the block has no single elementwise consumer.
    """
    consumers = sch.get_consumers(block)
    if len(consumers) != 1:
        return None
    first = consumers[0]
    if not analyse(sch, first).is_spatial:
        return None
    while True:
        nxt = sch.get_consumers(first)
        if len(nxt) != 1 or not analyse(sch, nxt[0]).is_elementwise:
            return first
        try:
            sch.reverse_compute_inline(nxt[0])
        except Exception:  # not a pure map of `first`: keep it as its own stage
            return first


def annotate_unroll(sch, loop, decide: Decider, prefix: str) -> None:
    """Unroll inner loops under `loop` up to a decided number of steps. Explicit
    unrolling (TVM copies the body): LLVM ignores TVM's unroll hints."""
    step = decide.choice(f"{prefix}.unroll", UNROLL_STEPS)
    if step:
        sch.annotate(loop, "pragma_auto_unroll_max_step", step)
        sch.annotate(loop, "pragma_unroll_explicit", 1)


def vector_tile(decide: Decider, name: str, extent: int, parts: int, params: CpuParams):
    """Tile factors for the vectorised axis: the innermost is a multiple of the lanes
    whenever the extent allows it (the decision is made in units of lanes)."""
    lanes = params.lanes
    if extent % lanes == 0 and extent >= lanes:
        units = decide.tile(f"{name}@{lanes}", extent // lanes, parts, params.max_vectors)
        return units[:-1] + (units[-1] * lanes,)
    return decide.tile(name, extent, parts, lanes * params.max_vectors)


def vectorize_inner(sch, block, params: CpuParams, keep: int = 0) -> None:
    """Vectorise the innermost loop of `block` when it is data parallel; a long loop is
    split first so the vector stays a few registers wide. The outer `keep` loops
    (a parallel row loop, say) are never touched."""
    loops = sch.get_loops(block)
    if len(loops) <= keep:
        return
    inner = loops[-1]
    extent = _extent(sch, inner)
    if extent <= 1 or loop_kinds(sch, block)[-1] != "S":
        return
    width = params.lanes * params.max_vectors
    if extent > width:
        if extent % params.lanes:
            return
        factor = max(f for f in range(params.lanes, width + 1, params.lanes) if extent % f == 0)
        inner = sch.split(inner, [None, factor])[1]
    sch.vectorize(inner)


def parallel_outer(sch, block, params: CpuParams, depth: int | None = None):
    """Fuse the leading data-parallel loops of a root-level block and parallelise them.

    Fuses until the extent gives every core several chunks (or `depth` loops)."""
    loops = sch.get_loops(block)
    kinds = loop_kinds(sch, block)
    n = 0
    extent = 1
    limit = len(loops) - 1 if depth is None else depth
    while n < limit and kinds[n] == "S":
        extent *= _extent(sch, loops[n])
        n += 1
        if depth is None and extent >= 8 * params.cores:
            break
    if n == 0:
        return None
    fused = sch.fuse(*loops[:n]) if n > 1 else loops[0]
    if extent > 1:
        sch.parallel(fused)
    return fused


def finish_root_blocks(sch, params: CpuParams, done: set) -> None:
    """Parallelise and vectorise every root-level block no rule has scheduled yet."""
    for block in blocks(sch):
        name = sch.get(block).name_hint
        if name in done:
            continue
        info = analyse(sch, block)
        if not info.loops_bound:
            continue
        parallel_outer(sch, block, params)
        if info.is_spatial:
            vectorize_inner(sch, block, params)


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)

