"""The arithmetic of the Hopper GEMM (`hopper_gemm.py`) in plain Python: problem and
parameters, their validity, the shared-memory plan (where each TMA box lands, the wgmma
descriptors that read it back), which tile a thread block computes, and where each
accumulator register of a thread lies in the output tile.

The kernel takes every address and index from here (the functions below accept TIR
expressions as well as ints), so the tests check this arithmetic on the CPU -- tiles
covered once, every output element owned by exactly one register of one thread, boxes
and descriptors agreeing on the swizzled layout -- where no emulator can run wgmma or TMA.
"""
from __future__ import annotations

from dataclasses import dataclass

INPUTS = {"float16": "f16", "bfloat16": "bf16"}
OUTPUTS = ("float32", "float16", "bfloat16")
SMEM_BUDGET = 232448 - 1024   # sm_90 opt-in dynamic shared memory, less alignment slack
MAX_ACC_PER_THREAD = 128      # fp32 accumulators a consumer thread holds (no spills)
WG = 128                      # threads in a warpgroup
ELEM = 2                      # bytes of a 16-bit input element
SWIZZLE_BYTES = {3: 128, 2: 64}   # CUtensorMapSwizzle value -> bytes of a swizzled row
MN_BOX = 64                   # columns of one MN-major box (128 bytes, the swizzle span)
SMS = 132                     # streaming multiprocessors of an sm_90a GPU (H100 / H200 SXM)


@dataclass(frozen=True)
class GemmShape:
    """The problem: sizes, dtypes, B's layout (`b_kn`: B[K, N], else B[N, K]) and the
    batch (`batch` > 1: A, B and C carry a leading batch dimension)."""

    m: int
    n: int
    k: int
    in_dtype: str
    out_dtype: str
    b_kn: bool
    batch: int = 1


@dataclass(frozen=True)
class HopperConfig:
    """The kernel's parameters (the sketch's decisions)."""

    bm: int = 128
    bn: int = 128
    bk: int = 64
    stages: int = 4
    consumers: int = 2
    raster: int = 8
    persistent: bool = False  # a grid of one block per SM, each looping over tiles
    cluster: int = 1          # thread blocks per cluster: partners on adjacent tile columns
    store: str = "registers"  # write-back: from registers, or staged for TMA stores

    @property
    def m_iters(self) -> int:
        """wgmma m64 instructions per consumer warpgroup per 16-wide K step."""
        return self.bm // (64 * self.consumers)

    @property
    def threads(self) -> int:
        return WG * (self.consumers + 1)

    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * self.bk * ELEM

    def staging_bytes(self, out_bytes: int = 4) -> int:
        """Bytes of the TMA stores' staging area (the BM x BN output tile; 0 without)."""
        return self.bm * self.bn * out_bytes if self.store == "tma" else 0

    def smem_bytes(self, out_bytes: int = 4) -> int:
        """The ring's bytes, and the staging area's for `out_bytes`-byte outputs."""
        return self.stages * self.stage_bytes() + self.staging_bytes(out_bytes)


def out_bytes_of(shape: GemmShape) -> int:
    """Bytes of one output element."""
    return 4 if shape.out_dtype == "float32" else 2


def tma_compatible(shape: GemmShape) -> bool:
    """Whether TMA can address A and B: rows 16-byte aligned (a multiple of 8 elements)."""
    return shape.k % 8 == 0 and (shape.n % 8 == 0 if shape.b_kn else True)


def config_problem(cfg: HopperConfig, out_bytes: int = 4) -> str | None:
    """Why `cfg` is not a valid kernel (for `out_bytes`-byte outputs), or None."""
    if cfg.consumers not in (1, 2) or cfg.bm % (64 * cfg.consumers):
        return f"BM={cfg.bm} is not a multiple of 64 per consumer warpgroup"
    if not (64 <= cfg.bn <= 256 and cfg.bn % 64 == 0) or not 64 <= cfg.bm <= 256:
        return f"block tile {cfg.bm}x{cfg.bn} outside 64..256 (BN a multiple of 64)"
    if cfg.bk not in (32, 64):
        return f"BK={cfg.bk} is not 32 or 64"
    if cfg.cluster not in (1, 2):
        return f"cluster={cfg.cluster} is not 1 or 2"
    if not 2 <= cfg.stages <= 6:
        return f"stages={cfg.stages} outside 2..6"
    if cfg.m_iters * cfg.bn // 2 > MAX_ACC_PER_THREAD:
        return f"{cfg.m_iters * cfg.bn // 2} accumulators per thread (at most " \
               f"{MAX_ACC_PER_THREAD})"
    if cfg.store not in ("registers", "tma"):
        return f"store={cfg.store} is not registers or tma"
    if cfg.smem_bytes(out_bytes) > SMEM_BUDGET:
        return f"{cfg.smem_bytes(out_bytes)} bytes of shared memory (at most {SMEM_BUDGET})"
    return None


