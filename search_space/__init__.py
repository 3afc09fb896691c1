"""Our own search space: sketch rules per target; a sketch + decisions -> a schedule.

Public surface: `generate_space(task, target)`, `SearchSpace`, `Candidate`, `Decider`,
`InvalidCandidate`, `SPACE_VERSION`, `vector_lanes` (a CPU target's SIMD lanes).

Layout: the target-independent pieces sit here (`space.py`: the space and the table
from target kind to rule set; `sketch.py`: the Sketch and RuleSet interfaces;
`candidate.py`, `decisions.py`; `blocks.py` and `analysis.py`: what a block of the
task is; `tir.py`: reading TIR; `fast_math.py`: the fast-math rewrite). Each target's
rule set is a sub-package, `cpu/` and `cuda/`, with the same file for the same job:
`rules.py` (which sketches a task gets), `tiling.py`, `reduction.py`, `common.py`
(shared schedule steps) and `limits.py` (the check of a scheduled module). This
package imports nothing from `autosched`.
"""
from .candidate import Candidate
from .decisions import Decider, InvalidCandidate
from .cpu.lanes import vector_lanes
from .cuda.mma_intrin import import_tvm_intrinsics
from .space import SPACE_VERSION, SearchSpace, generate_space

__all__ = ["Candidate", "Decider", "InvalidCandidate", "SearchSpace", "generate_space",
           "SPACE_VERSION", "vector_lanes", "import_tvm_intrinsics"]
