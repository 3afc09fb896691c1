"""The SIMT GEMM sketch: float32 GEMM-shaped reductions on the FP32 pipes, in the form of
the classic register-blocked SGEMM.

The block is brought into GEMM form (`gemm_form.py`: matmul, batch matmul, dense,
implicit-GEMM convolution) with every dimension padded to the block tile, then:

- grid: one thread block per BM x BN output tile (batch on blockIdx.y where it fits);
- block: (BM / TM) x (BN / TN) threads on threadIdx.x, each owning a TM x TN tile of
  accumulators in registers (the padded output buffer itself is the register tile).
  An 8-wide thread tile is one run of 8 or (`split` 2) two runs of 4 half a block tile
  apart, as in CUTLASS's SGEMM: then the lanes of a warp read consecutive float4 from
  shared memory, without the bank conflicts of 32-byte strides (the two runs are
  virtual threads, so each keeps a compact register tile);
- K in tiles of BK. Each tile of A and of B is read from global memory into registers
  with `vector`-wide loads (float4 where the rows allow it), each thread taking `rows`
  consecutive rows of one column slice, then stored to shared memory as [BK, BM] and
  [BK, BN]: A (and B of a dense, [N, K]) transposed, so that at each k a thread reads
  its TM values of A and its TN values of B as float4 from shared memory;
- the K loop in TVM's software pipeline, in one of two forms (`double_buffer`):
  register staging alone (stages [0, 0, 0, 0, 1], order [0, 3, 1, 4, 2]): at each K
  step the next tile's global loads are issued into registers, the current tile is
  computed from the one shared copy, then the registers are stored to it, with a
  barrier either side of the math; or double buffering (`simt_gemm_pipeline.py`,
  stages [0, 1, 0, 1, 2], order [2, 0, 3, 1, 4]): two shared copies of each tile; at
  each K step the registers loaded one step earlier are stored to one copy, the global
  loads of the tile after are issued into them, and the math reads the other copy, with
  one barrier per K step. The register staging keeps one version in both forms (its
  stores read it before the loads refill it), so nothing is indexed by the K step at
  run time; a pipeline that stored the loads of the same step into the other copy
  (stages [0, 1, 0, 1, 2], order [0, 3, 1, 4, 2]) would version the staging, and the
  K-indexed registers would go to local memory (STL / LDL in the SASS);
- write-back: each thread stores its tile, with the elementwise consumers (bias,
  activation) and the padding's bounds folded into that store.

Decisions: `double_buffer` (for the whole function, made with its program: the
double-buffered kernel is built by its own pipeline, named in a function attribute),
TM, TN (4 or 8), BM, BN (32..256), BK (8, 16, 32), the split of an 8-wide thread tile
(1 or 2 runs), whether the k loop is unrolled. Each is drawn within what the earlier
ones leave (threads per block, static shared memory -- twice the tiles when double
buffered --, a copy plan in which every thread loads whole vectors, at most MAX_STAGED
staged elements a thread), so samples fit the target by construction; `check` still
measures the lowered kernel. Double buffered, where nvcc spilled otherwise: at most
DB_REGISTER_BUDGET accumulators and staged elements together (8 x 8 thread tiles stage
8: the 128 x 128 x 8 block), square thread tiles, the k loop unrolled.
"""
from __future__ import annotations

from ..decisions import Decider, InvalidCandidate
from ..sketch import Sketch
from .analysis import classify
from .common import bind_unbound, fold_consumers, inline_spatial, is_bound
from .gemm_form import BATCH, K, M, N, gemm_roles, to_gemm_form
from .limits import GpuLimits
from .simt_gemm_pipeline import MARK, PIPELINE_ATTR, PIPELINE_NAME

THREAD_TILES = (4, 8)
BLOCK_TILES = (32, 64, 128, 256)
K_TILES = (8, 16, 32)
MIN_THREADS, MAX_THREADS = 32, 256
# elements of A and B a thread holds in registers between its loads and its stores to
# shared memory: beyond this, with the TM x TN accumulators, the kernel spills
MAX_STAGED = 32
MAX_GRID_Y = 65535
VECTOR = 4               # float4: the widest CUDA load
ROW_PAD, ALIGN_FACTOR = 4, 32   # transposed shared rows: stride = 4 (mod 32) floats
PIPELINE_STAGE = [0, 0, 0, 0, 1]   # A to registers, A to shared, B ..., B ..., compute
PIPELINE_ORDER = [0, 3, 1, 4, 2]   # next tile's loads, this tile's math, next tile's stores
# double buffered: stores of the next tile (loaded one step earlier), loads of the one
# after, math on the current tile from the other copy
DB_STAGE = [0, 1, 0, 1, 2]
DB_ORDER = [2, 0, 3, 1, 4]
# double buffered: at most this many accumulators plus staged elements a thread (the
# pipeline's epilogue holds the math twice more, and each copy of the shared tiles its
# own addresses); nvcc spilled past it (8 x 8 thread tiles staging 16 elements)
DB_REGISTER_BUDGET = 72


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def simt_gemm_blocks(sch) -> list[str]:
    """The blocks this sketch computes: GEMM-shaped reductions of float32 inputs
    accumulating in float32."""
    out = []
    for name in classify(sch).tiled:
        roles = gemm_roles(sch, sch.get_sblock(name))
        if roles is not None and roles.in_dtype == roles.acc_dtype == "float32":
            out.append(name)
    return out


