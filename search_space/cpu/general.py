"""`general`: multi-level tiling for reductions no specific rule describes.

The way MetaSchedule's generic rules cover any computation: every reduction block with
data reuse, whatever its loop structure (S..SR..R, several reduce axes, reads shifted
by spatial and reduce indices at once: a sliding window, a patch distance, a strided
or transposed operand), is tiled S0 S1 R0 S2 R1 S3 with a decision for every loop's
tile sizes, the order of the reduce loops, the vector axis (any spatial axis a vector
reads contiguously, or would after copying a small argument into a transposed layout,
else the output's contiguous one), the write-back of the accumulators through a
register cache, how many tile levels the parallel loop fuses, and the unroll depth.
The loads are read one by one, not as the block's read regions, which merge two loads
of one buffer into a region that every output index moves. A reduction producing
another reduction's input (a chain of contractions) is, as a decision, computed at a
tile of its consumer (the producer's tile stays in cache) or kept separate with its
own tiled, parallel nest. Elementwise
producers are inlined or not (a decision each); every block left over (several
outputs, epilogues) is parallelised and vectorised at the root.

Offered to a task with a reduction block the contraction rules leave without a plan
(`tiling.py` finds no vector axis, or the block's read regions do not separate into
operands: both patches of a patch distance read one buffer), or, in a chain of
reductions, without a plan unless an operand is packed.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

from ..analysis import BlockAnalysis, param_buffers
from ..decisions import Decider
from ..sketch import Sketch
from .common import (CpuParams, annotate_unroll, consumer_chain, finish_root_blocks,
                     inline_candidates, inline_producers, unchecked, vectorize_inner,
                     vectorize_registers)
from .tiling import (contraction_plans, decide_reduce_tiles, register_tiles,
                     vectorize_init_and_write, write_stage)

# Reduce loops of a block with this many or fewer get every order as options.
_MAX_PERMUTED = 3


@dataclass(frozen=True)
class LoadUse:
    """One load in a block's value: the iter vars each dimension's index uses, and
    the one it is exactly (else None). Unlike the block's read regions, two loads of
    one buffer (both patches of a patch distance) stay apart."""

    buffer: str
    uses: tuple[frozenset, ...]
    exact: tuple[str | None, ...]

    def iters(self) -> frozenset:
        return frozenset().union(*self.uses) if self.uses else frozenset()


def load_uses(sch, block) -> tuple[LoadUse, ...]:
    """The distinct loads of `block`'s value, in first-use order (not those of the
    buffers it writes: a reduction's update reads its accumulator)."""
    from ..tir import free_vars, iter_nodes
    from .tir_build import is_load

    stmt = sch.get(block)
    names = {iv.var.name for iv in stmt.iter_vars}
    written = {w.source.name for w in stmt.writes}
    seen = {}
    for node in iter_nodes(stmt.body):
        if not is_load(node) or node.source.name in written:
            continue
        uses, exact = [], []
        for index in node.indices:
            used = frozenset(v.name for v in free_vars(index) if v.name in names)
            uses.append(used)
            is_var = type(index).__name__ == "Var" and index.name in names
            exact.append(index.name if is_var else None)
        load = LoadUse(node.source.name, tuple(uses), tuple(exact))
        seen.setdefault(load, None)
    return tuple(seen)


@dataclass(frozen=True)
class GeneralPlan:
    """One reduction block: its analysis, the spatial axes a vector may run along,
    its loads one by one, the reductions feeding it that may be computed at its tiles,
    and the elementwise consumers fused behind it."""

    info: BlockAnalysis
    vec_options: tuple[str, ...]
    loads: tuple[LoadUse, ...]
    transposes: tuple[tuple[str, str, int], ...] = ()   # (vector axis, buffer, dim)
    producers: tuple[str, ...] = ()
    chain: tuple[str, ...] = ()

    @property
    def block(self) -> str:
        return self.info.name


