"""Register-blocked micro-kernels for contractions (matmul, batch matmul, dense, conv).

The structure of BLIS / GotoBLAS kernels, as sketch rules: the operand read along
the output's vector axis J (B of a matmul, the weights of a convolution) is packed
inside the kernel into contiguous panels [J / NR][reduction][NR]; an MR x NR tile
of accumulators (MR rows of the axis I along which that panel is reused, NR a
multiple of the vector lanes) lives in a "local" buffer that LLVM keeps in vector
registers, initialised before and stored after the whole reduction, which runs
outside the register tile (its innermost loop unrolled by a decided factor) as a
stream of broadcast-FMAs. Panels of I and J block for the caches (decisions), the
outer blocks run in parallel across the cores. Extents the tile does not divide
are padded (`pad_einsum`) when every access indexes by plain iteration variables,
so the kernel never falls back to scalar remainder code; elementwise consumers are
fused on the tile before the store.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..analysis import BlockAnalysis, IterVar, analyse, param_buffers
from ..blocks import blocks
from ..decisions import Decider
from .common import CpuParams, consumer_chain, fold_chain, inline_candidates, vectorize_inner
from .group_split import group_split
from .packing import PackPlan, find_pack_plan, pack_operand
from .polyphase import polyphase_form
from .tiling import ContractionSketch, vector_last

# The tallest register tile offered (rows of accumulators).
_MAX_ROWS = 16
# On a 16-register (AVX2) target a tile of more than 8 rows spills vector registers
# on Zen 3 although its accumulators fit: each row's broadcast needs a register of its
# own while it is in flight, and LLVM's allocation then runs out (9 x 8: 6 stack
# operands per loop at k_unroll 1 or 2, 2 at 4, none at 8; 10 x 8: 10 at 1), while
# 6 x 16, with more accumulators but 6 broadcasts a step, did not (k_unroll 4, 16).
# At most 8 rows there.
_MAX_ROWS_16_REGISTERS = 8
# Below this many multiply-adds per core the parallel runtime costs more than it saves.
_PARALLEL_WORK = 1 << 15
# Reduction unroll factors offered (those dividing the innermost reduction loop).
_UNROLLS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class KernelPlan:
    """How one contraction block becomes a micro-kernel: the operand packed along the
    vector axis (`pack.iter`), the row axis of the register tile, the operand read
    along the rows that may be packed too (or None), the elementwise consumers fused
    behind it, and whether odd extents may be padded."""

    info: BlockAnalysis
    pack: PackPlan
    row: str
    row_pack: PackPlan | None
    chain: tuple[str, ...]
    paddable: bool

    @property
    def block(self) -> str:
        return self.info.name

    def iter(self, name: str) -> IterVar:
        return next(v for v in self.info.iters if v.name == name)


# Program rewrites the micro-kernel may schedule instead of the task's own form, by
# name: f(PrimFunc) -> the rewritten PrimFunc, or None when it does not apply.
FORMS = {"polyphase": polyphase_form, "grouped": group_split}


class MicroKernelSketch(ContractionSketch):
    """Every contraction block of the task as a register-blocked micro-kernel; the
    other blocks are inlined, fused, or parallelised and vectorised at the root. With
    a `form` (a key of FORMS), the blocks are those of the task's rewritten form."""

    name = "microkernel"

    def __init__(self, plans: tuple, inline: tuple[str, ...], params: CpuParams,
                 form: str | None = None):
        super().__init__(plans, inline, params)
        self.form = form
        self._rewritten: tuple | None = None   # (the computation, its rewritten form)

    def program(self, func, decide: Decider):
        """The task's computation, or its rewritten form, made once per computation
        (the same object each time, as `Sketch.program` asks)."""
        if self.form is None:
            return func
        if self._rewritten is None or self._rewritten[0] is not func:
            self._rewritten = (func, FORMS[self.form](func))
        return self._rewritten[1]

    def schedule_block(self, sch, decide: Decider, plan: KernelPlan) -> set[str]:
        return kernel_block(sch, decide, plan, self.params)


