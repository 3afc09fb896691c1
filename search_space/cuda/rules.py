"""CUDA rules: which sketches a task gets on a GPU, and the check of a scheduled module
against the target's limits.

Sketches (each schedules every block of the task, so every candidate is valid CUDA):
- `default` (`common.py`): each block fused, split and bound as written (no decisions);
- `simple` (`common.py`): elementwise producers inlined, thread count and unroll depth
  decided;
- `tile` (`tiling.py`): multi-level tiling with shared-memory staging for reductions
  with data reuse (matmul, convolution, batch matmul), when the task has one; in a
  chain of such reductions, where the producer runs is a decision (`chains.py`);
- `tensor_core` (`tensor_core.py`): GEMM-shaped reductions on fp16 / bf16 inputs (matmul,
  batch matmul, dense with its epilogue, implicit-GEMM convolution) on `mma.sync` with
  pipelined `cp.async` staging, on sm_80 and newer, when the task has one;
- `rows` / `rows_fused` (`reduction.py`): cross-thread reduction for row reductions
  (softmax, norms), as separate kernels or fused into the output kernel, when the task
  has them.

Every sketch has the uniform prior (`Sketch.prior`) except `tensor_core`: where it
applies, the same GEMM on the SIMT sketches runs on the FP32 pipes at a small fraction of
the tensor cores' throughput, so a search draws it several times as often as
each other sketch until it has measurements (`TensorCoreSketch.prior`). A first round is then mostly tensor-core
candidates while the SIMT sketches still get measured (and the race keeps one candidate
of each in every batch).
"""
from __future__ import annotations

from .analysis import classify
from .common import DefaultGpuSketch, SimpleGpuSketch, inline_spatial
from .limits import GpuLimits, check_module
from .reduction import FusedRowReductionSketch, RowReductionSketch, fusion_plan
from .split_reduction import split_reduction_sketches
from .tensor_core import TensorCoreSketch, tensor_core_blocks
from .tiling import TiledGpuSketch, can_tile, tile_roles

class CudaRules:
    """The CUDA rule set (see the module docstring)."""

    def sketches(self, task, target) -> list:
        from tvm import s_tir

        limits = GpuLimits.of(target)
        out = [DefaultGpuSketch(limits), SimpleGpuSketch(limits)]
        sch = s_tir.Schedule(task.mod)
        roles = classify(sch)
        if any(can_tile(sch, sch.get_sblock(n)) for n in tile_roles(sch).tiled):
            out.append(TiledGpuSketch(limits))
        if tensor_core_blocks(sch, target):
            out.append(TensorCoreSketch(limits, target))
        out += split_reduction_sketches(task, limits)
        if roles.rows:
            out.append(RowReductionSketch(limits))
            inline_spatial(sch, roles.spatial)
            if fusion_plan(sch) is not None:
                out.append(FusedRowReductionSketch(limits))
        return out

    def check(self, mod, target) -> str | None:
        """None when every kernel of `mod` fits the target's limits, else the reason."""
        return check_module(mod, target)


RULES = CudaRules()
