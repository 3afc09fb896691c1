"""CPU (llvm) rules: which sketches a task gets, and the target's limit check.

Every task gets the unscheduled computation (the floor). A task with contractions
(reductions with data reuse: matmul, conv, dense) gets multi-level tiling, and a
variant that packs an operand into a blocked layout (`tiling.py`); a task of row
reductions and elementwise stages (softmax, layer norm, plain maps) gets the row-wise
sketch (`reduction.py`), and one whose row statistics allow it (softmax, layer norm)
also the row-wise sketch of their one-pass form (`one_pass_rows.py`). Sketches are
chosen by analysing the task's blocks, never by their names.
"""
from __future__ import annotations

import random

from ..analysis import analyse
from ..blocks import blocks
from ..decisions import Decider
from ..sketch import DefaultSketch
from .common import CpuParams
from .general import general_sketches
from .limits import check_stack
from .microkernel import microkernel_sketches
from .one_pass_rows import one_pass_sketches
from .reduction import row_sketches
from .split_reduction import split_reduction_sketches
from .tiling import tile_sketches

# What each sketch family offers a task: f(unscheduled schedule, its blocks' analyses,
# CpuParams) -> the sketches that fit. A new CPU sketch adds its finder here.
SKETCH_FINDERS = (tile_sketches, microkernel_sketches, row_sketches, one_pass_sketches,
                  split_reduction_sketches, general_sketches)


def _applies(task, sketch) -> bool:
    """Whether the sketch schedules this task for some decisions (tried a few times:
    rules are generic, and a program they do not fit is simply not offered them)."""
    import tvm
    from tvm import s_tir

    rng = random.Random(0)
    for _ in range(4):
        decide = Decider(rng=rng, strict=False)
        try:
            sch = s_tir.Schedule(tvm.IRModule({"main": sketch.program(task.func, decide)}))
            sketch.apply(sch, decide)
            return True
        except Exception:  # noqa: BLE001 - any refusal means "not this sketch"
            continue
    return False


class CpuRules:
    """The CPU rule set (see the module docstring)."""

    def sketches(self, task, target):
        from tvm import s_tir

        params = CpuParams.of(task, target)
        sch = s_tir.Schedule(task.mod)
        infos = [analyse(sch, b) for b in blocks(sch)]
        found = [s for find in SKETCH_FINDERS for s in find(sch, infos, params)]
        return [DefaultSketch()] + [s for s in found if _applies(task, s)]

    def check(self, mod, target):
        """None when the module's stack buffers fit (see `limits.py`)."""
        return check_stack(mod)


RULES = CpuRules()
