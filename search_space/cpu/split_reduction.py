"""`split_reduce`: a reduction to few outputs split across cores and vector lanes.

A reduction whose outputs are too few to give every core rows of its own (a norm or a
sum of a whole tensor: one value per batch) has nothing to parallelise over its spatial
loops; the rows sketch runs it on one core. Here the reduction itself is split: its
reduce loops are fused and cut into (parallel chunks x serial steps x vector lanes),
and one rfactor on the fused (chunk, lane) loop makes a partial result per chunk and
lane (a small buffer, one vector of partials per chunk). Each core streams its chunk
with the vector of partials in registers; a short combine follows, itself vectorised
by a second rfactor (the chunks' vectors added lane by lane, then one vector's lanes). Elementwise
producers (the square of a norm) are inlined into the reduction, epilogues (its sqrt)
run on the few outputs after it.

Any combiner TVM's rfactor knows (sum, max, min, product) and any number of reduce
axes. A reduce extent that no (chunks x lanes) divides leaves a ragged last step: it
is peeled off the vector loop (TVM's loop partitioning), so the lanes never run under
a mask. With several reduce axes whose innermost extent no vector divides (4095 x
4097), the chunks split the outer axes and the lanes run along the innermost one.

Decisions: `<block>.chunks` (parallel chunks, multiples of the cores), `<block>.lanes`
(partials per chunk: 1 to 8 vectors, several independent accumulators hide the add's
latency) and `<block>.unroll`.
"""
from __future__ import annotations

from ..analysis import BlockAnalysis, loop_kinds
from ..decisions import Decider, InvalidCandidate
from ..sketch import Sketch
from .common import CpuParams, annotate_unroll, finish_root_blocks, inline_candidates, unchecked

# a reduction is "to few outputs" when its spatial extent gives each core fewer rows
# than this: the rows sketch then has too little to spread over the cores
FEW_ROWS_PER_CORE = 4
# the reduce extent must fill at least this many vectors per core to be worth splitting
MIN_VECTORS_PER_CORE = 16
ACCUMULATOR_VECTORS = (1, 2, 4, 8)
CHUNKS_PER_CORE = (1, 2, 4, 8)


def _product(values) -> int:
    n = 1
    for v in values:
        n *= v
    return n


def is_few_output(info: BlockAnalysis, params: CpuParams) -> bool:
    """A reduction whose outputs cannot fill the cores but whose reduce loops can."""
    if not info.is_reduction or len(info.writes) != 1 or not info.loops_bound:
        return False
    outputs = _product(v.extent for v in info.spatial)
    work = _product(v.extent for v in info.reduce)
    return outputs < FEW_ROWS_PER_CORE * params.cores \
        and work >= MIN_VECTORS_PER_CORE * params.lanes * params.cores


def lane_options(work: int, params: CpuParams) -> tuple[int, ...]:
    """Partials per chunk: whole vectors, as many as leave each core some steps."""
    return tuple(params.lanes * m for m in ACCUMULATOR_VECTORS
                 if params.lanes * m * params.cores * 4 <= work) or (params.lanes,)


def chunk_options(work: int, lanes: int, params: CpuParams) -> tuple[int, ...]:
    """Parallel chunks: multiples of the cores, each chunk at least four steps long."""
    return tuple(params.cores * m for m in CHUNKS_PER_CORE
                 if params.cores * m * lanes * 4 <= work) or (params.cores,)


