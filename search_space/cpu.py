"""CPU (llvm) rules: which sketches a task gets, and the target's limit check.

Every task gets the unscheduled computation (the floor). A task with contractions
(reductions with data reuse: matmul, conv, dense) gets multi-level tiling, and a
variant that packs an operand into a blocked layout; a task of row reductions and
elementwise stages (softmax, layer norm, plain maps) gets the row-wise sketch. The sketches
are chosen by analysing the task's blocks, never by their names.
"""
from __future__ import annotations

import random

from .analysis import analyse, blocks, output_dtype, param_buffers, vector_lanes
from .cpu_common import CpuParams, consumer_chain, inline_candidates
from .cpu_packing import find_pack_plan
from .cpu_rows import RowSketch, row_depth
from .cpu_tiling import TilePlan, TileSketch
from .decisions import Decider
from .sketch import DefaultSketch

# A register tile wider than this many bytes of locals is a stack hazard in the
# runtime's worker threads; `check` rejects modules that allocate more on the stack.
_MAX_LOCAL_BYTES = 1 << 20


def cpu_params(task, target) -> CpuParams:
    cores = int(target.config.get("num-cores", 1) or 1)
    return CpuParams(lanes=vector_lanes(target, output_dtype(task)), cores=max(1, cores))


def _tile_plans(sch, infos, packed: bool) -> tuple[TilePlan, ...] | None:
    params = param_buffers(sch)
    plans = []
    for info in infos:
        if not (info.is_contraction and info.loops_bound):
            continue
        pack = find_pack_plan(info, params) if packed else None
        vec = pack.iter if pack else next((v.name for v in reversed(info.spatial)
                                           if v.extent > 1), None)
        if vec is None:
            continue
        chain = consumer_chain(sch, sch.get_sblock(info.name))
        plans.append(TilePlan(info, vec, pack, chain))
    if not plans or (packed and not any(p.pack for p in plans)):
        return None
    return tuple(plans)


def _rows_apply(infos) -> bool:
    """Row-wise schedules fit programs of row reductions and elementwise stages with
    one output that has an outer loop to parallelise and an inner one to vectorise."""
    outs = [i for i in infos if i.is_output]
    if len(outs) != 1 or not all(i.loops_bound for i in infos):
        return False
    if any(i.is_contraction for i in infos):
        return False
    return row_depth(infos, outs[0]) >= 1


def _applies(task, sketch) -> bool:
    """Whether the sketch schedules this task for some decisions (tried a few times:
    rules are generic, and a program they do not fit is simply not offered them)."""
    from tvm import s_tir

    rng = random.Random(0)
    for _ in range(4):
        sch = s_tir.Schedule(task.mod)
        try:
            sketch.apply(sch, Decider(rng=rng, strict=False))
            return True
        except Exception:  # noqa: BLE001 - any refusal means "not this sketch"
            continue
    return False


class CpuRules:
    """The CPU rule set (see the module docstring)."""

    def sketches(self, task, target):
        from tvm import s_tir

        params = cpu_params(task, target)
        sch = s_tir.Schedule(task.mod)
        infos = [analyse(sch, b) for b in blocks(sch)]
        found = []
        for name, packed in (("tile", False), ("tile_pack", True)):
            plans = _tile_plans(sch, infos, packed)
            if plans:
                keep = frozenset(p.block for p in plans).union(*(p.chain for p in plans))
                found.append(TileSketch(name, plans, inline_candidates(sch, keep), params))
        if _rows_apply(infos):
            found.append(RowSketch(tuple(infos), inline_candidates(sch), params))
        return [DefaultSketch()] + [s for s in found if _applies(task, s)]

    def check(self, mod, target):
        from tvm.s_tir.analysis import calculate_allocated_bytes

        for name, func in mod.functions.items():
            sizes = calculate_allocated_bytes(func)
            local = sizes.get("local", 0) if hasattr(sizes, "get") else 0
            if int(local) > _MAX_LOCAL_BYTES:
                return f"{name}: {int(local)} bytes of local buffers (limit {_MAX_LOCAL_BYTES})"
        return None


RULES = CpuRules()
