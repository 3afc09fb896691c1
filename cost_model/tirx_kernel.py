"""Features of a warp-specialised TIRx GEMM kernel (wgmma fed by TMA through an mbarrier
ring, as `search_space/cuda/hopper_gemm.py` writes it), read from the function
(`tirx_read.py`), not from the decisions that made it: any TIRx kernel built from the
same instructions gets the same description.

`summary` gives the raw numbers (names in `NAMES`):
- threads, warpgroups per CTA (the scope ids); producers / consumers: warpgroups that
  issue TMA loads and no wgmma / that issue wgmma (the branches they take on their
  thread index);
- stages: the ring's depth, the modulus by which the loads' shared-memory destination
  follows the main loop (else shared memory / bytes per stage);
- wgmma_per_kstep, wgmma_per_tile: wgmma instructions of the whole CTA per main-loop
  step and per output tile (all consumer warpgroups); wgmma_n: their N; k_steps: the
  main loop's trip count (the innermost loop around them that is not unrolled);
- tma_loads_per_kstep, tma_bytes_per_stage: TMA loads per main-loop step and the bytes
  their boxes carry (box x element size of the tensor map each load names);
  tma_stores, stmatrix: TMA stores and stmatrix calls in the kernel;
- smem_bytes: shared memory allocated (every shared scope); mbarriers: barriers
  initialised; setmaxnreg, consumer_regs, producer_regs: whether warpgroups re-split
  the register file and the counts they ask for;
- raster: CTAs in a row (from CTA 0) that load the same tile of B (the wgmma's second
  operand), i.e. walk down one column of tiles: the kernel's raster group. Read by
  evaluating the TMA coordinates for consecutive CTA ids; 0 where they do not evaluate
  (a coordinate that depends on something else than the CTA id and loop counters);
- block_m, block_n, block_k: the block tile, solved from the work of one main-loop
  step (BM x BN x BK = wgmma count x m x n x k) and the elements TMA brings
  ((BM + BN) x BK), with BN the wgmma's N; 0 where these do not give whole numbers
  (a kernel whose step loads something else, or whose tile is several wgmma wide);
- tiles: output tiles, the (CTA, iteration of the loops around the main loop: a
  persistent kernel's tile loop) pairs whose guards hold (`_tiles`);
- ctas_per_sm, waves, wave_efficiency: with the target's SM count
  (`FeatureConfig.sm_count`; 0 when the target does not say, and then these are 0), CTAs an
  SM holds by shared memory (sm_90: 228 KiB per SM, 1 KiB reserved per CTA) and
  threads (2048), the waves of tiles and how full they are on average. Registers are not
  counted: the count is ptxas's, unknown before compiling;
- writeback_bytes: the widest global write of one thread (a store's value: 2 for a
  scalar fp16 store, 4 for a pair; a TMA store counts 16, the widest vector access).

`vector` turns them into features (log2(1 + x), flags and fractions as they are);
`tensor_core_slots` and `memory_slots` fill the groups the mma.sync schedules fill
(`tensor_core.py`, `memory_access.py`) with the same units, so one model ranks both.
"""
from __future__ import annotations

import itertools
import math

from .memory_access import NAMES as MEM_NAMES
from .memory_access import global_reads
from .tensor_core import NAMES as TC_NAMES
from .tirx_read import (
    BINARY,
    WARPGROUP,
    TirxKernel,
    loaded,
    pointed_var,
    value,
    wgmma_shape,
)

NAMES = ("threads", "warpgroups", "producers", "consumers", "stages", "wgmma_per_kstep",
         "wgmma_per_tile", "wgmma_n", "k_steps", "tma_loads_per_kstep",
         "tma_bytes_per_stage", "tma_stores", "stmatrix", "smem_bytes", "mbarriers",
         "setmaxnreg", "consumer_regs", "producer_regs", "raster", "block_m", "block_n",
         "block_k", "tiles", "ctas_per_sm", "waves", "wave_efficiency", "writeback_bytes")