def microkernel_sketches(sch, infos, params: CpuParams) -> list[MicroKernelSketch]:
    """The micro-kernel sketch for a task whose contraction blocks all have an
    operand to pack and a row axis to reuse it along, with a register tile that
    fits the target's vector registers. A transposed convolution gets it on its
    polyphase form (fewer multiply-adds, so preferred to its own form); a grouped
    contraction whose vector axis also picks the group, on its group-split form."""
    import tvm
    from tvm import s_tir

    if not any(i.is_contraction for i in infos):   # nothing to rewrite: skip the forms
        return []

    def on_form(form: str):
        rewritten = FORMS[form](sch.mod["main"])
        if rewritten is None:
            return []
        form_sch = s_tir.Schedule(tvm.IRModule({"main": rewritten}))
        form_infos = [analyse(form_sch, b) for b in blocks(form_sch)]
        return _sketch_of(form_sch, form_infos, params, form)

    return on_form("polyphase") or _sketch_of(sch, infos, params, None) or on_form("grouped")


def _sketch_of(sch, infos, params: CpuParams, form: str | None) -> list[MicroKernelSketch]:
    args = param_buffers(sch)
    plans = []
    for info in infos:
        if not (info.is_contraction and info.loops_bound):
            continue
        plan = _kernel_plan(sch, info, args)
        if plan is None or not register_tiles(plan, params):
            return []
        plans.append(plan)
    if not plans:
        return []
    keep = frozenset(p.block for p in plans).union(*(p.chain for p in plans))
    return [MicroKernelSketch(tuple(plans), inline_candidates(sch, keep), params, form)]


def _kernel_plan(sch, info: BlockAnalysis, args: set[str]) -> KernelPlan | None:
    pack = find_pack_plan(info, args)
    if pack is None:
        return None
    packed = next(a for a in info.reads if a.buffer == pack.buffer)
    # the row axis: the innermost spatial axis the packed panel does not depend on
    rows = [v for v in info.spatial
            if v.name != pack.iter and v.extent > 1 and v.name not in packed.iters()]
    if not rows:
        return None
    row = rows[-1].name
    paddable = all(e is not None for a in info.reads + info.writes for e in a.exact)
    chain = consumer_chain(sch, sch.get_sblock(info.name))
    return KernelPlan(info, pack, row, _row_pack(info, args, pack, row), chain, paddable)


def _row_pack(info: BlockAnalysis, args: set[str], pack: PackPlan, row: str):
    """The argument operand indexed exactly by the row axis (A of a matmul): packed
    into [rows / MR][reduction][MR], its MR broadcasts per step are adjacent."""
    reduce = {v.name for v in info.reduce}
    for acc in info.reads:
        dim = acc.dim_of(row)
        if acc.buffer == pack.buffer or acc.buffer not in args or dim is None:
            continue
        rest = [d for d in range(len(acc.uses)) if d != dim]
        outer_at = next((i for i, d in enumerate(rest) if acc.uses[d] & reduce), 0)
        return PackPlan(acc.buffer, dim, row, outer_at)
    return None


