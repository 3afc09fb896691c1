"""The TMA-store write-back of the Hopper GEMM (`hopper_gemm.py`, `store` = "tma") in
plain Python: where each accumulator pair lands in the shared staging area, the boxes
the TMA unit stores from it, and the output's tensor map.

After a tile's last wgmma wait each consumer warpgroup writes its WM x BN part of the
output tile (the epilogue applied) into its own part of a dedicated staging area after
the pipeline ring -- not the ring itself: with persistent tiles the producer already
loads the next tile's chunks into the ring while the consumers write back, so no slot
is free at that moment -- then fences the writes for the async proxy, meets its own
named barrier (`bar.sync 1 + wg, 128`: the warpgroup's threads only; the producer and
the other warpgroup run on), and its first thread issues one TMA store per box and
commits them as one bulk group. Before the next tile writes the area again that
thread waits until the stores have read it (`cp.async.bulk.wait_group.read 0`) and the
warpgroup meets the barrier again, and before the block exits it waits for the
stores to complete (`cp.async.bulk.wait_group 0`). The TMA unit clips boxes at the output's edges, so
edge tiles need no predicates.

A box is 64 rows (one wgmma m64 block of a warpgroup) by one 128-byte swizzle span of
columns (64 16-bit or 32 fp32 values), stored with the 128-byte swizzle: within each
1024-byte group of 8 rows, row r's 16-byte chunk c sits at chunk c ^ r. A warp's pair
stores (8 rows x 4 pairs, rows 128 bytes apart) then spread evenly over all 32 banks
(once each for 32-bit pairs, twice for fp32's 64-bit ones: the two wavefronts 256 bytes
need) instead of hitting 4 or 8 of them eight times.

The output's rows must start 16-byte aligned for TMA (`store_fits`); elsewhere only
the register write-back is offered.
"""
from __future__ import annotations

from .hopper_gemm_layout import WG, GemmShape, HopperConfig, out_bytes_of

SPAN = 128            # bytes of a box's row: the 128-byte swizzle span
BOX_ROWS = 64         # rows of a box: one wgmma m64 block
SWIZZLE_128B = 3      # CUtensorMapSwizzle of the staging boxes
STORES = ("registers", "tma")


def store_fits(shape: GemmShape) -> bool:
    """Whether TMA can store the output: its rows start 16-byte aligned."""
    return shape.n * out_bytes_of(shape) % 16 == 0


def box_cols(out_bytes: int) -> int:
    """Output columns of one staging box (one 128-byte span)."""
    return SPAN // out_bytes


def box_at(base: int, cfg: HopperConfig, out_bytes: int, wg, j, q):
    """Byte offset in shared memory of the box of consumer warpgroup `wg`, its m64 block
    `j` and column span `q` (boxes 8 KiB apart, each 1024-byte aligned when `base` is)."""
    spans = cfg.bn // box_cols(out_bytes)
    return base + ((wg * cfg.m_iters + j) * spans + q) * BOX_ROWS * SPAN


def staged_at(base: int, cfg: HopperConfig, out_bytes: int, wg, j, r, c):
    """Byte offset in shared memory of the output element at row `r` (0..63) of
    warpgroup `wg`'s m64 block `j` and tile column `c`: its box, row r, the 16-byte
    chunk swizzled by the row within its 8-row group."""
    cols = box_cols(out_bytes)
    q, byte = c // cols, c % cols * out_bytes
    return box_at(base, cfg, out_bytes, wg, j, q) + r * SPAN + \
        ((byte // 16) ^ (r % 8)) * 16 + byte % 16


def box_coords(cfg: HopperConfig, out_bytes: int, tm, tn, wg, j, q):
    """(column, row) in the output of the first element of a box (TMA order, inner
    first)."""
    return (tn * cfg.bn + q * box_cols(out_bytes),
            tm * cfg.bm + wg * (cfg.bm // cfg.consumers) + j * BOX_ROWS)


def c_tma_args(shape: GemmShape, out_bytes: int) -> list:
    """cuTensorMapEncodeTiled's arguments for the output after (map, dtype, rank,
    address), as `Operand.tma_args` orders them: sizes inner first, byte strides of
    the outer dimensions, the box, element strides, interleave none, 128-byte swizzle,
    L2 promotion none, out-of-bounds fill none (stores clip)."""
    n, m, cols = shape.n, shape.m, box_cols(out_bytes)
    if shape.batch == 1:
        return [n, m, n * out_bytes, cols, BOX_ROWS, 1, 1, 0, SWIZZLE_128B, 0, 0]
    return [n, m, shape.batch, n * out_bytes, m * n * out_bytes, cols, BOX_ROWS, 1, 1, 1,
            1, 0, SWIZZLE_128B, 0, 0]


def named_barrier(wg) -> tuple:
    """(barrier id, threads) of consumer warpgroup `wg`'s named barrier (id 0 is the
    block-wide one)."""
    return 1 + wg, WG
