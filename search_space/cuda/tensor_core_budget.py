"""The decisions of the tensor-core sketch (`tensor_core.py`) and the budgets they are
drawn within: threads, registers and shared memory per block.

Each decision is drawn within what the earlier ones leave, so every sample fits the
target by construction:

- warps along M and N (at most MAX_WARPS per block), then 16 x 16 accumulators per warp
  along M and N: the block tile, up to MAX_BLOCK_TILE along either side. The
  accumulators and fragments must fit the registers a thread of such a block may have
  (`fragment_registers`), and the smallest pipeline the shared memory. With fp32
  accumulators that allows 128 x 256 and 256 x 128 (8 warps of 64 x 64); 256 x 256 only
  with fp16 ones (8 warps of 128 x 64): in fp32, 64 x 64 accumulators take 128
  registers a thread, so 256 x 256 would need 16 warps, twice a block's registers;
- the K chunk and the pipeline depth: the pipeline's buffers (`pipeline_bytes`) and the
  warps' output staging tiles (`staging_bytes`) fit the shared memory a block may use;
- the copies' vector width, the raster group, the unroll depth;
- `frag_buffers`: 2 double-buffers the fragments in registers -- the ldmatrix of K step
  k + 1 is issued before the mma of step k -- where a chunk holds several K steps and
  the registers allow;
- `out_vector`: elements per store of the write-back, up to 16 bytes of the staged
  accumulators, where the output rows allow (`output_run`).
"""
from __future__ import annotations

import math

from .common import UNROLL_STEPS
from .gemm_form import M, N
from .limits import GpuLimits
from .mma_intrin import SLOTS, TILE, WARP

FRAGS = (1, 2, 4)            # 16 x 16 accumulators per warp along M or N
# and 8 with fp16 accumulators (half the registers a tile): 128 x 64 warp tiles, for a
# 256 x 256 block tile in 8 warps. With fp32 ones a 32 x 128 warp tile (2 x 8: the
# accumulators of 4 x 4, and more fragments) can spill where nvcc unrolls whole chunks.
WIDE_FRAGS = FRAGS + (8,)
WARPS = (1, 2, 4)            # warps per block along M or N
K_CHUNKS = (16, 32, 64)
STAGES = (2, 3, 4)
RASTER = (1, 2, 4, 8)
FRAG_BUFFERS = (1, 2)
MAX_WARPS = 8
MAX_BLOCK_TILE = 256            # along M or N
ROW_PAD, ALIGN_FACTOR = 8, 32   # shared rows: stride = 8 (mod 32) elements
MAX_THREAD_REGISTERS = 255      # what one thread may address (sm_80 and newer)
# registers a thread needs beside its fragments: addresses, loop counters, predicates,
# the write-back's indices and its epilogue's temporaries, with a margin for nvcc
# hoisting loads when it unrolls whole chunks
REGISTER_OVERHEAD = 56
VECTOR_BYTES = 16


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def padded_row(elements: int) -> int:
    """A shared row's stride after `storage_align(factor=32, offset=8)`: rows start 16
    bytes apart modulo the 32 banks, so ldmatrix's eight row reads hit eight bank groups."""
    return elements + (ROW_PAD - elements) % ALIGN_FACTOR


def pipeline_bytes(bm: int, bn: int, kc: int, stages: int, b_kn: bool) -> int:
    """Dynamic shared memory of the pipeline: `stages` chunks of A ([bm, kc]) and B
    ([kc, bn] or [bn, kc]) in 16-bit elements with padded rows."""
    a = bm * padded_row(kc)
    b = kc * padded_row(bn) if b_kn else bn * padded_row(kc)
    return stages * (a + b) * 2


def staging_bytes(wm: int, wn: int, acc_bytes: int) -> int:
    """Static shared memory of the output staging: one 16 x 16 accumulator tile per
    warp (each warp stages its fragments one at a time)."""
    return wm * wn * TILE * TILE * acc_bytes


def fragment_registers(fm: int, fn: int, acc_bytes: int, frag_buffers: int) -> int:
    """32-bit registers one thread needs: its share of the warp's fm x fn accumulator
    tiles, of the A and B fragments of one K step (twice that when double-buffered),
    and REGISTER_OVERHEAD."""
    acc = fm * fn * SLOTS * acc_bytes // 4
    frags = (fm + fn) * SLOTS * 2 // 4 * frag_buffers
    return acc + frags + REGISTER_OVERHEAD