def problem_of(shape: GemmShape, cfg: HopperConfig) -> str | None:
    """Why the kernel cannot be built for `shape` with `cfg`, or None."""
    if not tma_compatible(shape):
        return "rows of A or B are not a multiple of 8 elements (TMA alignment)"
    if shape.in_dtype not in INPUTS or shape.out_dtype not in OUTPUTS:
        return f"dtypes {shape.in_dtype} -> {shape.out_dtype} not supported"
    out_bytes = out_bytes_of(shape)
    if cfg.store == "tma" and shape.n * out_bytes % 16:
        return "rows of the output are not 16-byte aligned (TMA stores)"
    if -(-shape.n // cfg.bn) % cfg.cluster:
        return f"{-(-shape.n // cfg.bn)} tile columns do not pair into clusters of " \
               f"{cfg.cluster}"
    return config_problem(cfg, out_bytes)


@dataclass(frozen=True)
class Operand:
    """How one input tile travels: TMA boxes into a stage, wgmma descriptors out of it.

    `boxes` boxes of `box` = (inner, outer) elements land `box_bytes` apart from the
    operand's offset in the stage; the descriptor's leading / stride byte offsets
    (`ldo`, `sbo`, in 16-byte units) and swizzle describe the same layout to wgmma, and
    each 16-wide K step starts `k_step` bytes further; `mn_major` is wgmma's transpose
    flag (B[K, N] is read MN-major)."""

    offset: int
    boxes: int
    box: tuple
    box_bytes: int
    swizzle: int
    ldo: int
    sbo: int
    k_step: int
    mn_major: int
    tensor: tuple            # one matrix (outer, inner) of the global tensor

    def tma_args(self, batch: int = 1) -> list:
        """cuTensorMapEncodeTiled's arguments after (map, dtype, rank, address): sizes
        (inner first), strides in bytes of the outer dimensions, box, element strides,
        interleave none, swizzle, L2 promotion none, out-of-bounds elements filled with
        zeros; rank 3 (a box of one matrix) when `batch` > 1."""
        outer, inner = self.tensor
        if batch == 1:
            return [inner, outer, inner * ELEM, self.box[0], self.box[1], 1, 1, 0,
                    self.swizzle, 0, 0]
        return [inner, outer, batch, inner * ELEM, outer * inner * ELEM, self.box[0],
                self.box[1], 1, 1, 1, 1, 0, self.swizzle, 0, 0]


def _k_major(offset: int, rows: int, bk: int, tensor: tuple, parts: int = 1) -> Operand:
    """A [rows, BK] tile of a K-contiguous tensor: `parts` boxes of rows / parts rows
    one after the other (one per block of a cluster, `a_share_at`), rows of BK * 2
    bytes swizzled over their width; wgmma steps 32 bytes along K within a row and 8
    rows (`sbo`) between core matrices."""
    swizzle = 3 if bk * ELEM == 128 else 2
    row = SWIZZLE_BYTES[swizzle]
    return Operand(offset, parts, (bk, rows // parts), rows // parts * bk * ELEM, swizzle,
                   1, 8 * row // 16, 16 * ELEM, 0, tensor)


def _mn_major(offset: int, cols: int, bk: int, tensor: tuple) -> Operand:
    """A [BK, cols] tile of an N-contiguous tensor: cols / 64 boxes of BK rows x 64
    columns (128-byte swizzled rows); wgmma steps 16 rows (2048 bytes) per K step, 8
    rows (`sbo`) between core matrices along K and one box (`ldo`) along N."""
    box_bytes = bk * MN_BOX * ELEM
    return Operand(offset, cols // MN_BOX, (MN_BOX, bk), box_bytes, 3, box_bytes // 16,
                   8 * 128 // 16, 16 * 128, 1, tensor)


@dataclass(frozen=True)
class Plan:
    """Shared memory of the kernel: `stages` slots of `stage_bytes`, A then B in each,
    then `staging` bytes for TMA stores (`hopper_gemm_store.py`) from offset `ring`."""

    a: Operand
    b: Operand
    stage_bytes: int
    stages: int
    staging: int = 0

    @property
    def ring(self) -> int:
        return self.stages * self.stage_bytes

    @property
    def total(self) -> int:
        return self.ring + self.staging


def plan(shape: GemmShape, cfg: HopperConfig) -> Plan:
    """The shared-memory plan of the kernel for `shape` with `cfg`."""
    a = _k_major(0, cfg.bm, cfg.bk, (shape.m, shape.k), cfg.cluster)
    b_at = cfg.bm * cfg.bk * ELEM
    b = _mn_major(b_at, cfg.bn, cfg.bk, (shape.k, shape.n)) if shape.b_kn else \
        _k_major(b_at, cfg.bn, cfg.bk, (shape.n, shape.k))
    return Plan(a, b, cfg.stage_bytes(), cfg.stages, cfg.staging_bytes(out_bytes_of(shape)))


def a_rows_at(plan_: Plan, cfg: HopperConfig, stage, row, kk):
    """Byte offset in shared memory of row `row` of A's tile in slot `stage`, at the
    start of 16-wide K step `kk` (where a wgmma descriptor for 64 rows starts)."""
    return stage * plan_.stage_bytes + row * cfg.bk * ELEM + kk * plan_.a.k_step


def a_share_at(plan_: Plan, stage, rank):
    """(byte offset in shared memory, first row in the tile) of the box of A's chunk
    in slot `stage` that the block of rank `rank` in its cluster loads and multicasts
    to every block of the cluster (the same offset in each: partners share A's rows)."""
    a = plan_.a
    return stage * plan_.stage_bytes + a.offset + rank * a.box_bytes, rank * a.box[1]


def empty_arrivals(cfg: HopperConfig) -> int:
    """Arrivals that release a slot: one per consumer warp of every block of the
    cluster (a slot's A box comes from every block, so no producer overwrites it
    before all of them are done with it)."""
    return 4 * cfg.consumers * cfg.cluster


def b_at(plan_: Plan, stage, kk):
    """Byte offset in shared memory of B's tile in slot `stage` at K step `kk`."""
    return stage * plan_.stage_bytes + plan_.b.offset + kk * plan_.b.k_step


def tile_of(cta, tiles_m: int, tiles_n: int, group: int, min_=min):
    """(tile row, tile column) of thread block `cta`: tiles are walked in groups of
    `group` tile rows, column by column within a group (neighbouring blocks share
    panels of A and B in L2); the last group may have fewer rows."""
    g = cta // (group * tiles_n)
    rows = min_(tiles_m - g * group, group)
    r = cta % (group * tiles_n)
    return g * group + r % rows, r // rows


def fragment_at(t, i, h):
    """(row, column) in a warpgroup's 64 x N wgmma accumulator of register 4 * i + h of
    its thread `t` (0..127): rows 16 per warp, lane / 4 (+ 8 for h >= 2); columns 8 per
    i, 2 * (lane % 4) (+ 1 for odd h)."""
    return t // 32 * 16 + t % 32 // 4 + h // 2 * 8, i * 8 + t % 4 * 2 + h % 2


def grid_of(total: int, cfg: HopperConfig, sms: int = SMS) -> int:
    """Thread blocks the kernel launches for `total` tiles: one per tile, or, when
    persistent, one per SM (at most one per tile, whole clusters), block `c`
    computing tiles c, c + grid, c + 2 grid, ... (`tile_at`), or with clusters, its
    cluster computing units of `cluster` tiles so (`unit_at`)."""
    cl = cfg.cluster
    return cl * min(sms // cl, total // cl) if cfg.persistent else total


def unit_at(cta, round_, grid: int, cluster: int):
    """The unit of work (`cluster` adjacent tiles of one tile row, one per block of
    the cluster) that block `cta`'s cluster -- blocks cta // cluster * cluster, ...,
    consecutive, as a one-dimensional grid of clusters of `cluster` blocks launches
    them -- computes in its round `round_`: the clusters walk the units as blocks walk
    tiles without clusters (`tile_at`); valid while below tiles / cluster."""
    if cluster == 1:
        return tile_at(cta, round_, grid)
    return tile_at(cta // cluster, round_, grid // cluster)


def tile_of_unit(unit, rank, tiles_m: int, tiles_n: int, group: int, cluster: int,
                 min_=min):
    """(tile row, tile column) the block of rank `rank` in its cluster computes of
    unit `unit`: units walk like tiles (`tile_of`) over tiles_n / cluster columns of
    units, a unit's tiles being the adjacent columns cluster * u + rank of one tile
    row (partners share the A panel); `cluster` divides `tiles_n` (`problem_of`)."""
    if cluster == 1:
        return tile_of(unit, tiles_m, tiles_n, group, min_)
    tm, un = tile_of(unit, tiles_m, tiles_n // cluster, group, min_)
    return tm, un * cluster + rank


def tile_at(cta, round_, grid: int):
    """The tile block `cta` computes in its round `round_` (valid while below the
    number of tiles: a block's valid rounds are a prefix)."""
    return cta + round_ * grid


def chunk_of(round_, kt, k_tiles: int):
    """The position of K chunk `kt` of a block's round `round_` in everything that
    block has loaded: the ring of shared slots and its mbarrier phases run on across
    the block's tiles."""
    return round_ * k_tiles + kt


def ring_at(chunk, stages: int):
    """(slot, parity) of a block's chunk `chunk`: it occupies slot chunk % stages, its
    use number chunk // stages of that slot, so its "full" barrier completes the phase
    of that parity; the slot's previous chunk's "empty" phase has the other parity."""
    return chunk % stages, chunk // stages % 2
