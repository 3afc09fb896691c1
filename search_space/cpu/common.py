"""Steps the CPU sketches share: inlining, unroll annotations, vector-aware tiles,
and parallel + vectorised loops for the blocks no other rule took."""
from __future__ import annotations

from dataclasses import dataclass

from ..analysis import analyse, loop_kinds, loops_bound
from ..blocks import blocks, is_spatial_block
from ..decisions import Decider
from .lanes import vector_lanes, vector_registers

UNROLL_STEPS = (0, 16, 64, 512)


@dataclass(frozen=True)
class CpuParams:
    """What the CPU rules need to know about the target."""

    lanes: int          # SIMD lanes of the task's dtype
    cores: int          # worker threads of the parallel runtime
    max_vectors: int = 4    # widest register tile along the vector axis, in vectors
    max_accumulators: int = 24  # vector registers a register tile may hold
    min_accumulators: int = 4   # fewer cannot hide the latency of the FMA units
    registers: int = 16     # architectural vector registers (a micro-kernel's budget)

    @staticmethod
    def of(task, target) -> "CpuParams":
        """Vector lanes of the task's dtype and the cores of the target (a TargetSpec)."""
        cores = int(target.config.get("num-cores", 1) or 1)
        dtype = task.outputs[-1].dtype if task.outputs else "float32"
        return CpuParams(lanes=vector_lanes(target, dtype), cores=max(1, cores),
                         registers=vector_registers(target))


class _Unchecked:
    """The schedule with its primitives called past TVM's Python argument type checks.

    Those checks cost about as much as the primitives themselves (union types are
    matched by formatting error messages), and the search applies sketches
    thousands of times with arguments our own code builds. Attributes that are not
    type-checked methods pass through unchanged.
    """

    def __init__(self, sch):
        self._sch = sch

    def __getattr__(self, name):
        attr = getattr(type(self._sch), name, None)
        raw = getattr(attr, "__wrapped__", None)
        if raw is None:
            return getattr(self._sch, name)
        return raw.__get__(self._sch, type(self._sch))


def unchecked(sch):
    """`sch` with unchecked primitives (see `_Unchecked`)."""
    return sch if isinstance(sch, _Unchecked) else _Unchecked(sch)


def inline_candidates(sch, keep: frozenset = frozenset()) -> tuple[str, ...]:
    """Elementwise/injective stages (not outputs, not in `keep`) that the schedule
    lets us inline into their consumers, in program order. Found once per sketch on
    the unscheduled program, so applying a candidate does not re-analyse it."""
    names = []
    for block in blocks(sch):
        info = analyse(sch, block)
        if info.is_output or not info.is_spatial or info.name in keep or len(info.writes) != 1:
            continue
        if _can_inline(sch, block):
            names.append(info.name)
    return tuple(names)


def inline_producers(sch, decide: Decider, candidates: tuple[str, ...]) -> set:
    """Inline each candidate stage or not (a decision each); returns those inlined."""
    inlined = set()
    for name in candidates:
        if decide.choice(f"inline.{name}", (True, False)):
            sch.compute_inline(sch.get_sblock(name))
            inlined.add(name)
    return inlined


def _can_inline(sch, block) -> bool:
    trial = sch.copy()
    try:
        trial.compute_inline(trial.get_sblock(trial.get(block).name_hint))
    except Exception:  # the primitive refused: not inlinable in this program
        return False
    return True


def consumer_chain(sch, block) -> tuple[str, ...]:
    """The elementwise stages after `block` that can be folded into one stage and
    fused into its tiles: its single spatial consumer reading `block`'s output by plain
    iter vars (one fused under a tile reads just the tile; a consumer reading
    out[x // 2, x % 2] would span other tiles' elements), then single elementwise
    consumers that reverse-inline into it. Empty when there is none."""
    consumers = sch.get_consumers(block)
    if len(consumers) != 1:
        return ()
    first = analyse(sch, consumers[0])
    written = sch.get(block).writes[0].source.name
    if not first.is_spatial or not all(
            e is not None for a in first.reads if a.buffer == written for e in a.exact):
        return ()
    trial = sch.copy()
    chain = [sch.get(consumers[0]).name_hint]
    while True:
        nxt = trial.get_consumers(trial.get_sblock(chain[0]))
        if len(nxt) != 1 or not analyse(trial, nxt[0]).is_elementwise:
            return tuple(chain)
        name = trial.get(nxt[0]).name_hint
        try:
            trial.reverse_compute_inline(nxt[0])
        except Exception:  # not a pure map of the first stage: it stays separate
            return tuple(chain)
        chain.append(name)


