"""The tensor-core sketch: GEMM-shaped reductions on 16-bit inputs computed by warp-level
`mma.sync` (sm_80 and newer).

The block is brought into GEMM form (`gemm_form.py`: matmul, batch matmul, dense,
implicit-GEMM convolution) with every dimension padded to the block tile, then:

- grid: one thread block per BM x BN output tile (batch on blockIdx.y; BM and BN up to
  256), walked in groups of `raster` tile rows so neighbouring blocks share their A and
  B panels in L2;
- block: `warps_m x warps_n` warps (threadIdx.y), each computing a `frags_m x frags_n`
  tile of 16 x 16 accumulators in registers (the mma fragment layout, `mma_intrin.py`);
- K in chunks of `k_chunk`; each chunk of A and B is copied into dynamic shared memory
  by all threads with `vector`-wide `cp.async` copies, rows padded against bank
  conflicts (`tensor_core_budget.padded_row`), in a software pipeline of `stages`
  buffers (the copies of later chunks are in flight while the warps compute on the
  current one);
- per 16-wide K step, `ldmatrix` loads each warp's fragments and two
  `mma.sync.m16n8k16` per fragment pair accumulate (fp32, or fp16 when the workload
  accumulates in fp16); with `frag_buffers` 2 the fragments are double-buffered in
  registers: step k + 1's ldmatrix is issued before step k's mma (a software pipeline on
  the K steps of a chunk);
- write-back per 16 x 16 accumulator: fragment -> the warp's own 16 x 16 staging tile in
  shared memory -> global memory, `out_vector` elements per store (16 bytes where the
  output rows allow), with the elementwise consumers (bias, activation, casts) and the
  padding's bounds folded into that store. The staging is sized per warp, not per block
  tile, so it does not bound the block tile.

All decisions are drawn before the schedule is built and each is drawn within what the
earlier ones leave of the target's budgets (threads, registers, shared memory;
`tensor_core_budget.py`), so samples fit by construction; `check` still measures the
lowered kernel.

The same schedule can be realised for the CPU (`CPU_CHECK`): every loop and layout as on
the GPU, but thread loops serial, buffers in plain memory and each intrinsic left as its
description computes it (`tensorize` only swaps a matched description for the
instruction). Built for llvm it checks the schedule's index arithmetic -- GEMM form,
padding, predicates, fragment layouts, write-back -- against the reference; a race-free
GPU kernel computes what its serialised threads compute.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..decisions import Decider
from ..sketch import Sketch
from .analysis import classify
from .common import (
    annotate_unroll,
    bind_unbound,
    fold_consumers,
    inline_spatial,
    try_inline,
)
from .gemm_form import BATCH, K, M, N, gemm_roles, to_gemm_form
from .limits import GpuLimits
from .mma_intrin import (
    FRAG_SCOPE,
    INPUT_DTYPES,
    OUT_SCOPE,
    TILE,
    WARP,
    fragment_slot,
    intrin_names,
)
from .tensor_core_budget import ALIGN_FACTOR, ROW_PAD, decide_block, output_run

MMA_MIN_ARCH = 80


@dataclass(frozen=True)
class Realization:
    """Where the schedule runs: on the GPU, or serialised on the CPU for the check of
    its index arithmetic (see the module docstring)."""

    on_gpu: bool = True

    def bind(self, sch, loop, thread: str) -> None:
        if self.on_gpu:
            sch.bind(loop, thread)

    def tensorize(self, sch, loop, intrin: str) -> None:
        if self.on_gpu:
            sch.tensorize(loop, intrin)

    def scope(self, scope: str) -> str:
        return scope if self.on_gpu else "global"


GPU, CPU_CHECK = Realization(True), Realization(False)


def arch_number(target) -> int:
    """80 for sm_80, 90 for sm_90a."""
    digits = "".join(ch for ch in str(target.config.get("arch", "sm_0")) if ch.isdigit())
    return int(digits or 0)


def tensor_core_blocks(sch, target) -> list[str]:
    """The blocks this sketch computes on tensor cores: GEMM-shaped reductions on fp16
    or bf16 inputs accumulating in fp32 (or fp16 from fp16), on sm_80 and newer."""
    if arch_number(target) < MMA_MIN_ARCH:
        return []
    out = []
    for name in classify(sch).tiled:
        roles = gemm_roles(sch, sch.get_sblock(name))
        if roles is not None and roles.in_dtype in INPUT_DTYPES and (
                roles.acc_dtype == "float32"
                or roles.acc_dtype == roles.in_dtype == "float16"):
            out.append(name)
    return out


class TensorCoreSketch(Sketch):
    """mma.sync tiles for the task's GEMM-shaped reductions (see the module docstring);
    the other blocks are inlined or bound as in the other sketches."""

    name = "tensor_core"
    # where it applies, the same GEMM on the SIMT sketches runs on the FP32 pipes at a
    # small fraction of the tensor cores' throughput: a search draws it this many times
    # as often as each other sketch until it has measurements (see rules.py)
    prior = 4.0

    def __init__(self, limits: GpuLimits, target, realization: Realization = GPU):
        self.limits = limits
        self.target = target
        self.realization = realization

    def apply(self, sch, decide: Decider) -> None:
        spatial = classify(sch).spatial   # the task's own, not the sketch's stages
        for name in tensor_core_blocks(sch, self.target):
            schedule_gemm(sch, name, decide, self.limits, self.realization)
        inline_spatial(sch, spatial)
        if self.realization.on_gpu:
            bind_unbound(sch, self.limits, decide)


def schedule_gemm(sch, name: str, decide: Decider, limits: GpuLimits,
                  on: Realization = GPU) -> None:
    """The tensor-core schedule of block `name` (see the module docstring)."""
    roles = gemm_roles(sch, sch.get_sblock(name))
    d = decide_block(decide, name, roles, limits, output_run(sch, sch.get_sblock(name), roles))
    to_gemm_form(sch, name, roles, {BATCH: 1, M: d["bm"], N: d["bn"], K: d["kc"]})
    intrin = intrin_names(roles.in_dtype, roles.acc_dtype, roles.b_kn)
    block = sch.get_sblock(name)
    batch = BATCH in roles.groups
    loops = sch.get_loops(block)
    outer, inner = [], []
    for lp in loops[int(batch):]:
        o, i = sch.split(lp, [None, TILE])
        outer.append(o)
        inner.append(i)
    mo, no, ko = outer
    sch.reorder(mo, no, ko, *inner)
    sch.blockize(inner[0])
    outer_block = sch.get_sblock(name + "_o")
    m0, m1, m2 = sch.split(mo, [None, d["wm"], d["fm"]])
    n0, n1, n2 = sch.split(no, [None, d["wn"], d["fn"]])
    k0, k1 = sch.split(ko, [None, d["kc"] // TILE])
    m0a, m0b = sch.split(m0, [None, d["raster"]])
    sch.reorder(m0a, n0, m0b, m1, n1, k0, k1, m2, n2)
    bx = sch.fuse(m0a, n0, m0b)
    on.bind(sch, bx, "blockIdx.x")
    if batch:
        on.bind(sch, sch.get_loops(outer_block)[0], "blockIdx.y")
    ty = sch.fuse(m1, n1)
    on.bind(sch, ty, "threadIdx.y")
    _stage_inputs(sch, outer_block, roles, k0, k1, d, intrin, on)
    _stage_output(sch, outer_block, ty, intrin, d, on)
    sch.decompose_reduction(outer_block, k0)
    on.tensorize(sch, sch.get_loops(sch.get_sblock(name))[-3], intrin.compute)
    on.tensorize(sch, sch.get_loops(sch.get_sblock(name + "_init"))[-2], intrin.fill)
    _annotate_pipelines(sch, k0, k1, d, on)
    annotate_unroll(sch, bx, d["unroll"])


def _annotate_pipelines(sch, k0, k1, d, on: Realization) -> None:
    """The software pipelines: over K chunks, the next chunks' copies in flight while the
    warps compute on the current one (asynchronous copies on the GPU); with
    `frag_buffers` 2, over a chunk's K steps, step k + 1's fragment loads before step
    k's mma. The CPU check lowers the same pipelines (its loops are serial), so it checks
    their prologues, epilogues and multi-versioned buffers too."""
    last = d["stages"] - 1
    if d["frag_buffers"] == 2:
        sch.annotate(k1, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(k1, "software_pipeline_order", [0, 1, 2])
        # the inner pipeline's prologue, body and epilogue are the outer loop's last
        # three statements, all in its compute stage
        sch.annotate(k0, "software_pipeline_stage", [0, 0, last, last, last])
        sch.annotate(k0, "software_pipeline_order", [0, 1, 2, 3, 4])
    else:
        sch.annotate(k0, "software_pipeline_stage", [0, 0, last])
        sch.annotate(k0, "software_pipeline_order", [0, 1, 2])
    if on.on_gpu:
        sch.annotate(k0, "software_pipeline_async_stages", [0])


def _stage_inputs(sch, block, roles, k0, k1, d, intrin, on: Realization) -> None:
    """A and B: global -> shared (cooperative, vectorised, async) at each K chunk, shared
    -> fragments (ldmatrix) at each 16-wide K step."""
    threads = d["wm"] * d["wn"]
    for key, index, load in (("A", roles.a_index, intrin.load_a), ("B", roles.b_index,
                                                                   intrin.load_b)):
        smem = sch.cache_read(block, index, on.scope("shared.dyn"))
        sch.compute_at(smem, k0)
        _inline_producers(sch, smem)
        fused = sch.fuse(*sch.get_loops(smem)[-2:])
        _, ty, tx, vec = sch.split(fused, [None, threads, WARP, d["vector"]])
        on.bind(sch, ty, "threadIdx.y")
        on.bind(sch, tx, "threadIdx.x")
        sch.vectorize(vec)
        sch.storage_align(smem, 0, axis=-2, factor=ALIGN_FACTOR, offset=ROW_PAD)
        frag = sch.cache_read(block, index, on.scope(FRAG_SCOPE))
        sch.compute_at(frag, k1)
        r, c = sch.get_loops(frag)[-2:]
        r0, r1 = sch.split(r, [None, TILE])
        c0, c1 = sch.split(c, [None, TILE])
        sch.reorder(r0, c0, r1, c1)
        sch.transform_layout(frag, ("write", 0), _fragment_map(
            _ndim(sch, frag, "write"), swap=key == "B" and roles.b_kn))
        on.tensorize(sch, r1, load)


def _inline_producers(sch, copy) -> None:
    """Inline the chain of elementwise producers into the shared-memory copy: the
    padding to the tile, the reindex copy, a convolution's zero padding. Their index
    arithmetic and bounds become the copy's addresses and its predicate."""
    for _ in range(8):
        names = [sch.get(p).name_hint for p in sch.get_producers(copy)]
        if not any(try_inline(sch, n) for n in names):
            return


