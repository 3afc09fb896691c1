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
- `wgmma` (`hopper_gemm_sketch.py`): on sm_90a only, a task that is one 16-bit GEMM (or
  batch GEMM) and an elementwise epilogue of its output (bias, activation, cast,
  residual), as an instance of the Hopper kernel template (wgmma fed by TMA,
  warp-specialised, persistent or not, clusters of 2 with A multicast, TMA store or not);
- `simt_gemm` (`simt_gemm.py`): GEMM-shaped fp32 reductions on the FP32 pipes, thread
  tiles register-blocked, A stored transposed in shared memory, float4 global and shared
  loads, the next K tile loaded into registers while the current one computes, and
  (a decision) two shared copies with one barrier a K step (`simt_gemm_pipeline.py`);
- `rows` / `rows_fused` (`reduction.py`): cross-thread reduction for row reductions
  (softmax, norms), as separate kernels or fused into the output kernel, when the task
  has them;
- `rows_onchip` (`rows_onchip.py`, `rows_one_pass.py`): every row reduction inside the
  output kernel, a warp (or a block) per row and several rows per block, 128-bit loads,
  the row staged once in shared memory or kept in registers (`rows_registers.py`), and
  the statistics in one pass (online softmax, shifted sums) where the math allows.

Every sketch has the uniform prior (`Sketch.prior`) except the tensor-core ones
(`tensor_core`, `wgmma`, the same prior): where they
apply, the same GEMM on the SIMT sketches runs on the FP32 pipes at a small fraction of
the tensor cores' throughput, so a search draws them several times as often as
each other sketch until they have measurements (`TensorCoreSketch.prior`). A first round is then mostly tensor-core
candidates while the SIMT sketches still get measured (and the race keeps one candidate
of each in every batch).
"""
from __future__ import annotations

from .analysis import classify
from .hopper_gemm_sketch import is_tirx, wgmma_sketches
from .common import DefaultGpuSketch, SimpleGpuSketch, inline_spatial
from .limits import GpuLimits, check_module
from .reduction import FusedRowReductionSketch, RowReductionSketch, fusion_plan
from .rows_onchip import onchip_sketches
from .simt_gemm import SimtGemmSketch, simt_gemm_blocks
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
        out += wgmma_sketches(task, target)   # sm_90a only (hopper_gemm_sketch.py)
        out += [SimtGemmSketch(limits)] if simt_gemm_blocks(sch) else []
        out += split_reduction_sketches(task, limits)
        if roles.rows:
            out.append(RowReductionSketch(limits))
            inline_spatial(sch, roles.spatial)
            if fusion_plan(sch) is not None:
                out.append(FusedRowReductionSketch(limits))
        out += onchip_sketches(sch, limits)
        return out

    def check(self, mod, target) -> str | None:
        """None when every kernel of `mod` fits the target's limits, else the reason."""
        if is_tirx(mod):   # the Hopper GEMM: built to fit (hopper_gemm.config_problem)
            return None
        return check_module(mod, target)


RULES = CudaRules()
