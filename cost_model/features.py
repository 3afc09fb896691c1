"""A fixed-length feature vector per candidate, from its scheduled program.

Groups (see `feature_names()` for every column):
- two store slots: the two stores with the most floating-point work, each described by
  its loop nest (extents of the innermost six loops and the outermost two: the tiling
  levels), parallel / vector / unroll / thread extents (and the odd factor of the vector
  length: on an AVX-512 CPU 48-wide vector loops run several times slower than
  power-of-two widths, which log2 of the width cannot show), arithmetic per iteration,
  access strides, footprints and estimated traffic and arithmetic intensity per cache size,
  and its register tile (the loops inside the innermost reduction loop: accumulators,
  vector registers they need, reduction steps streamed over them, flops per byte read);
- the rest: how many other stores there are and their summed work and traffic;
- program: totals, allocated bytes per memory scope (compacted), task FLOPs;
- tensor cores: mma and ldmatrix counts, warps, pipeline depth, pipelined shared
  memory (`tensor_core.py`; zeros for other schedules);
- memory access over every store: the widest vector access per scope and direction, how
  many stores read each global buffer (`memory_access.py`);
- TIRx kernels (wgmma + TMA, warp-specialised; `tirx_kernel.py`): warpgroup roles,
  pipeline stages, wgmma and TMA counts, shared memory, barriers, registers, raster
  group, block tile, waves over the SMs, write-back width; zeros for other schedules.
  For such a kernel the tensor-core, memory-access and allocation groups are filled from
  the same reading in the units the mma.sync schedules use, so one model ranks both;
- decisions: log2 of the candidate's tile factors and its other choices;
- optionally MetaSchedule's per-store features (max and mean over stores).

Values are mostly log2(1 + x), and log2 of products of loop extents (0 when there is no
such loop): scale-free for trees, comparable across task sizes.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from .footprint import alloc_bytes, buffer_footprints, flat_stride, level_footprints, traffic
from .ir_walk import Program, Store, walk
from .memory_access import NAMES as MEM_NAMES
from .memory_access import memory_access_vector
from .tensor_core import NAMES as TC_NAMES
from .tensor_core import tensor_core_vector
from .tirx_kernel import NAMES as TIRX_NAMES
from .tirx_kernel import memory_slots, summary, tensor_core_slots
from .tirx_kernel import vector as tirx_vector
from .tirx_read import read_tirx

FEATURE_VERSION = "6"
_OPS = ("add", "mul", "div", "math", "cmp", "select", "cast", "int")
_INNER_LEVELS = 6
_OUTER_LEVELS = 2
_TILE_SLOTS, _TILE_PARTS, _CHOICE_SLOTS = 4, 4, 8


@dataclass(frozen=True)
class FeatureConfig:
    """Cache capacities (bytes) at which traffic is estimated; MetaSchedule's per-store
    group on/off (it needs the target kind, "llvm" or "cuda"); the GPU's SM count when
    the target says it (0: unknown; the TIRx wave features are then 0)."""

    caches: tuple[int, ...] = (32 * 1024, 1024 * 1024, 32 * 1024 * 1024)
    per_store_feature: bool = False
    target_kind: str = "llvm"
    sm_count: int = 0

    def to_json(self) -> dict:
        return {"caches": list(self.caches), "per_store_feature": self.per_store_feature,
                "target_kind": self.target_kind, "sm_count": self.sm_count,
                "version": FEATURE_VERSION}

    @staticmethod
    def from_json(d: dict) -> "FeatureConfig":
        if str(d.get("version")) != FEATURE_VERSION:
            raise ValueError(f"features version {d.get('version')!r}, this build has "
                             f"{FEATURE_VERSION!r}")
        return FeatureConfig(tuple(int(c) for c in d["caches"]), bool(d["per_store_feature"]),
                             str(d.get("target_kind", "llvm")), int(d.get("sm_count", 0)))


def _lg(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


def _log_prod(extents) -> float:
    """log2 of a product of loop extents: 0 when there is no such loop."""
    return math.log2(max(_prod(extents), 1))


def _pad(values: list, n: int) -> list:
    return values + [0.0] * (n - len(values))


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _store_names(cfg: FeatureConfig) -> list[str]:
    names = ["iters", "flops"] + [f"op_{o}" for o in _OPS]
    names += ["loops", "loops_gt1", "parallel", "n_parallel", "vector", "vector_contig",
              "vector_odd",
              "unroll_explicit", "unroll_auto"]
    names += [f"inner_{i}" for i in range(_INNER_LEVELS)] + [f"outer_{i}" for i in range(_OUTER_LEVELS)]
    names += [f"inner_work_{i + 1}" for i in range(_INNER_LEVELS)]
    names += ["stride_write", "stride_read_mean", "stride_read_max", "reads_contig", "reads_zero"]
    names += ["blocks", "threads", "vthreads", "fp_total"]
    names += [f"fp_inner_{i + 1}" for i in range(_INNER_LEVELS)]
    for c in cfg.caches:
        names += [f"traffic_{c >> 10}k", f"intensity_{c >> 10}k"]
    names += ["n_reads", "n_buffers", "scope_global", "scope_shared", "scope_local"]
    return names + _REGISTER_TILE_NAMES


def _other_names(cfg: FeatureConfig) -> list[str]:
    return ["n", "iters", "flops"] + [f"traffic_{c >> 10}k" for c in cfg.caches]


_PROGRAM_NAMES = ["n_stores", "flops", "iters", "alloc_global", "alloc_shared", "alloc_local",
                  "max_parallel", "task_flops"]


def _decision_names() -> list[str]:
    names = [f"tile{t}_{p}" for t in range(_TILE_SLOTS)
             for p in ("inner1", "inner2", "inner3", "outer")]
    return names + [f"choice{c}" for c in range(_CHOICE_SLOTS)]


def feature_names(cfg: FeatureConfig = FeatureConfig()) -> list[str]:
    """Column names of the vector `extract` returns for this config."""
    names = [f"s{slot}.{n}" for slot in range(2) for n in _store_names(cfg)]
    names += [f"other.{n}" for n in _other_names(cfg)]
    names += [f"prog.{n}" for n in _PROGRAM_NAMES]
    names += [f"tc.{n}" for n in TC_NAMES]
    names += [f"mem.{n}" for n in MEM_NAMES]
    names += [f"tirx.{n}" for n in TIRX_NAMES]
    names += [f"dec.{n}" for n in _decision_names()]
    if cfg.per_store_feature:
        from .psf import psf_names

        names += psf_names()
    return names


@dataclass
class _StoreStats:
    store: Store
    iters: int
    flops: float
    footprints: list[int]


def _stats(st: Store) -> _StoreStats:
    iters = _prod(lp.extent for lp in st.loops)
    float_ops = sum(v for k, v in st.ops.items() if k != "int")
    return _StoreStats(st, iters, float(iters) * max(float_ops, 1.0),
                       level_footprints(st.loops, st.accesses))


def _strides(st: Store, loop_id: int | None) -> list:
    if loop_id is None:
        return [0 for _ in st.accesses]
    return [flat_stride(acc, loop_id) for acc in st.accesses]


def _stride_feature(s) -> float:
    return -1.0 if s is None else _lg(s)


def _odd_part(n: int) -> int:
    """48 -> 3, 16 -> 1: what is left of n after all its factors of two."""
    n = max(int(n), 1)
    return n // (n & -n)


def _loop_features(st: Store) -> list[float]:
    loops = st.loops
    par = [lp.extent for lp in loops if lp.kind == "parallel"]
    vec = [lp for lp in loops if lp.kind == "vectorized"]
    vec_contig, vec_extent = 0.0, _prod(lp.extent for lp in vec)
    if vec:
        strides = _strides(st, vec[-1].id)
        vec_contig = sum(1 for s in strides if s in (0, 1)) / len(strides)
    inner = [_lg(lp.extent) for lp in reversed(loops)][:_INNER_LEVELS]
    outer = [_lg(lp.extent) for lp in loops][:_OUTER_LEVELS]
    # work of the innermost k loops: the tile sizes per tiling level, whatever the sketch
    work = [_lg(_prod(lp.extent for lp in loops[len(loops) - k:]))
            for k in range(1, min(_INNER_LEVELS, len(loops)) + 1)]
    return [len(loops), sum(1 for lp in loops if lp.extent > 1), _log_prod(par), len(par),
            math.log2(vec_extent), vec_contig, math.log2(_odd_part(vec_extent)),
            _log_prod(lp.extent for lp in loops if lp.kind == "unrolled"), _lg(st.unroll)] + \
        _pad(inner, _INNER_LEVELS) + _pad(outer, _OUTER_LEVELS) + _pad(work, _INNER_LEVELS)


def _access_features(st: Store) -> list[float]:
    innermost = next((lp.id for lp in reversed(st.loops) if lp.extent > 1), None)
    strides = _strides(st, innermost)
    write, reads = strides[0], strides[1:]
    known = [s for s in reads if s is not None]
    return [_stride_feature(write),
            sum(_lg(s) for s in known) / len(known) if known else 0.0,
            max((_lg(s) for s in known), default=0.0),
            sum(1 for s in reads if s == 1) / max(len(reads), 1),
            sum(1 for s in reads if s == 0) / max(len(reads), 1)]


_REGISTER_TILE_NAMES = ["reg_tile", "reg_accumulators", "reg_spill", "reg_stream",
                        "reg_intensity", "reg_stream_footprint", "unrolled_body",
                        "unrolled_body_x_tile"]
_REGISTERS = 32      # vector registers of the widest x86 / Arm SIMD units


def _register_tile_features(s: _StoreStats) -> list[float]:
    """The register tile of a reduction: the loops inside its innermost reduction loop
    (one that leaves the written address unchanged) hold their outputs in registers
    while the reduction streams. Zeros for a store without a reduction loop."""
    st, loops = s.store, s.store.loops
    write = st.accesses[0]

    def reduces(lp):
        return lp.extent > 1 and flat_stride(write, lp.id) == 0

    red = next((k for k in range(len(loops) - 1, -1, -1) if reduces(loops[k])), None)
    body = _unrolled_body(st)
    if red is None:
        return [0.0] * (len(_REGISTER_TILE_NAMES) - 2) + [_lg(body), 0.0]
    tile = loops[red + 1:]
    elems = _prod(lp.extent for lp in tile)
    accumulators = elems / max(_prod(lp.extent for lp in tile if lp.kind == "vectorized"), 1)
    top = red
    while top > 0 and (reduces(loops[top - 1]) or loops[top - 1].extent == 1):
        top -= 1
    stream = _prod(lp.extent for lp in loops[top:red + 1])
    reads = [a for a in st.accesses            # not the accumulators' own reads
             if not a.write and a.buffer.name != write.buffer.name]
    read_bytes = sum(buffer_footprints(reads, {lp.id: lp.extent - 1 for lp in tile}).values())
    float_ops = max(sum(v for k, v in st.ops.items() if k != "int"), 1)
    return [_lg(elems), _lg(accumulators), _lg(max(accumulators - _REGISTERS, 0)), _lg(stream),
            math.log2(elems * float_ops / max(read_bytes, 1)), _lg(s.footprints[top]),
            _lg(body), _lg(body / max(elems, 1))]


def _unrolled_body(st: Store) -> int:
    """Iterations the compiler unrolls into straight-line code: the innermost loops whose
    extents multiply to at most the auto-unroll step (or explicitly unrolled loops)."""
    body, limit = 1, max(st.unroll, max((lp.unroll for lp in st.loops), default=0))
    for lp in reversed(st.loops):
        if lp.kind == "unrolled" or body * lp.extent <= limit:
            body *= lp.extent
        elif lp.kind != "vectorized":
            break
    return body


def _thread_features(st: Store) -> list[float]:
    def extent(prefix):
        return _log_prod(lp.extent for lp in st.loops if lp.tag.startswith(prefix))

    return [extent("blockIdx"), extent("threadIdx"), extent("vthread")]


def _store_vector(s: _StoreStats, cfg: FeatureConfig) -> list[float]:
    st = s.store
    v = [_lg(s.iters), _lg(s.flops)] + [_lg(st.ops.get(o, 0)) for o in _OPS]
    v += _loop_features(st) + _access_features(st) + _thread_features(st)
    fps = s.footprints  # fps[L]: bytes touched by loops L..n-1; fps[n]: one iteration
    v += [_lg(fps[0])] + _pad([_lg(fps[len(fps) - 1 - k])
                               for k in range(1, min(_INNER_LEVELS, len(fps) - 1) + 1)],
                              _INNER_LEVELS)
    for cap in cfg.caches:
        moved = traffic(st.loops, s.footprints, cap)
        v += [_lg(moved), math.log2(s.flops / max(moved, 1.0))]
    scope = st.accesses[0].buffer.scope
    v += [len(st.accesses) - 1, len({a.buffer.name for a in st.accesses}),
          float(scope.startswith("global")), float(scope.startswith("shared")),
          float(scope.startswith("local"))]
    return v + _register_tile_features(s)


def _other_vector(rest: list[_StoreStats], cfg: FeatureConfig) -> list[float]:
    v = [len(rest), _lg(sum(s.iters for s in rest)), _lg(sum(s.flops for s in rest))]
    return v + [_lg(sum(traffic(s.store.loops, s.footprints, c) for s in rest)) for c in cfg.caches]


def _program_vector(prog: Program, stats: list[_StoreStats], task_flops: float,
                    kernel=None) -> list[float]:
    """Program totals; a TIRx kernel's allocations count as declared (TMA and wgmma fill
    and read its shared buffers without stores to compact them by)."""
    by_scope = {"global": 0, "shared": 0, "local": 0}
    for buf in prog.allocs:
        kind = next((k for k in by_scope if buf.scope.startswith(k)), "global")
        by_scope[kind] += alloc_bytes(prog.stores, buf.name, buf.scope)
    for _, scope, size in (kernel.allocs if kernel is not None else ()):
        by_scope[next((k for k in by_scope if scope.startswith(k)), "global")] += size
    max_par = max((_prod(lp.extent for lp in s.store.loops if lp.kind == "parallel")
                   for s in stats), default=1)
    return [len(stats), _lg(sum(s.flops for s in stats)), _lg(sum(s.iters for s in stats)),
            _lg(by_scope["global"]), _lg(by_scope["shared"]), _lg(by_scope["local"]),
            math.log2(max_par), _lg(task_flops)]


def decision_vector(candidate) -> list[float]:
    """Tile decisions (the largest tiled extents first), each as log2 of its innermost
    factor, of the inner two and inner three factors' product (the tile size per level)
    and of its outermost factor; then the other choices (numbers as log2(1+x), anything
    else as a stable hash in [0, 1))."""
    tiles, choices = [], []
    for name, value in (candidate.decisions if candidate is not None else ()):
        if isinstance(value, tuple) and value and all(isinstance(x, int) for x in value):
            tiles.append((-_prod(value), name, value))
        else:
            choices.append((name, value))
    out = []
    for _, _, value in sorted(tiles)[:_TILE_SLOTS]:
        logs = [math.log2(max(x, 1)) for x in value]
        cumulative = [sum(logs[len(logs) - k:]) for k in range(1, _TILE_PARTS)]
        out += [cumulative[min(k, len(logs)) - 1] for k in range(1, _TILE_PARTS)] + [logs[0]]
    out += [0.0] * (_TILE_SLOTS * _TILE_PARTS - len(out))
    for _, value in sorted(choices, key=lambda c: c[0])[:_CHOICE_SLOTS]:
        if isinstance(value, (bool, int, float)):
            out.append(_lg(abs(float(value))))
        else:
            out.append((zlib.crc32(str(value).encode()) % 1000) / 1000.0)
    return out + [0.0] * (_TILE_SLOTS * _TILE_PARTS + _CHOICE_SLOTS - len(out))


def extract(task, candidate, mod, cfg: FeatureConfig = FeatureConfig()) -> list[float]:
    """The feature vector of one scheduled module (`mod["main"]`) and its candidate."""
    prog = walk(mod["main"])
    kernel = read_tirx(mod["main"])
    tirx = summary(kernel, cfg.sm_count) if kernel is not None else None
    stats = sorted((_stats(st) for st in prog.stores), key=lambda s: (-s.flops, -s.iters))
    v: list[float] = []
    for slot in range(2):
        v += _store_vector(stats[slot], cfg) if slot < len(stats) else \
            [0.0] * len(_store_names(cfg))
    v += _other_vector(stats[2:], cfg)
    v += _program_vector(prog, stats, task.flops, kernel)
    if kernel is None:
        v += tensor_core_vector(mod) + memory_access_vector(prog)
    else:
        v += tensor_core_slots(kernel, tirx) + memory_slots(kernel, tirx, prog)
    v += tirx_vector(tirx)
    v += decision_vector(candidate)
    if cfg.per_store_feature:
        from .psf import psf_names, psf_vector

        # MetaSchedule's extractor reads s_tir schedules only: zeros for a TIRx kernel
        v += psf_vector(mod, cfg.target_kind) if kernel is None else \
            [0.0] * len(psf_names())
    return v
