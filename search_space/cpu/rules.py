"""CPU (llvm) rules: which sketches a task gets, and the target's limit check.

Every task gets the unscheduled computation (the floor). A task with contractions
(reductions with data reuse: matmul, conv, dense) gets multi-level tiling, and a
variant that packs an operand into a blocked layout; a task of row reductions and
elementwise stages (softmax, layer norm, plain maps) gets the row-wise sketch.
Sketches are chosen by analysing the task's blocks, never by their names.
"""
from __future__ import annotations

import random

from ..analysis import (analyse, blocks, computes_conditionally, output_dtype, param_buffers,
                       vector_lanes)
from .limits import check_stack
from .common import CpuParams, consumer_chain, inline_candidates
from .packing import find_pack_plan
from .reduction import RowSketch, row_depth
from .tiling import TilePlan, TileSketch
from ..decisions import Decider
from ..sketch import DefaultSketch

def cpu_params(task, target) -> CpuParams:
    """Vector lanes of the task's dtype and the cores of the target (a TargetSpec)."""
    cores = int(target.config.get("num-cores", 1) or 1)
    return CpuParams(lanes=vector_lanes(target, output_dtype(task)), cores=max(1, cores))


def _tile_plans(sch, infos, packed: bool) -> tuple[TilePlan, ...] | None:
    params = param_buffers(sch)
    plans = []
    for info in infos:
        if not (info.is_contraction and info.loops_bound):
            continue
        pack = find_pack_plan(info, params) if packed else None
        # unpacked, the vector axis must stream through every operand as it is
        vec = pack.iter if pack else next((v.name for v in reversed(info.spatial)
                                           if v.extent > 1 and info.streams(v.name)), None)
        if vec is None:
            continue
        chain = consumer_chain(sch, sch.get_sblock(info.name))
        plans.append(TilePlan(info, vec, pack, chain))
    if not plans or (packed and not any(p.pack for p in plans)):
        return None
    return tuple(plans)


def _branchy_inputs(sch, plans) -> set[str]:
    """Producers with a branch (padding) read along a plan's vector axis: inlined,
    every vector load would carry the branch, so they are never inlined there."""
    out = set()
    for plan in plans:
        along = {a.buffer for a in plan.info.reads if plan.vec_iter in a.iters()}
        for producer in sch.get_producers(sch.get_sblock(plan.block)):
            stmt = sch.get(producer)
            if stmt.writes[0].source.name in along and computes_conditionally(sch, producer):
                out.add(stmt.name_hint)
    return out


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
                keep = frozenset(p.block for p in plans).union(*(p.chain for p in plans),
                                                              _branchy_inputs(sch, plans))
                found.append(TileSketch(name, plans, inline_candidates(sch, keep), params))
        if _rows_apply(infos):
            found.append(RowSketch(tuple(infos), inline_candidates(sch), params))
        return [DefaultSketch()] + [s for s in found if _applies(task, s)]

    def check(self, mod, target):
        """None when the module's stack buffers fit (see `limits.py`)."""
        return check_stack(mod)


RULES = CpuRules()