def register_limit(limits: GpuLimits, warps: int) -> int:
    """The registers a thread may use in a block of `warps` warps."""
    return min(MAX_THREAD_REGISTERS, limits.registers_per_block // (warps * WARP))


def output_run(sch, block, roles) -> int:
    """How many output elements the write-back may store as one vector (it stores along
    GEMM N). The GEMM's output row, and those of the chain of single consumers after it
    (the epilogue that folds into the write-back: bias, activation, casts), must each be
    written at the row's own innermost variable -- for the GEMM, N's innermost -- and a
    consumer's other inputs read along the row at it too; the run is the gcd of that
    variable's extent and of every such buffer's row length, so a vector never crosses a
    row and starts aligned in each. 1 where a block writes or reads along the row any
    other way."""
    stmt = sch.get(block)
    n_inner = stmt.iter_vars[roles.groups[N][-1]].var
    if not stmt.writes[0].region[-1].min.same_as(n_inner):
        return 1
    run = _block_run(stmt, reads=False)
    for _ in range(16):
        consumers = sch.get_consumers(block)
        if len(consumers) != 1 or run == 1:
            return run
        block = consumers[0]
        run = math.gcd(run, _block_run(sch.get(block), reads=True))
    return run


def _block_run(stmt, reads: bool) -> int:
    from ..tir import free_vars

    if len(stmt.writes) != 1:
        return 1
    out = stmt.writes[0]
    last = out.region[-1].min
    inner = next((iv for iv in stmt.iter_vars if iv.var.same_as(last)), None)
    if inner is None:
        return 1
    run = math.gcd(int(inner.dom.extent), int(out.source.shape[-1]))
    for region in stmt.reads if reads else ():
        idx = [r.min for r in region.region]
        uses = [any(v.same_as(inner.var) for v in free_vars(e)) for e in idx]
        if not any(uses):
            continue   # the same value along the row: a broadcast
        if any(uses[:-1]) or not idx[-1].same_as(inner.var):
            return 1
        run = math.gcd(run, int(region.source.shape[-1]))
    return run


def decide_block(decide, name: str, roles, limits: GpuLimits, out_run: int) -> dict:
    """Every decision of one GEMM block, each within what the earlier ones leave (see
    the module docstring); `out_run` is `output_run` of the block."""
    acc_bytes = 4 if roles.acc_dtype == "float32" else 2
    ext = roles.extents
    wm = decide.choice(f"{name}.warps_m", [w for w in WARPS
                                          if w == 1 or w * TILE <= _ceil(ext[M], TILE) * TILE])
    wn = decide.choice(f"{name}.warps_n", [w for w in WARPS if w * wm <= MAX_WARPS])
    regs = register_limit(limits, wm * wn)
    static = staging_bytes(wm, wn, acc_bytes)

    def fit(f_m: int, f_n: int) -> bool:   # registers, and the smallest pipeline
        return (fragment_registers(f_m, f_n, acc_bytes, 1) <= regs
                and pipeline_bytes(wm * f_m * TILE, wn * f_n * TILE, K_CHUNKS[0], STAGES[0],
                                   roles.b_kn) + static
                <= limits.max_dynamic_shared_memory_per_block)
    frags = WIDE_FRAGS if acc_bytes == 2 else FRAGS
    fm = decide.choice(f"{name}.frags_m", [f for f in frags if f == 1 or (
        f * wm * TILE <= min(MAX_BLOCK_TILE, _ceil(ext[M], TILE) * TILE) and fit(f, 1))])
    fn = decide.choice(f"{name}.frags_n", [f for f in frags if f == 1 or (
        f * wn * TILE <= min(MAX_BLOCK_TILE, _ceil(ext[N], TILE) * TILE) and fit(fm, f))])
    bm, bn = wm * fm * TILE, wn * fn * TILE
    fits = [(kc, st) for kc in K_CHUNKS for st in STAGES
            if pipeline_bytes(bm, bn, kc, st, roles.b_kn) + static
            <= limits.max_dynamic_shared_memory_per_block]
    kc = decide.choice(f"{name}.k_chunk", sorted({kc for kc, _ in fits}) or [16])
    stages = decide.choice(f"{name}.stages", [st for k, st in fits if k == kc] or [2])
    # 16-, 8- or 4-byte cp.async: aligned and contiguous in both inputs' rows
    vector = decide.choice(f"{name}.vector", [v for v in (8, 4, 2) if all(
        run % v == 0 for run in roles.runs)] or [1])
    tiles_m = _ceil(ext[M], bm)
    raster = decide.choice(f"{name}.raster", [r for r in RASTER if tiles_m % r == 0])
    unroll = decide.choice(f"{name}.unroll", UNROLL_STEPS)
    frag_buffers = decide.choice(f"{name}.frag_buffers", [
        b for b in FRAG_BUFFERS if b == 1 or (
            kc > TILE and fragment_registers(fm, fn, acc_bytes, b) <= regs)])
    out_vector = decide.choice(f"{name}.out_vector", [
        v for v in (8, 4, 2) if v * acc_bytes <= VECTOR_BYTES and out_run % v == 0] or [1])
    return {"wm": wm, "wn": wn, "fm": fm, "fn": fn, "bm": bm, "bn": bn, "kc": kc,
            "stages": stages, "vector": vector, "raster": raster, "unroll": unroll,
            "frag_buffers": frag_buffers, "out_vector": out_vector}