def copy_plan(rows: int, cols: int, threads: int, run: int):
    """How `threads` threads copy a [rows, cols] tile whose rows are contiguous in memory
    for `run` elements: (vector width, rows per thread), each thread loading one
    `vector`-wide slice of `rows per thread` consecutive rows; None when no width lets
    every thread load whole vectors."""
    for v in (VECTOR, 2, 1):
        if run % v or cols % v:
            continue
        slices = cols // v
        if threads % slices == 0 and rows % (threads // slices) == 0:
            return v, rows // (threads // slices)
    return None


def shared_bytes(bm: int, bn: int, bk: int, b_transposed: bool, copies: int = 1) -> int:
    """Static shared memory: `copies` of the [BK, BM] and [BK, BN] float32 tiles (one,
    or two when double buffered), the rows of a transposed tile padded by ROW_PAD."""
    return copies * bk * (bm + ROW_PAD + bn + (ROW_PAD if b_transposed else 0)) * 4


def _tiles(extent: int) -> list[int]:
    """Block tiles worth trying along a dimension: no bigger than the next that covers it."""
    return [b for b in BLOCK_TILES if b == BLOCK_TILES[0] or b < _ceil(extent, 32) * 32 * 2]


def _input_shapes(roles, bm: int, bn: int, bk: int) -> list[tuple[int, int, int]]:
    """(rows, cols, contiguous run) of the A and B tiles as read from global memory."""
    b = (bk, bn, roles.runs[1]) if roles.b_kn else (bn, bk, roles.runs[1])
    return [(bm, bk, roles.runs[0]), b]


def decide_simt(decide: Decider, name: str, roles, limits: GpuLimits,
                double_buffer: bool = False) -> dict:
    """Every decision of one block, each among the options that still leave a block
    tile fitting the target (threads, shared memory, whole-vector copy plans, staged
    registers; both budgets tighter when `double_buffer`)."""
    ext = roles.extents
    cap = min(MAX_THREADS, limits.max_threads_per_block)
    tm = decide.choice(f"{name}.thread_m", list(THREAD_TILES))
    # double buffered, nvcc spilled a few registers of some 8 x 4 and 4 x 8 thread
    # tiles well inside the budget: there the thread tile is square
    tn = decide.choice(f"{name}.thread_n", [tm] if double_buffer else list(THREAD_TILES))
    copies = 2 if double_buffer else 1
    staged = min(MAX_STAGED, DB_REGISTER_BUDGET - tm * tn) if double_buffer else MAX_STAGED

    def fits(bm, bn, bk) -> bool:
        threads = (bm // tm) * (bn // tn)
        if not MIN_THREADS <= threads <= cap or shared_bytes(
                bm, bn, bk, not roles.b_kn, copies) > limits.max_shared_memory_per_block:
            return False
        plans = [copy_plan(r, c, threads, run) for r, c, run in _input_shapes(roles, bm, bn, bk)]
        return None not in plans and sum(v * rows for v, rows in plans) <= staged

    tiles = [(m, n, k) for m in _tiles(ext[M]) for n in _tiles(ext[N]) for k in K_TILES
             if fits(m, n, k)]
    # small GEMMs: tiles past the extents (padded) rather than too few threads
    tiles = tiles or [(m, n, k) for m in BLOCK_TILES for n in BLOCK_TILES for k in K_TILES
                      if fits(m, n, k)]
    if not tiles:
        raise InvalidCandidate(f"{name}: no block tile fits {tm} x {tn} thread tiles")
    bm = decide.choice(f"{name}.block_m", sorted({m for m, _, _ in tiles}))
    bn = decide.choice(f"{name}.block_n", sorted({n for m, n, _ in tiles if m == bm}))
    bk = decide.choice(f"{name}.block_k", sorted({k for m, n, k in tiles
                                                  if (m, n) == (bm, bn)}))
    split_m = decide.choice(f"{name}.split_m", [1, 2] if tm > VECTOR else [1])
    split_n = decide.choice(f"{name}.split_n", [1, 2] if tn > VECTOR else [1])
    # double buffered, nvcc spilled some k loops left rolled (the pipeline's epilogue
    # repeats the loop twice): there it is unrolled
    unroll_k = decide.choice(f"{name}.unroll_k", [True] if double_buffer else [True, False])
    return {"tm": tm, "tn": tn, "bm": bm, "bn": bn, "bk": bk,
            "threads": (bm // tm) * (bn // tn),
            "split_m": split_m, "split_n": split_n, "unroll_k": unroll_k,
            "double_buffer": double_buffer}


class SimtGemmSketch(Sketch):
    """Register-blocked SGEMM tiles for the task's float32 GEMM-shaped reductions (see
    the module docstring); the other blocks are inlined or bound as in the other
    sketches."""

    name = "simt_gemm"

    def __init__(self, limits: GpuLimits):
        self.limits = limits
        self._programs: dict = {}

    def program(self, func, decide: Decider):
        """The task's function, or (`double_buffer`) the same with `PIPELINE_ATTR` naming
        the pipeline that gives its double-buffered K loops one barrier a step; one
        object per function and answer (see `Sketch.program`)."""
        double = decide.choice("double_buffer", [False, True])
        if not double:
            return func
        known = self._programs.get(id(func))
        if known is None or known[0] is not func:
            known = self._programs[id(func)] = (func, func.with_attr(PIPELINE_ATTR,
                                                                      PIPELINE_NAME))
        return known[1]

    def apply(self, sch, decide: Decider) -> None:
        spatial = classify(sch).spatial   # the task's own, not the sketch's stages
        double = bool(decide.made.get("double_buffer", False))
        for name in simt_gemm_blocks(sch):
            schedule_simt_gemm(sch, name, decide, self.limits, double)
        inline_spatial(sch, spatial)
        bind_unbound(sch, self.limits, decide)


def schedule_simt_gemm(sch, name: str, decide: Decider, limits: GpuLimits,
                       double_buffer: bool = False) -> None:
    """The SIMT GEMM schedule of block `name` (see the module docstring)."""
    roles = gemm_roles(sch, sch.get_sblock(name))
    d = decide_simt(decide, name, roles, limits, double_buffer)
    plans = [copy_plan(r, c, d["threads"], run)
             for r, c, run in _input_shapes(roles, d["bm"], d["bn"], d["bk"])]
    to_gemm_form(sch, name, roles, {BATCH: 1, M: d["bm"], N: d["bn"], K: d["bk"]})
    block = sch.get_sblock(name)
    loops = sch.get_loops(block)
    batch = BATCH in roles.groups
    m, n, k = loops[int(batch):]
    mb, sm, ty, mi = sch.split(m, [None, d["split_m"], d["bm"] // d["tm"],
                                   d["tm"] // d["split_m"]])
    nb, sn, tx, ni = sch.split(n, [None, d["split_n"], d["bn"] // d["tn"],
                                   d["tn"] // d["split_n"]])
    ko, ki = sch.split(k, [None, d["bk"]])
    sch.reorder(mb, nb, sm, sn, ty, tx, ko, ki, mi, ni)
    if batch and _extent(sch, loops[0]) <= MAX_GRID_Y:
        sch.bind(loops[0], "blockIdx.y")
        sch.bind(sch.fuse(mb, nb), "blockIdx.x")
    else:   # no batch, or more than blockIdx.y holds: all tiles on blockIdx.x
        sch.bind(sch.fuse(*loops[:int(batch)], mb, nb), "blockIdx.x")
    for loop, split, tag in ((sm, d["split_m"], "vthread.y"), (sn, d["split_n"], "vthread.x")):
        if split > 1:
            sch.bind(loop, tag)
    thread = sch.fuse(ty, tx)
    sch.bind(thread, "threadIdx.x")
    # the padded output is the register tile; its first consumer (the slice back to
    # the real extents) is the write-back, with the epilogue folded in
    sch.set_scope(block, 0, "local")
    (writeback,) = sch.get_consumers(block)
    fold_consumers(sch, writeback)
    sch.reverse_compute_at(writeback, thread)
    rows, cols = sch.get_loops(writeback)[-2:]
    sch.unroll(rows)
    if roles.extents[N] % d["bn"] == 0 and _extent(sch, cols) == VECTOR \
            and _stores_rows(sch, writeback):
        sch.vectorize(cols)
    else:
        sch.unroll(cols)
    transposed = (True, not roles.b_kn)
    for index, plan, trans in zip((roles.a_index, roles.b_index), plans, transposed):
        _stage_input(sch, block, index, ko, ki, plan, trans, d)
    sch.unroll(mi)
    sch.unroll(ni)
    if d["unroll_k"]:
        sch.unroll(ki)
    sch.decompose_reduction(block, ko)
    sch.annotate(ko, "software_pipeline_stage", DB_STAGE if double_buffer else PIPELINE_STAGE)
    sch.annotate(ko, "software_pipeline_order", DB_ORDER if double_buffer else PIPELINE_ORDER)


def _stage_input(sch, block, index: int, ko, ki, plan, transposed: bool, d: dict) -> None:
    """One input: global -> registers (vector loads, padding folded in as a predicate)
    -> shared ([BK, BM] or [BK, BN]) at each K tile; shared -> registers (vector loads
    of the thread's TM or TN values) at each k."""
    vector, rows = plan
    smem = sch.cache_read(block, index, "shared")
    staged = sch.cache_read(smem, 0, "local")
    sch.compute_at(smem, ko)
    sch.compute_at(staged, ko)
    _inline_producers(sch, staged)
    for copy, vectorize in ((staged, True), (smem, not transposed)):
        r, c = sch.get_loops(copy)[-2:]
        rt, rr = sch.split(r, [None, rows])
        co, cv = sch.split(c, [None, vector])
        sch.reorder(rt, co, rr, cv)
        sch.bind(sch.fuse(rt, co), "threadIdx.x")
        sch.unroll(rr)
        if vectorize and vector > 1:
            sch.vectorize(cv)
        else:
            sch.unroll(cv)
    if transposed:
        # the four stores of a float4 go to four rows; padded rows put the column
        # slices of a warp's stores in different banks, and keep rows 16-byte aligned
        sch.transform_layout(smem, ("write", 0), _transpose_map(_ndim(sch, smem)))
        sch.storage_align(smem, 0, axis=-2, factor=ALIGN_FACTOR, offset=ROW_PAD)
    if d["double_buffer"]:   # its stores fill the copy the same K step does not read
        sch.annotate(smem, MARK, 1)
    frag = sch.cache_read(block, index, "local")
    sch.compute_at(frag, ki)
    inner = sch.get_loops(frag)[-1]
    outer, vec = sch.split(inner, [None, min(VECTOR, _extent(sch, inner))])
    sch.unroll(outer)
    sch.vectorize(vec)


def _stores_rows(sch, writeback) -> bool:
    """Whether the write-back stores along the rows of its output: the store's last
    index is the block's last (N) variable and the rows hold whole float4, so a float4
    of consecutive N values is one aligned store (not so for an NCHW convolution, whose
    N is the channel, or a consumer that transposes)."""
    from tvm import tirx

    stmt = sch.get(writeback)
    store = stmt.body
    if not isinstance(store, tirx.BufferStore) or not stmt.iter_vars:
        return False
    last = store.indices[-1]
    return (isinstance(last, tirx.Var) and str(last.name) == str(stmt.iter_vars[-1].var.name)
            and int(store.buffer.shape[-1]) % VECTOR == 0)




def _inline_producers(sch, copy) -> None:
    """Inline the chain of elementwise producers into the register copy: the padding
    to the tile, the reindex copy, a convolution's zero padding; their index arithmetic
    and bounds become the loads' addresses and predicate. Blocks are taken as handles,
    not names: in a chain of GEMMs the producer's write-back and the consumer's padding
    can share a name; a producer already bound to threads is another kernel."""
    for _ in range(8):
        for producer in sch.get_producers(copy):
            if is_bound(sch, producer):   # another kernel's write-back: stays there
                continue
            try:
                sch.compute_inline(producer)
                break
            except Exception:  # a reduction or a block TVM cannot inline: it stays
                continue
        else:
            return


def _transpose_map(ndim: int):
    """(..., r, c) -> (..., c, r)."""
    from tvm.tirx.function import IndexMap

    return IndexMap.from_func(lambda *idx: (*idx[:-2], idx[-1], idx[-2]), ndim=ndim,
                              index_dtype="int32")


def _ndim(sch, block) -> int:
    return len(sch.get(block).writes[0].source.shape)


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


__all__ = ["SimtGemmSketch", "copy_plan", "decide_simt", "schedule_simt_gemm",
           "shared_bytes", "simt_gemm_blocks"]
