"""The `wgmma` sketch: a task's GEMM computed by the Hopper kernel of `hopper_gemm.py`
(wgmma fed by TMA through an mbarrier ring, warp-specialised), on sm_90a only.

It applies to a task that is one GEMM and nothing else: C[M, N] = sum_k A[M, K] * B[K, N]
(or B[N, K]), or its batched form (C[b] = A[b] x B[b], batch leading), with fp16 or bf16
inputs (casts inside the sum allowed), C in fp32, fp16 or bf16, the function's
parameters being A, B, C in that order, and rows TMA can address
(`hopper_gemm_layout.tma_compatible`). The kernel always accumulates in fp32, also where the
workload sums in its 16-bit output type (at least as accurate as the reference).

Unlike the other sketches it does not transform the task's schedule: its decisions
(block tile BM x BN, BK, pipeline stages, consumer warpgroups, raster group) pick an
instance of the template, which `program` returns as the function to build; `apply`
leaves it as it is. The function carries `hopper_gemm.PIPELINE_ATTR`, by which the CUDA
builder compiles it with TVM's TIRx pipeline. Every decision is drawn within what the
earlier ones leave (accumulator registers, shared memory), so every sample builds.
"""
from __future__ import annotations

from ..sketch import Sketch
from .gemm_form import BATCH, K, M, N, gemm_roles
from .hopper_gemm import PIPELINE_ATTR, hopper_gemm
from .hopper_gemm_layout import (
    INPUTS,
    OUTPUTS,
    GemmShape,
    HopperConfig,
    config_problem,
    tma_compatible,
)

WGMMA_ARCH = "sm_90a"
BLOCK_M = (64, 128, 256)
BLOCK_N = (64, 128, 192, 256)
BLOCK_K = (32, 64)
STAGES = (2, 3, 4, 5, 6)
CONSUMERS = (1, 2)
RASTER = (1, 4, 8)


def is_tirx(mod) -> bool:
    """Whether a module holds a function written in TIRx (built by the tirx pipeline)."""
    return any(f.attrs is not None and PIPELINE_ATTR in f.attrs
               for f in mod.functions.values())


def gemm_shape(func, target) -> GemmShape | None:
    """The GEMM `func` computes when this sketch applies to it on `target` (see the
    module docstring), else None."""
    from tvm import s_tir

    if str(target.config.get("arch", "")) != WGMMA_ARCH:
        return None
    sch = s_tir.Schedule(func)
    blocks = list(sch.get_child_blocks(sch.get_sblock("root"))) if _has_root(sch) else []
    if len(blocks) != 1 or len(func.params) != 3:
        return None
    block = blocks[0]
    roles = gemm_roles(sch, block)
    if roles is None or any(len(ps) != 1 for ps in roles.groups.values()):
        return None
    stmt = sch.get(block)
    a_buf = stmt.reads[roles.a_index].source
    b_buf = stmt.reads[roles.b_index].source
    c_buf = stmt.writes[0].source
    if [str(p.name) for p in func.params] != [str(b.name) for b in (a_buf, b_buf, c_buf)]:
        return None
    m, n, k = (roles.extents[r] for r in (M, N, K))
    batch = roles.extents.get(BATCH, 1)
    var = {r: stmt.iter_vars[ps[0]].var for r, ps in roles.groups.items()}
    regions = [stmt.reads[roles.a_index].region, stmt.reads[roles.b_index].region,
               stmt.writes[0].region]
    shape = GemmShape(m, n, k, roles.in_dtype, str(c_buf.dtype), roles.b_kn, batch)
    lead = (batch,) if BATCH in var else ()
    want_b = (*lead, k, n) if roles.b_kn else (*lead, n, k)
    if (_dims(a_buf) != (*lead, m, k) or _dims(b_buf) != want_b
            or _dims(c_buf) != (*lead, m, n) or not regions[0][-1].min.same_as(var[K])
            or (lead and not all(r[0].min.same_as(var[BATCH]) for r in regions))
            or str(b_buf.dtype) != shape.in_dtype
            or shape.in_dtype not in INPUTS or shape.out_dtype not in OUTPUTS
            or not tma_compatible(shape)):
        return None
    return shape


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
    except Exception:  # noqa: BLE001 - a function without a root block has no GEMM
        return False
    return True


def _dims(buf) -> tuple:
    return tuple(int(d) for d in buf.shape)


class WgmmaSketch(Sketch):
    """The task's GEMM as an instance of the Hopper template (see the module docstring)."""

    name = "wgmma"
    # where it applies it is the fastest kernel the space has (tensor cores at Hopper's
    # rate): drawn as often as the mma.sync sketch until measurements decide
    prior = 4.0

    def __init__(self, shape: GemmShape):
        self.shape = shape
        self._made = {}

    def program(self, func, decide):
        """The kernel for the decisions, under the task's function name (one object per
        configuration)."""
        cfg = self.decide(decide)
        if cfg not in self._made:
            kernel = hopper_gemm(self.shape, cfg)
            if func.attrs is not None and "global_symbol" in func.attrs:
                kernel = kernel.with_attr("global_symbol", func.attrs["global_symbol"])
            self._made[cfg] = kernel
        return self._made[cfg]

    def decide(self, decide) -> HopperConfig:
        """The kernel's parameters, each drawn within what the earlier ones leave."""
        s = self.shape
        nc = decide.choice("wgmma.consumers", list(CONSUMERS))
        bm = decide.choice("wgmma.bm", [b for b in BLOCK_M if b % (64 * nc) == 0 and (
            b == 64 * nc or b // 2 < s.m)])
        bn = decide.choice("wgmma.bn", [b for b in BLOCK_N if b % 64 == 0 and (
            b == 64 or b // 2 < s.n) and config_problem(HopperConfig(bm, b, 32, 2, nc)) is None]
            or [64])
        bk = decide.choice("wgmma.bk", list(BLOCK_K))
        stages = decide.choice("wgmma.stages", [st for st in STAGES if config_problem(
            HopperConfig(bm, bn, bk, st, nc)) is None] or [2])
        raster = decide.choice("wgmma.raster", list(RASTER))
        return HopperConfig(bm, bn, bk, stages, nc, raster)

    def apply(self, sch, decide) -> None:
        return None


def wgmma_sketches(task, target) -> list:
    """[WgmmaSketch] when the sketch applies to `task` on `target`, else []."""
    shape = gemm_shape(task.func, target)
    return [WgmmaSketch(shape)] if shape is not None else []