def _fragment_map(ndim: int, swap: bool):
    """Buffer (..., r, c) -> (..., tile r, tile c, thread, slot); for B stored [k, n]
    the fragment holds the tile as [n, k] (`swap`)."""
    from tvm.tirx.function import IndexMap

    def fn(*idx):
        r, c = idx[-2:]
        i, j = (c, r) if swap else (r, c)
        return (*idx[:-2], r // TILE, c // TILE, *fragment_slot(i % TILE, j % TILE))
    return IndexMap.from_func(fn, ndim=ndim, index_dtype="int32")


def _ndim(sch, block, side: str) -> int:
    regions = sch.get(block).writes if side == "write" else sch.get(block).reads
    return len(regions[0].source.shape)


def _stage_output(sch, block, ty, intrin, d, on: Realization) -> None:
    """Accumulators in fragments; per 16 x 16 fragment: store it to the warp's own
    staging tile in shared memory, then all lanes of the warp write the tile out,
    `out_vector` elements per store, with the epilogue folded in.

    The block's (padded) output becomes the staging buffer itself, laid out so that all
    fragments of a warp share one tile (`_staging_map`): the buffer compacts to one
    16 x 16 tile per warp, whatever the block tile. Its first consumer -- the slice of
    the padding back to the real extents, or the reindex copy -- is the write-back:
    computed at each fragment, it keeps its own domain, whose bounds become the store's
    predicate (uniform over a vector: `out_vector` divides the output rows)."""
    sch.set_scope(block, 0, on.scope(OUT_SCOPE))
    frag_wb = sch.cache_write(block, 0, on.scope(FRAG_SCOPE))
    (writeback,) = sch.get_consumers(frag_wb)
    fold_consumers(sch, writeback)
    sch.reverse_compute_at(frag_wb, ty)
    r, c = sch.get_loops(frag_wb)[-2:]
    r0, r1 = sch.split(r, [None, TILE])
    c0, c1 = sch.split(c, [None, TILE])
    sch.reorder(r0, c0, r1, c1)
    sch.transform_layout(frag_wb, ("read", 0), _fragment_map(_ndim(sch, frag_wb, "read"),
                                                             swap=False))
    sch.reverse_compute_at(writeback, c0)
    sch.transform_layout(frag_wb, ("write", 0), _staging_map(
        _ndim(sch, frag_wb, "write"), d["fm"] * TILE, d["fn"] * TILE))
    fused = sch.fuse(*sch.get_loops(writeback)[-2:])
    _, tx, vec = sch.split(fused, [None, WARP, d["out_vector"]])
    on.bind(sch, tx, "threadIdx.x")
    if d["out_vector"] > 1:
        sch.vectorize(vec)
    on.tensorize(sch, r1, intrin.store)
    if on.on_gpu:
        # fully unrolled, so every fragment index is a constant and the accumulators stay
        # in registers (nvcc keeps a loop with a long epilogue rolled, and indexes them
        # in local memory)
        sch.unroll(r0)
        sch.unroll(c0)


def _staging_map(ndim: int, warp_m: int, warp_n: int):
    """Output (..., m, n) -> (..., warp tile row, warp tile column, m % 16, n % 16),
    for warp tiles of warp_m x warp_n: every fragment of one warp lands on the same
    16 x 16 tile (each is stored, then written out, before the next), and the tiles of
    the block's warps lie side by side, so the buffer compacts to one tile per warp.
    Applied after both stages are placed: it is many-to-one, which is what the placement
    makes safe."""
    from tvm.tirx.function import IndexMap

    def fn(*idx):
        m, n = idx[-2:]
        return (*idx[:-2], m // warp_m, n // warp_n, m % TILE, n % TILE)
    return IndexMap.from_func(fn, ndim=ndim, index_dtype="int32")
