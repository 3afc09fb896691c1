"""The `wgmma` sketch: a task's GEMM computed by the Hopper kernel of `hopper_gemm.py`
(wgmma fed by TMA through an mbarrier ring, warp-specialised), on sm_90a only.

It applies to a task whose first block is a GEMM, C[M, N] = sum_k A[M, K] * B[K, N]
(or B[N, K]), or its batched form (C[b] = A[b] x B[b], batch leading), with fp16 or bf16
inputs (casts inside the sum allowed), followed by a chain of elementwise consumers of
C ending in the function's output -- bias, activations, casts, a residual: the
epilogue `hopper_gemm_epilogue.extract` reads off the blocks, refusing what the
write-back cannot compute -- with the output in fp32, fp16 or bf16 and rows TMA can
address (`hopper_gemm_layout.tma_compatible`). The kernel keeps the function's
parameters in their order (A, B and the epilogue's operands in any order, the output
last; `explain` says why a task does not fit). It always accumulates in fp32, also
where the workload sums in its 16-bit output type (at least as accurate as the
reference).

Unlike the other sketches it does not transform the task's schedule: its decisions
(block tile BM x BN, BK, pipeline stages, consumer warpgroups, raster group,
whether blocks are persistent -- one per SM, the target's `sm_count` where it says,
else `hopper_gemm_layout.SMS`, each looping over tiles -- or one per tile, and the
cluster size: 2 where the tile columns pair up, drawn last so the earlier draws stay
as they were; a candidate recorded without it replays with 1, as it was built; then
the write-back, `wgmma.store`: from registers, or "tma" -- staged in shared memory and
stored by the TMA unit (`hopper_gemm_store.py`) -- offered where the output's rows are
16-byte aligned and the staging area fits beside the ring, drawn after the cluster for
the same reason, a candidate recorded without it replaying from registers) pick an
instance of the template, which `program` returns as the function to build; `apply`
leaves it as it is. The function carries `hopper_gemm.PIPELINE_ATTR`, by which the CUDA
builder compiles it with TVM's TIRx pipeline. Every decision is drawn within what the
earlier ones leave (accumulator registers, shared memory), so every sample builds.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..sketch import Sketch
from .gemm_form import BATCH, K, M, N, gemm_roles
from .hopper_gemm import PIPELINE_ATTR, hopper_gemm
from .hopper_gemm_epilogue import Epilogue, extract
from .hopper_gemm_layout import (
    INPUTS,
    OUTPUTS,
    SMS,
    GemmShape,
    HopperConfig,
    config_problem,
    problem_of,
    tma_compatible,
)
from .hopper_gemm_store import STORES, store_fits

WGMMA_ARCH = "sm_90a"
BLOCK_M = (64, 128, 256)
BLOCK_N = (64, 128, 192, 256)
BLOCK_K = (32, 64)
STAGES = (2, 3, 4, 5, 6)
CONSUMERS = (1, 2)
RASTER = (1, 4, 8)
CLUSTER = (1, 2)


def is_tirx(mod) -> bool:
    """Whether a module holds a function written in TIRx (built by the tirx pipeline)."""
    return any(f.attrs is not None and str(f.attrs.get(PIPELINE_ATTR, "")) == "tirx"
               for f in mod.functions.values())


@dataclass(frozen=True, eq=False)
class HopperTask:
    """What the kernel computes for a task: the GEMM, its epilogue, and the task's
    parameters in order ("A", "B", "C" for the kernel's own, the task's buffer for an
    epilogue operand)."""

    shape: GemmShape
    epilogue: Epilogue
    params: tuple


def hopper_task(func, target) -> HopperTask | None:
    """What this sketch computes for `func` on `target` (see the module docstring),
    or None where it does not apply."""
    found, _ = explain(func, target)
    return found


def explain(func, target):
    """(HopperTask, None) where the sketch applies to `func` on `target`, else (None,
    the reason)."""
    from tvm import s_tir

    if str(target.config.get("arch", "")) != WGMMA_ARCH:
        return None, f"not {WGMMA_ARCH}"
    sch = s_tir.Schedule(func)
    blocks = list(sch.get_child_blocks(sch.get_sblock("root"))) if _has_root(sch) else []
    if not blocks:
        return None, "no blocks"
    roles = gemm_roles(sch, blocks[0])
    if roles is None or any(len(ps) != 1 for ps in roles.groups.values()):
        return None, "the first block is not a GEMM"
    stmt = sch.get(blocks[0])
    a_buf = stmt.reads[roles.a_index].source
    b_buf = stmt.reads[roles.b_index].source
    c_buf = stmt.writes[0].source
    m, n, k = (roles.extents[r] for r in (M, N, K))
    batch = roles.extents.get(BATCH, 1)
    var = {r: stmt.iter_vars[ps[0]].var for r, ps in roles.groups.items()}
    lead = (batch,) if BATCH in var else ()
    lead_var = [var[BATCH]] if lead else []
    a_at = [*lead_var, var[M], var[K]]
    b_at = [*lead_var, var[K], var[N]] if roles.b_kn else [*lead_var, var[N], var[K]]
    if (not _at(stmt.reads[roles.a_index].region, a_at)
            or not _at(stmt.reads[roles.b_index].region, b_at)
            or _dims(a_buf) != (*lead, m, k) or _dims(c_buf) != (*lead, m, n)
            or _dims(b_buf) != ((*lead, k, n) if roles.b_kn else (*lead, n, k))
            or str(b_buf.dtype) != roles.in_dtype or roles.in_dtype not in INPUTS):
        return None, "not a GEMM of 16-bit inputs in (batch,) M, N, K form"
    consumers = [sch.get(b) for b in blocks[1:]]
    epilogue, why = extract(func, stmt, consumers, (var.get(BATCH), var[M], var[N]),
                            a_buf, b_buf)
    if epilogue is None:
        return None, why
    params = list(func.params)
    if not all(any(x.same_as(p) for p in params) for x in (a_buf, b_buf)):
        return None, "the GEMM's inputs are not parameters"
    order = []
    for p in params:
        name = next((key for key, x in (("A", a_buf), ("B", b_buf), ("C", params[-1]))
                     if p.same_as(x)), None)
        if name is None and not any(p.same_as(q) for q in epilogue.operands):
            return None, f"parameter {p.name} is neither read nor written by the kernel"
        order.append(name or p)
    shape = GemmShape(m, n, k, roles.in_dtype, epilogue.out_dtype, roles.b_kn, batch)
    if shape.out_dtype not in OUTPUTS or not tma_compatible(shape):
        return None, "output dtype or row alignment out of reach"
    return HopperTask(shape, epilogue, tuple(order)), None


def _at(region, vars_) -> bool:
    """Whether an access region is the single element at exactly `vars_`."""
    return len(region) == len(vars_) and all(
        r.min.same_as(v) and int(r.extent) == 1 for r, v in zip(region, vars_))


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

    def __init__(self, task: HopperTask, sms: int = SMS):
        self.task = task
        self.shape = task.shape
        self.sms = sms
        self._made = {}

    def program(self, func, decide):
        """The kernel for the decisions, under the task's function name (one object per
        configuration)."""
        cfg = self.decide(decide)
        if cfg not in self._made:
            t = self.task
            kernel = hopper_gemm(t.shape, cfg, t.epilogue, list(t.params), self.sms)
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
        persistent = decide.choice("wgmma.persistent", [False, True])
        if decide.fixed and "wgmma.cluster" not in decide.fixed:
            cluster = 1   # a candidate recorded before clusters: the kernel it measured
        else:
            cluster = decide.choice("wgmma.cluster", [c for c in CLUSTER
                                                      if -(-s.n // bn) % c == 0])
        cfg = HopperConfig(bm, bn, bk, stages, nc, raster, persistent, cluster)
        if decide.fixed and "wgmma.store" not in decide.fixed:
            return cfg    # a candidate recorded before TMA stores: registers, as built
        fits = store_fits(s) and problem_of(s, replace(cfg, store="tma")) is None
        return replace(cfg, store=decide.choice("wgmma.store", list(STORES[:1 + fits])))

    def apply(self, sch, decide) -> None:
        return None


def wgmma_sketches(task, target) -> list:
    """[WgmmaSketch] when the sketch applies to `task` on `target`, else []."""
    found = hopper_task(task.func, target)
    sms = int(target.config.get("sm_count", SMS))   # a persistent grid's size
    return [WgmmaSketch(found, sms)] if found is not None else []