_RAW = ("setmaxnreg", "wave_efficiency")      # as they are; the rest log2(1 + x)
SMEM_PER_SM, SMEM_PER_CTA_RESERVED = 233472, 1024   # sm_90
THREADS_PER_SM, CTAS_PER_SM = 2048, 32
TMA_WIDTH = 16          # bytes: what a TMA transfer counts as in the vector-width slots
MMA_SYNC_MACS = 16 * 8 * 16   # one m16n8k16 mma.sync of one warp
_TILE_WALK = 1 << 12          # (CTA, tile iteration) pairs evaluated at most (else all count)


def _lg(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


def _mods(e, out: list) -> None:
    """Constant divisors of every `x % c` in an expression."""
    kind = type(e).__name__
    if kind == "FloorMod" and type(e.b).__name__ == "IntImm":
        out.append(int(e.b.value))
    if kind == "Call":
        subs = list(e.args)
    elif kind == "TensorLoad":
        subs = list(e.indices)
    elif kind == "Cast":
        subs = [e.value]
    elif kind in BINARY:
        subs = [e.a, e.b]
    else:
        subs = []
    for sub in subs:
        _mods(sub, out)


def _env(k: TirxKernel, call, cta: int = 0) -> dict:
    """Loop counters 0, the first thread of the first warpgroup reaching `call`, CTA `cta`."""
    env = k.thread_env(min(call.warpgroups, default=0) * WARPGROUP)
    env.update({lp.var: 0 for lp in call.loops})
    env.update({v: cta for v, s in k.scope_vars.items() if s in (1, 2)})
    return env


def _box_bytes(k: TirxKernel, load) -> int:
    entry = k.tensor_maps.get(pointed_var(load.args[1])) if len(load.args) > 1 else None
    return 0 if entry is None else entry[0] * math.prod(entry[1])


def _raster(k: TirxKernel, mma: list, loads: list) -> int:
    """CTAs from CTA 0 that load the same tile of the wgmma's B operand (see module)."""
    descs = {}
    for c in k.named("wgmma_encode_matrix_descriptor"):
        tgt, src = loaded(c.args[0]), loaded(c.args[1])
        if tgt is not None and src is not None:
            descs.setdefault(str(tgt.source.name), (c, src.indices[0]))
    operands = [str(a.source.name) for a in mma[0].args
                if type(a).__name__ == "TensorLoad" and str(a.source.name) in descs]
    if not operands:           # B is the last descriptor operand (A may be in registers)
        return 0
    call, index = descs[operands[-1]]
    b_start = value(index, _env(k, call))     # where B's tile starts in stage 0
    starts = []                                # (where a load writes in stage 0, load)
    for ld in loads:
        dst = loaded(ld.args[0])
        at = value(dst.indices[0], _env(k, ld)) if dst is not None else None
        if at is not None and b_start is not None and at <= b_start:
            starts.append((at, ld))
    if not starts:
        return 0
    b_load = max(starts, key=lambda x: x[0])[1]   # the load that writes B's first box
    coords = [a for a in b_load.args[2:] if type(a).__name__ != "StringImm"][:-1]

    def tile(cta):
        env = _env(k, b_load, cta)
        return tuple(value(a, env) for a in coords)

    first, run = tile(0), 1
    if None in first:
        return 0
    while run < min(k.grid, 4096) and tile(run) == first:
        run += 1
    return run


def summary(k: TirxKernel, sm_count: int = 0) -> dict:
    """The raw numbers named by `NAMES` (see the module docstring)."""
    mma = [c for c in k.calls if c.name.startswith("ptx.wgmma") and wgmma_shape(c)]
    loads = [c for c in k.named("cp_async_bulk_tensor_g2s") if c.k_loop() is not None]
    s = dict.fromkeys(NAMES, 0.0)
    s["threads"], s["warpgroups"] = k.threads, k.threads // WARPGROUP
    consumers = frozenset().union(*(c.warpgroups for c in mma))
    s["consumers"] = len(consumers)
    s["producers"] = len(frozenset().union(*(c.warpgroups for c in loads)) - consumers)
    for c in mma:
        ki = c.k_loop()
        inner = c.repeat(ki + 1) if ki is not None else c.repeat()
        s["wgmma_per_kstep"] += inner * len(c.warpgroups)
        steps = c.loops[ki].extent if ki is not None else 1
        s["k_steps"] = max(s["k_steps"], steps)
        s["wgmma_per_tile"] += inner * steps * len(c.warpgroups)
        s["wgmma_n"] = max(s["wgmma_n"], wgmma_shape(c)[1])
        s["tiles"] = max(s["tiles"], _tiles(k, c, ki))
    for ld in loads:
        reps = ld.repeat(ld.k_loop() + 1)
        s["tma_loads_per_kstep"] += reps
        s["tma_bytes_per_stage"] += reps * _box_bytes(k, ld)
    s["tma_stores"] = sum(c.repeat() for c in k.named("cp_async_bulk_tensor_s2g"))
    s["stmatrix"] = sum(c.repeat() for c in k.named("ptx.stmatrix"))
    s["smem_bytes"] = sum(b for _, scope, b in k.allocs if scope.startswith("shared"))
    s["mbarriers"] = sum(c.repeat() for c in k.named("ptx.mbarrier_init"))
    s["stages"] = _stages(loads, s)
    _registers(k, s)
    if mma:
        s["raster"] = _raster(k, mma, loads)
        _block_tile(k, mma[0], loads, s)
    _waves(s, sm_count)
    widest = max((b for b, _ in k.global_stores), default=0)
    s["writeback_bytes"] = max(widest, TMA_WIDTH if s["tma_stores"] else 0)
    return s


def _tiles(k: TirxKernel, call, ki: int | None) -> int:
    """Output tiles the kernel computes with `call`: (CTA, iteration of the loops around
    its main loop) pairs whose conditions hold (a persistent kernel's `tile < tiles`);
    a condition that does not evaluate there (a main-loop counter) counts as holding;
    past `_TILE_WALK` pairs to evaluate, every pair counts (at most a wave too many)."""
    outer = call.loops[:ki] if ki is not None else call.loops
    combos = math.prod(lp.extent for lp in outer)
    base = _env(k, call)
    base.update({lp.var: None for lp in call.loops})
    base.update({v: None for v, s in k.scope_vars.items() if s in (1, 2)})
    varying = []            # the conditions that depend on the CTA or the tile loops
    for c, taken in call.conditions:
        v = value(c, base)
        if v is None:
            varying.append((c, taken))
        elif bool(v) != taken:
            return 0
    if not varying or k.grid * combos > _TILE_WALK:
        return k.grid * combos
    count = 0
    for cta in range(k.grid):
        for point in itertools.product(*(range(lp.extent) for lp in outer)):
            env = dict(base)
            env.update({v: cta for v, s in k.scope_vars.items() if s in (1, 2)})
            env.update({lp.var: i for lp, i in zip(outer, point)})
            count += all(v is None or bool(v) == taken for v, taken in
                         ((value(c, env), taken) for c, taken in varying))
    return count


def _stages(loads: list, s: dict) -> int:
    mods = []
    for ld in loads:
        dst = loaded(ld.args[0])
        if dst is not None:
            _mods(dst.indices[0], mods)
    if mods:
        return max(mods)
    per = s["tma_bytes_per_stage"]
    return int(s["smem_bytes"] // per) if per else 0


def _registers(k: TirxKernel, s: dict) -> None:
    inc, dec = [], []
    for c in k.named("ptx.setmaxnreg"):
        words = [str(a.value) for a in c.args if type(a).__name__ == "StringImm"]
        count = value(c.args[0], {})
        if count is not None:
            (inc if "inc" in words else dec).append(count)
    s["setmaxnreg"] = float(bool(inc or dec))
    s["consumer_regs"] = max(inc, default=0)
    s["producer_regs"] = min(dec, default=0)


def _block_tile(k: TirxKernel, mma, loads: list, s: dict) -> None:
    m, n, kk = wgmma_shape(mma)
    elem = next((k.tensor_maps[pointed_var(ld.args[1])][0] for ld in loads
                 if pointed_var(ld.args[1]) in k.tensor_maps), 0)
    if not elem:
        return
    mk = s["wgmma_per_kstep"] * m * kk               # BM x BK
    nk = s["tma_bytes_per_stage"] // elem - mk       # BN x BK
    if nk <= 0 or nk % n or mk % (nk // n):
        return
    bk = nk // n
    s["block_m"], s["block_n"], s["block_k"] = mk // bk, n, bk


def _waves(s: dict, sm_count: int) -> None:
    if not (sm_count and s["tiles"] and s["threads"]):
        return
    per_sm = min(SMEM_PER_SM // (s["smem_bytes"] + SMEM_PER_CTA_RESERVED),
                 THREADS_PER_SM // s["threads"], CTAS_PER_SM)
    if per_sm < 1:
        return
    slots = sm_count * per_sm
    s["ctas_per_sm"] = per_sm
    s["waves"] = s["tiles"] / slots
    s["wave_efficiency"] = s["tiles"] / (math.ceil(s["tiles"] / slots) * slots)


def vector(s: dict) -> list[float]:
    """The features named by `NAMES` from a `summary` (zeros for a non-TIRx kernel: None)."""
    if s is None:
        return [0.0] * len(NAMES)
    return [float(s[n]) if n in _RAW else _lg(s[n]) for n in NAMES]


def tensor_core_slots(k: TirxKernel, s: dict) -> list[float]:
    """`tensor_core.NAMES` for the kernel, in mma.sync units: each wgmma counts as the
    m16n8k16 instructions of the same work per warp (m64nNkK over 4 warps: N x K / 128),
    per consumer thread and per CTA (the consumer threads); no ldmatrix (wgmma reads
    shared memory through descriptors); the pipelined shared memory is stages x the bytes
    a stage's TMA loads bring."""
    mma = [c for c in k.calls if c.name.startswith("ptx.wgmma") and wgmma_shape(c)]
    if not mma:
        return [0.0] * len(TC_NAMES)
    per_thread = 0.0
    for c in mma:
        m, n, kk = wgmma_shape(c)
        per_thread += c.repeat() * (m // 4) * n * kk / MMA_SYNC_MACS
    got = {"mma_per_thread": _lg(per_thread),
           "mma_per_block": _lg(per_thread * s["consumers"] * WARPGROUP),
           "ldmatrix_per_thread": 0.0, "warps": _lg(s["threads"] // 32),
           "stages": _lg(s["stages"]), "async": float(s["tma_loads_per_kstep"] > 0),
           "smem_pipelined": _lg(s["stages"] * s["tma_bytes_per_stage"])}
    return [got[n] for n in TC_NAMES]


def memory_slots(k: TirxKernel, s: dict, program) -> list[float]:
    """`memory_access.NAMES` for the kernel: TMA loads count as 16-byte global reads
    and shared writes (at least what one 128-bit copy moves), a store with a vector value
    (or a TMA store) as its width, each tensor-mapped buffer as read once beside the
    reads of the program's stores (epilogue operands)."""
    tma_in = TMA_WIDTH if s["tma_loads_per_kstep"] else 0
    vec_store = max((b for b, vector in k.global_stores if vector), default=0)
    vec_store = max(vec_store, TMA_WIDTH if s["tma_stores"] else 0)
    widest = {"vec_global_read": tma_in, "vec_global_write": vec_store,
              "vec_shared_read": 0, "vec_shared_write": tma_in}
    readers = global_reads(program)
    loaded_maps = {pointed_var(ld.args[1]) for ld in k.named("cp_async_bulk_tensor_g2s")}
    for var, (_, _, name) in k.tensor_maps.items():
        if var in loaded_maps:
            readers[name] = readers.get(name, 0) + 1
    reads = list(readers.values())
    return [_lg(widest[n]) for n in MEM_NAMES[:4]] + \
        [_lg(max(reads, default=0)), _lg(sum(reads) / len(reads) if reads else 0)]