def _fits(extent: int, tile: int, paddable: bool, slack: int) -> bool:
    """Whether a tile covers the extent exactly, or (padded) wasting little."""
    waste = -extent % tile
    return waste == 0 or (paddable and waste <= max(extent // 8, slack))


def register_tiles(plan: KernelPlan, params: CpuParams) -> list[tuple[int, int]]:
    """The legal (MR, NR) register tiles: MR * NR / lanes accumulators, NR / lanes
    registers of the packed panel and one broadcast fit the vector registers; enough
    accumulators (half the registers) where the extents allow; tiles that do not
    divide the extents only when padding is possible and wastes little."""
    rows, cols = plan.iter(plan.row).extent, plan.iter(plan.pack.iter).extent
    lanes, regs = params.lanes, params.registers
    tallest = _MAX_ROWS if regs > 16 else _MAX_ROWS_16_REGISTERS
    out = []
    for vectors in range(1, params.max_vectors + 1):
        nr = vectors * lanes
        if not _fits(cols, nr, plan.paddable, lanes - 1):
            continue
        # three or more panel vectors: LLVM keeps two more registers live (a 9 x 48
        # AVX-512 tile, 27 accumulators + 3 + 1 = 31 of 32, spilled 2 loads and 2 stores
        # per 108 FMAs on Rocket Lake)
        spare = 2 if vectors >= 3 else 0
        for mr in range(1, min(rows, tallest) + 1):
            if mr * vectors + vectors + 1 + spare > regs:
                break
            if _fits(rows, mr, plan.paddable, 0):
                out.append((mr, nr))
    # Each step loads MR broadcasts and NR / lanes panel vectors for MR * NR / lanes
    # FMAs: tiles holding at least 3/8 of the registers in accumulators keep the loads
    # per FMA low enough for the FMA units to set the pace. Not half: on narrow rows
    # (a grouped convolution's 28-wide rows) half leaves only the widest tile, whose
    # unrolled taps spill, and drops the narrower one that does not.
    enough = min(regs * 3 // 8, max((m * n // lanes for m, n in out), default=0))
    return [(m, n) for m, n in out if m * n // lanes >= enough]


def _padded(extent: int, tile: int) -> int:
    return -(-extent // tile) * tile


def _pad(sch, block, plan: KernelPlan, mr: int, nr: int) -> bool:
    """Pad the row and vector axes to whole tiles; whether anything was padded."""
    sizes = {plan.row: _padded(plan.iter(plan.row).extent, mr),
             plan.pack.iter: _padded(plan.iter(plan.pack.iter).extent, nr)}
    if all(sizes[n] == plan.iter(n).extent for n in sizes):
        return False
    sch.pad_einsum(block, [sizes.get(v.name, v.extent) for v in plan.info.iters])
    return True


def _pack(sch, block, pack: PackPlan, width: int) -> str:
    """Pack an operand into panels of `width`. When the operand was padded, its
    padding stage is inlined into the packing copy, so padding costs no extra pass."""
    names = {r.source.name for r in sch.get(block).reads}
    padded = pack.buffer + "_pad"
    if padded not in names:
        return pack_operand(sch, block, pack, width)
    name = pack_operand(sch, block, replace(pack, buffer=padded), width)
    sch.compute_inline(sch.get_sblock(padded))
    return name


def _write_stage(sch, block, plan: KernelPlan, padded: bool):
    """The stage that stores the register tile: the fused consumer chain (the tile
    then lives in a local buffer of the contraction itself), else a local cache."""
    if plan.chain and not padded:
        stage = fold_chain(sch, plan.chain)
        sch.set_scope(block, 0, "local")
    else:
        stage = sch.cache_write(block, 0, "local")
    vector_last(sch, block, plan.info, plan.pack.iter)
    return stage


def kernel_block(sch, decide: Decider, plan: KernelPlan, params: CpuParams) -> set:
    """Schedule one contraction block as a micro-kernel; returns the names of the
    blocks it scheduled."""
    p = plan.block
    block = sch.get_sblock(p)
    mr, nr = decide.choice(f"{p}.register_tile", register_tiles(plan, params))
    padded = _pad(sch, block, plan, mr, nr)
    _pack(sch, block, plan.pack, nr)
    if plan.row_pack is not None and decide.choice(f"{p}.pack_rows", (False, True)):
        _pack(sch, block, plan.row_pack, mr)
    write = _write_stage(sch, block, plan, padded)
    loops = _split(sch, block, decide, plan, mr, nr, params)
    sch.reorder(*loops["outer"], *loops["panels"], *loops["reduce"], *loops["tile"])
    sch.reverse_compute_at(write, loops["panels"][-1])
    _parallelise(sch, loops, plan, params)
    _vectorise_tile(sch, block, loops)
    if loops["reduce"]:
        init = sch.decompose_reduction(block, loops["reduce"][0])
        _vectorise_tile(sch, init, None)
    vectorize_inner(sch, write, params)
    return {p, sch.get(write).name_hint}


def _split(sch, block, decide: Decider, plan: KernelPlan, mr: int, nr: int,
           params: CpuParams) -> dict:
    """Split the row and vector axes into blocks, panels and the register tile, and
    the innermost reduction loop by the unroll factor; the loops grouped by level."""
    p, info = plan.block, plan.info
    outer, reduce, parts = [], [], {}
    for iv, loop in zip(info.iters, sch.get_loops(block)):
        extent = int(sch.get(loop).extent)
        if iv.name in (plan.row, plan.pack.iter):
            tile = mr if iv.name == plan.row else nr
            panels = decide.tile(f"{p}.{iv.name}.panels", extent // tile, 2, extent // tile)
            # NR as NR / lanes registers (see `_vectorise_tile`)
            inner = [tile] if iv.name == plan.row else [nr // params.lanes, params.lanes]
            parts[iv.name] = sch.split(loop, [*panels, *inner])
        elif iv.kind == "S":
            outer.append(loop)
        else:
            reduce.append(loop)
    live = [r for r in reduce if int(sch.get(r).extent) > 1]
    if live:
        last = int(sch.get(live[-1]).extent)
        unroll = decide.choice(f"{p}.k_unroll", [u for u in _UNROLLS if last % u == 0])
        if unroll > 1:
            at = reduce.index(live[-1])
            reduce[at:at + 1] = sch.split(live[-1], [None, unroll])
    i, j = parts[plan.row], parts[plan.pack.iter]
    panels = [j[1], i[1]] if decide.choice(f"{p}.rows_inner", (True, False)) else [i[1], j[1]]
    return {"outer": outer + [i[0], j[0]], "panels": panels, "reduce": reduce,
            "tile": [i[2], *j[2:]], "unroll": reduce[-1] if live and unroll > 1 else None}


def _parallelise(sch, loops: dict, plan: KernelPlan, params: CpuParams) -> None:
    """Run the outer blocks in parallel, fused with the outer panel loop when they
    alone give the cores too few chunks; small work stays on one core."""
    work = 1
    for v in plan.info.iters:
        work *= v.extent
    if params.cores == 1 or work < _PARALLEL_WORK * params.cores:
        return
    fused = list(loops["outer"])
    if _extent(sch, fused) < 2 * params.cores:
        fused.append(loops["panels"][0])
    if _extent(sch, fused) > 1:
        sch.parallel(sch.fuse(*fused) if len(fused) > 1 else fused[0])


def _vectorise_tile(sch, block, loops: dict | None) -> None:
    """Vectorise the tile's NR axis one register at a time (NR / lanes unrolled vectors
    of the lanes: LLVM widens a vector of 3, 5, 6 or 7 registers to the next power of
    two, and 8 x 48 then spilled 420 times per step), unroll its MR rows and the
    reduction's unrolled loop. `loops` None: the block's last three loops (an init
    stage)."""
    if loops is None:
        tile = sch.get_loops(block)[-3:]
        unroll = None
    else:
        tile, unroll = loops["tile"], loops["unroll"]
    sch.vectorize(tile[-1])
    for loop in tile[:-1]:
        if _extent(sch, [loop]) > 1:
            sch.unroll(loop)
    if unroll is not None:
        sch.unroll(unroll)


def _extent(sch, loops) -> int:
    out = 1
    for loop in loops:
        out *= int(sch.get(loop).extent)
    return out