class GeneralSketch(Sketch):
    """Tiles every planned reduction block, consumers first (see the module doc)."""

    name = "general"
    math_variants = True

    def __init__(self, plans: tuple[GeneralPlan, ...], inline: tuple[str, ...],
                 params: CpuParams):
        self.plans = plans
        self.inline = inline
        self.params = params

    def apply(self, sch, decide: Decider) -> None:
        sch = unchecked(sch)
        inline_producers(sch, decide, self.inline)
        plans = {p.block: p for p in self.plans}
        done = set()
        for plan in reversed(self.plans):  # consumers before their producers
            if plan.block not in done:
                done |= tile_general(sch, decide, plan, self.params, plans)
        finish_root_blocks(sch, self.params, done)


def general_sketches(sch, infos, params: CpuParams) -> list[GeneralSketch]:
    """`general` for a task with a reduction block that has data reuse and that the
    contraction tiling leaves without a plan, packed or not, or that feeds or reads
    another reduction (a chain: its place is this sketch's decision) and has no plan
    unpacked (`sch` unscheduled, `infos` its blocks)."""
    plain = {p.block for p in contraction_plans(sch, infos, False) or ()}
    packed = plain | {p.block for p in contraction_plans(sch, infos, True) or ()}
    names = [i.name for i in infos]
    plans = [p for p in (_plan(sch, info) for info in infos) if p is not None]
    reductions = {p.block for p in plans}
    plans = [_with_producers(sch, p, reductions) for p in plans]
    chained = {p.block for p in plans if p.producers}.union(*(p.producers for p in plans))
    if not any(p.block not in packed or (p.block in chained and p.block not in plain)
               for p in plans):
        return []
    plans.sort(key=lambda p: names.index(p.block))
    keep = frozenset(reductions).union(*(p.chain for p in plans))
    return [GeneralSketch(tuple(plans), inline_candidates(sch, keep), params)]


def _plan(sch, info: BlockAnalysis) -> GeneralPlan | None:
    """The plan of a reduction block with reuse (a load that some spatial axis does
    not index: its elements serve several outputs), or None."""
    if not (info.is_reduction and info.loops_bound and info.spatial):
        return None
    loads = load_uses(sch, sch.get_sblock(info.name))
    spatial = {v.name for v in info.spatial if v.extent > 1}
    if not loads or not any(spatial - ld.iters() for ld in loads):
        return None
    stmt = sch.get(sch.get_sblock(info.name))
    args = param_buffers(sch)  # only arguments are copied: an intermediate is produced
    sizes = {r.source.name: _elems_of(r.source.shape) for r in stmt.reads
             if r.source.name in args}
    options, transposes = vector_options(info, loads, sizes)
    if not options:
        return None
    chain = consumer_chain(sch, sch.get_sblock(info.name)) if len(info.writes) == 1 else ()
    return GeneralPlan(info, options, loads, transposes, (), chain)


def vector_options(info: BlockAnalysis, loads, sizes: dict):
    """(axes, transposes): the spatial axes a vector may run along, and per axis the
    loads to copy into a transposed layout first, as (axis, buffer, dimension).

    An axis qualifies when it writes every output along one dimension and each load
    either does not depend on it (a broadcast), or has it in its last dimension only
    (contiguous), or has it exactly as one dimension of a buffer no larger than the
    output and an argument of the function (a copy with that dimension last makes it
    contiguous: Cᵀ of Y = T Cᵀ).
    When no axis qualifies, the output's contiguous axis (its loads then gather)."""
    out_elems = _elems(info.spatial)
    axes, transposes = [], []
    for v in info.spatial:
        if v.extent < 2 or not all(w.dim_of(v.name) is not None for w in info.writes):
            continue
        moves = _moves(v.name, loads, info)
        if moves and any(sizes.get(b, out_elems + 1) > out_elems for b, _ in moves):
            continue
        if moves is not None:
            axes.append(v.name)
            transposes += [(v.name, buf, dim) for buf, dim in moves]
    if axes:
        return tuple(axes), tuple(transposes)
    last = info.writes[0].exact[-1] if len(info.writes) == 1 else None
    ok = last and any(v.name == last and v.extent > 1 for v in info.spatial)
    return ((last,) if ok else ()), ()