def fold_chain(sch, chain: tuple[str, ...]):
    """Reverse-inline the rest of a consumer chain into its first stage; returns it."""
    for name in chain[1:]:
        sch.reverse_compute_inline(sch.get_sblock(name))
    return sch.get_sblock(chain[0])


def annotate_unroll(sch, loop, decide: Decider, prefix: str) -> None:
    """Unroll inner loops under `loop` up to a decided number of steps. Explicit
    unrolling (TVM copies the body): LLVM ignores TVM's unroll hints."""
    step = decide.choice(f"{prefix}.unroll", UNROLL_STEPS)
    if step:
        sch.annotate(loop, "pragma_auto_unroll_max_step", step)
        sch.annotate(loop, "pragma_unroll_explicit", 1)


def _pow2_divisors(extent: int, limit: int) -> list[int]:
    return [d for d in (1, 2, 4, 8, 16, 32, 64) if d <= limit and extent % d == 0]


def vector_width(extent: int, params: CpuParams) -> int:
    """The widest clean vector for a loop of `extent`: a multiple of the lanes up to
    `max_vectors` registers, else the widest power of two that divides it (vectors
    of odd widths cost LLVM long compiles and masked code)."""
    width = params.lanes * params.max_vectors
    wide = [f for f in range(params.lanes, width + 1, params.lanes) if extent % f == 0]
    return max(wide) if wide else max(_pow2_divisors(extent, params.lanes))


def vector_tile(decide: Decider, name: str, extent: int, parts: int, params: CpuParams):
    """Tile factors for the vectorised axis. The innermost is a multiple of the lanes
    whenever the extent allows it (the decision is then made in units of lanes), else
    a power of two up to the lanes (its own decision, the outer levels tile the rest)."""
    lanes = params.lanes
    if extent % lanes == 0:
        units = decide.tile(f"{name}@{lanes}", extent // lanes, parts, params.max_vectors)
        return units[:-1] + (units[-1] * lanes,)
    widths = _pow2_divisors(extent, lanes)  # a quarter vector at least, when possible
    inner = decide.choice(f"{name}.vector", [w for w in widths if w >= max(2, lanes // 4)]
                          or widths)
    outer = decide.tile(name, extent // inner, parts - 1, extent // inner)
    return outer + (inner,)


def vectorize_inner(sch, block, params: CpuParams, keep: int = 0) -> None:
    """Vectorise the innermost loop of `block` when it is data parallel, split to a
    clean vector width (see `vector_width`). The outer `keep` loops (a parallel row
    loop, say) are never touched."""
    loops = sch.get_loops(block)
    if len(loops) <= keep:
        return
    inner = loops[-1]
    extent = _extent(sch, inner)
    if extent <= 1 or loop_kinds(sch, block)[-1] != "S":
        return
    width = vector_width(extent, params)
    if width == 1:
        return
    if width < extent:
        inner = sch.split(inner, [None, width])[1]
    sch.vectorize(inner)


def vectorize_registers(sch, loop, lanes: int) -> None:
    """Vectorise `loop` one vector register at a time: a loop of several registers'
    width becomes unrolled vectors of `lanes`. LLVM widens a vector of 3 (5, 6, 7)
    registers to the next power of two, and a register tile so widened no longer fits
    (8 rows x 48 lanes spilled 418 times per step on AVX-512)."""
    extent = _extent(sch, loop)
    if extent > lanes and extent % lanes == 0:
        outer, loop = sch.split(loop, [None, lanes])
        sch.unroll(outer)
    sch.vectorize(loop)


def parallel_outer(sch, block, params: CpuParams):
    """Fuse the leading data-parallel loops of a root-level block (all but the last,
    kept to vectorise) until every core gets several chunks, and parallelise them."""
    loops = sch.get_loops(block)
    kinds = loop_kinds(sch, block)
    n, extent = 0, 1
    while n < len(loops) - 1 and kinds[n] == "S":
        extent *= _extent(sch, loops[n])
        n += 1
        if extent >= 8 * params.cores:
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
        if not loops_bound(sch, block):
            continue
        parallel_outer(sch, block, params)
        if is_spatial_block(sch, block):
            vectorize_inner(sch, block, params)


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)