class SplitReductionSketch(Sketch):
    """Few-output reductions split into parallel chunks of vector partials (see the
    module docstring)."""

    name = "split_reduce"
    math_variants = True

    def __init__(self, reductions: tuple[BlockAnalysis, ...], inline: tuple[str, ...],
                 params: CpuParams):
        self.reductions = reductions   # the few-output reductions, in program order
        self.inline = inline           # elementwise stages inlined into their consumers
        self.params = params

    def apply(self, sch, decide: Decider) -> None:
        sch = unchecked(sch)
        for name in self.inline:
            sch.compute_inline(sch.get_sblock(name))
        done = set()
        for info in self.reductions:
            done |= self._split(sch, decide, info)
        finish_root_blocks(sch, self.params, done)

    def _split(self, sch, decide: Decider, info: BlockAnalysis) -> set[str]:
        """Split one reduction; returns the names of the blocks it scheduled."""
        block = sch.get_sblock(info.name)
        loops = sch.get_loops(block)
        kinds = loop_kinds(sch, block)
        if set(kinds) - {"S", "R"}:
            raise InvalidCandidate(f"split_reduce: {info.name} has loops of no kind")
        spatial = [lp for lp, k in zip(loops, kinds) if k == "S"]
        reduce = [lp for lp, k in zip(loops, kinds) if k == "R"]
        if kinds != ["S"] * len(spatial) + ["R"] * len(reduce):
            sch.reorder(*spatial, *reduce)
        extents = [int(sch.get(lp).extent) for lp in reduce]
        flat = len(reduce) == 1 or any(extents[-1] % w == 0 for w in
                                       lane_options(_product(extents), self.params))
        split = self._flat if flat else self._by_rows
        chunk, lane, steps, ragged = split(sch, decide, info.name, reduce, extents)
        chunks, lanes = int(sch.get(chunk).extent), int(sch.get(lane).extent)
        # the partial buffer gets the (chunk, lane) axis last: a chunk's vector of
        # partials is contiguous
        partial = sch.rfactor(sch.fuse(chunk, lane), len(info.writes[0].uses))
        loops = sch.get_loops(partial)
        outer, chunk_lane = loops[:-1 - steps], loops[-1 - steps]
        inner = loops[-steps:]
        chunk, lane = sch.split(chunk_lane, [chunks, lanes])
        sch.reorder(*inner, lane)
        par = sch.fuse(*outer, chunk) if outer else chunk
        sch.parallel(par)
        if ragged:
            # the last step runs past the end: peeled off, the vector loop stays whole
            sch.annotate(inner[-1], "pragma_loop_partition_hint", 1)
        sch.vectorize(lane)  # before decomposing: the update alone is no reduction
        init = sch.decompose_reduction(partial, inner[0])
        sch.vectorize(sch.get_loops(init)[-1])
        annotate_unroll(sch, par, decide, info.name)
        return {info.name, sch.get(partial).name_hint, sch.get(init).name_hint,
                *self._combine(sch, info, chunks, lanes)}

    def _flat(self, sch, decide: Decider, name: str, reduce: list, extents: list[int]):
        """One loop over every reduced element cut into (chunks, steps, lanes); with
        several reduce axes the lanes divide the innermost extent, so that a vector
        never crosses a row. Returns the chunk and lane loops (adjacent), how many step
        loops follow them, and whether the last step is ragged."""
        work = _product(extents)
        fused = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
        lanes = decide.choice(f"{name}.lanes", [w for w in lane_options(work, self.params)
                                                if len(reduce) == 1 or extents[-1] % w == 0])
        chunks = decide.choice(f"{name}.chunks", chunk_options(work, lanes, self.params))
        chunk, step, lane = sch.split(fused, [chunks, None, lanes])
        sch.reorder(lane, step)
        return chunk, lane, 1, work % (chunks * lanes) != 0

    def _by_rows(self, sch, decide: Decider, name: str, reduce: list, extents: list[int]):
        """Rows no vector divides: chunks of the outer reduce loops, the lanes along the
        innermost one (a fused loop would find a row by division: gathered lanes).
        Returns what `_flat` does, with two step loops (rows, steps of a row)."""
        outer = sch.fuse(*reduce[:-1]) if len(reduce) > 2 else reduce[0]
        lanes = decide.choice(f"{name}.lanes", tuple(
            self.params.lanes * m for m in ACCUMULATOR_VECTORS
            if self.params.lanes * m <= extents[-1]) or (self.params.lanes,))
        rows = _product(extents[:-1])
        chunks = decide.choice(f"{name}.chunks", chunk_options(rows * lanes, lanes,
                                                               self.params))
        chunk, row = sch.split(outer, [chunks, None])
        step, lane = sch.split(reduce[-1], [None, lanes])
        sch.reorder(chunk, lane, row, step)
        return chunk, lane, 2, extents[-1] % lanes != 0

    def _combine(self, sch, info: BlockAnalysis, chunks: int, lanes: int) -> set[str]:
        """The partials combined a vector at a time (the chunks' vectors added lane by
        lane, then the lanes of one vector): up to thousands of partials on many
        cores, each a scalar add in a chain otherwise."""
        if chunks == 1:
            return set()
        block = sch.get_sblock(info.name)
        *_, chunk_lane = sch.get_loops(block)
        chunk, lane = sch.split(chunk_lane, [chunks, lanes])
        by_lane = sch.rfactor(lane, len(info.writes[0].uses))
        *_, chunk, lane = sch.get_loops(by_lane)
        sch.vectorize(lane)
        init = sch.decompose_reduction(by_lane, chunk)
        sch.vectorize(sch.get_loops(init)[-1])
        return {sch.get(by_lane).name_hint, sch.get(init).name_hint}


def split_reduction_sketches(sch, infos, params: CpuParams) -> list[SplitReductionSketch]:
    """`split_reduce` for a program whose reductions all go to few outputs (see
    `is_few_output`) and whose other stages are elementwise or injective."""
    reductions = [i for i in infos if i.is_reduction]
    if not reductions or not all(is_few_output(i, params) for i in reductions):
        return []
    if not all(i.is_spatial or i.is_reduction for i in infos):
        return []
    names = {i.name for i in reductions}
    inline = tuple(n for n in inline_candidates(sch) if n not in names)
    return [SplitReductionSketch(tuple(reductions), inline, params)]