def _moves(var: str, loads, info: BlockAnalysis):
    """The (buffer, dimension) copies a vector along `var` needs, or None."""
    moves = {}
    for ld in loads:
        dims = [d for d, used in enumerate(ld.uses) if var in used]
        if not dims or dims == [len(ld.uses) - 1]:
            continue
        if len(dims) != 1 or ld.exact[dims[0]] != var:
            return None
        if moves.get(ld.buffer, dims[0]) != dims[0] or ld.buffer in \
                {w.buffer for w in info.writes}:
            return None
        moves[ld.buffer] = dims[0]
    return tuple(sorted(moves.items()))


def _elems_of(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _elems(iters) -> int:
    n = 1
    for v in iters:
        n *= v.extent
    return n


def _with_producers(sch, plan: GeneralPlan, reductions: set) -> GeneralPlan:
    """The plan with the planned reductions whose only consumer is this block."""
    mine = []
    for producer in sch.get_producers(sch.get_sblock(plan.block)):
        name = sch.get(producer).name_hint
        consumers = sch.get_consumers(producer)
        if name in reductions and len(consumers) == 1 and name not in param_buffers(sch):
            mine.append(name)
    return GeneralPlan(plan.info, plan.vec_options, plan.loads, plan.transposes, tuple(mine),
                       plan.chain)


def _reduce_order(decide: Decider, info: BlockAnalysis, p: str) -> list[str]:
    """The order of the reduce loops (a decision when there are several)."""
    names = [v.name for v in info.reduce if v.extent > 1]
    if len(names) < 2:
        return names
    orders = [",".join(o) for o in permutations(names)] if len(names) <= _MAX_PERMUTED \
        else [",".join(names), ",".join(reversed(names))]
    return decide.choice(f"{p}.reduce_order", orders).split(",")


def tile_general(sch, decide: Decider, plan: GeneralPlan, params: CpuParams,
                 plans: dict) -> set:
    """Tile one reduction block and place its producers (`plans` by block name): each
    is computed at the parallel loop, at the last loop of S1, or kept at the root (a
    decision). Returns the names of the blocks scheduled."""
    info, p = plan.info, plan.block
    block = sch.get_sblock(p)
    vec = decide.choice(f"{p}.vector", plan.vec_options)
    vec_var = next(v for v in info.spatial if v.name == vec)
    for _, buffer, dim in (t for t in plan.transposes if t[0] == vec):
        _transposed_copy(sch, block, buffer, dim)
    tiles = register_tiles(decide, info, vec_var, params, p, plan.loads)
    tiles.update(decide_reduce_tiles(decide, info, p))
    order = _reduce_order(decide, info, p)
    write, level = write_stage(sch, block, decide, plan, vec, tiles, params.cores)
    s_groups, r_groups = _split(sch, block, info, tiles, vec, order)
    scheduled = {p}
    if write is not None:
        scheduled.add(sch.get(write).name_hint)
        anchor = (s_groups[0] + s_groups[1])[-1] if level == 2 else s_groups[0][-1]
        sch.reverse_compute_at(write, anchor)
    fuse = decide.choice(f"{p}.parallel", (1, 2) if level == 2 and s_groups[1] else (1,))
    loops = s_groups[0] + (s_groups[1] if fuse == 2 else [])
    outer = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if int(sch.get(outer).extent) > 1:
        sch.parallel(outer)
    levels = [outer] + ([s_groups[1][-1]] if fuse == 1 and s_groups[1] else [])
    for producer in plan.producers:  # before the init is split off this block
        where = decide.choice(f"{producer}.compute_at", ("root",) + tuple(range(len(levels))))
        if where != "root":
            scheduled |= attach_producer(sch, decide, plans[producer], levels[where], params)
    if tiles[vec][-1] > 1:
        vectorize_registers(sch, s_groups[3][-1], params.lanes)
    for loop in s_groups[3][:-1]:  # the register tile: its accumulators stay in registers
        if int(sch.get(loop).extent) > 1:
            sch.unroll(loop)
    vectorize_init_and_write(sch, block, r_groups, write, params)
    annotate_unroll(sch, outer, decide, p)
    return scheduled


def _transposed_copy(sch, block, buffer: str, dim: int) -> None:
    """Read `buffer` through a copy laid out with dimension `dim` last (the copy runs
    at the root, parallel and vectorised with the other root blocks)."""
    from tvm.tirx import IndexMap

    index = next(i for i, r in enumerate(sch.get(block).reads) if r.source.name == buffer)
    ndim = len(sch.get(block).reads[index].source.shape)
    copy = sch.cache_read(block, index, "global")

    def last(*idx):
        return tuple(idx[:dim]) + tuple(idx[dim + 1:]) + (idx[dim],)

    sch.transform_layout(copy, ("write", 0),
                         IndexMap.from_func(last, ndim=ndim, index_dtype="int32"))


def _split(sch, block, info, tiles: dict, vec: str, order: list[str]):
    """Split every loop by its tiles and reorder to S0 S1 R0 S2 R1 S3, the vector axis
    last in each spatial group and the reduce loops in `order`."""
    loops = dict(zip((v.name for v in info.iters), sch.get_loops(block)))
    s_groups, r_groups = [[], [], [], []], [[], []]
    kinds = {v.name: v.kind for v in info.iters}
    spatial = [v.name for v in info.spatial if v.name != vec] + [vec]
    for name in spatial:
        parts = sch.split(loops[name], list(tiles[name])) if name in tiles else [loops[name]]
        for level, part in enumerate(parts):
            s_groups[level].append(part)
    for name in order:
        for level, part in enumerate(sch.split(loops[name], list(tiles[name]))):
            r_groups[level].append(part)
    rest = [loops[v.name] for v in info.iters if kinds[v.name] == "R" and v.name not in order]
    r_groups[0] = rest + r_groups[0]
    sch.reorder(*(s_groups[0] + s_groups[1] + r_groups[0] + s_groups[2] + r_groups[1]
                  + s_groups[3]))
    return s_groups, r_groups


def attach_producer(sch, decide: Decider, plan: GeneralPlan, anchor, params) -> set:
    """Compute a producing reduction at `anchor` (a loop of its consumer's tiles): its
    reduce loops go outside its innermost spatial loop, which is vectorised when the
    producer's loads stream along it."""
    block = sch.get_sblock(plan.block)
    sch.compute_at(block, anchor, preserve_unit_loops=True)
    loops = sch.get_loops(block)
    own = loops[len(loops) - len(plan.info.iters):]
    kinds = [v.kind for v in plan.info.iters]
    spatial = [lp for lp, k in zip(own, kinds) if k == "S"]
    reduce = [lp for lp, k in zip(own, kinds) if k == "R"]
    if reduce and spatial:
        sch.reorder(*(spatial[:-1] + reduce + spatial[-1:]))
        extent = int(sch.get(spatial[-1]).extent)
        if plan.info.spatial[-1].name in plan.vec_options and 1 < extent \
                and (extent <= params.lanes or extent % params.lanes == 0):
            vectorize_registers(sch, spatial[-1], params.lanes)
        init = sch.decompose_reduction(block, reduce[0])
        vectorize_inner(sch, init, params)
    annotate_unroll(sch, spatial[0] if spatial else anchor, decide, plan.block)
    return {plan.block}
