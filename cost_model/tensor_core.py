"""Tensor-core features of a scheduled program: what the store-based features cannot see,
because a tensorized block computes through intrinsic calls, not stores.

Per program (0 for a schedule without tensor cores):
- mma_per_thread: `mma.sync` instructions one thread issues (the calls times the serial
  loop extents around them); mma_per_block: the same times the threads of a block;
- ldmatrix_per_thread: fragment loads per thread (their ratio to the mma count is the
  register tile's reuse);
- warps: warps per block (threadIdx.y x threadIdx.z x threadIdx.x / 32);
- stages: the software pipeline depth of the main loop (its largest stage + 1);
  async: whether its copies are asynchronous (cp.async);
- smem_pipelined: shared memory of the chunks the pipelined loop stages (the elements
  its copies write per iteration) times the stages: the footprint the pipeline really
  allocates (row padding aside), which caps occupancy.

All as log2(1 + x).
"""
from __future__ import annotations

import math

from .ir_walk import StmtWalker, int_extent

NAMES = ("mma_per_thread", "mma_per_block", "ldmatrix_per_thread", "warps", "stages",
         "async", "smem_pipelined")
_MMA, _LDMATRIX = "tirx.ptx_legacy.mma", "tirx.ptx_legacy.ldmatrix"


def _lg(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


class _Count(StmtWalker):
    """The walk's context: `repeat`, how often the statement runs per thread (the serial
    loop extents around it); `stage_factor`, the pipeline depth around it; `chunk`, the
    iterations of the loops inside the pipelined loop so far (0 outside it): a shared
    store there fills `chunk` elements of one stage's buffer."""

    def __init__(self):
        self.calls = {_MMA: 0, _LDMATRIX: 0}
        self.threads: dict[str, int] = {}
        self.stages = 0
        self.async_ = 0
        self.smem = 0

    def store(self, s, repeat: int, stage_factor: int, chunk: int) -> None:
        if chunk and str(s.buffer.scope()).startswith("shared"):
            dt = s.buffer.dtype
            self.smem += chunk * stage_factor * max(1, int(dt.bits) * int(dt.lanes) // 8)

    def evaluate(self, s, repeat: int, stage_factor: int, chunk: int) -> None:
        if type(s.value).__name__ == "Call":
            op = str(s.value.op.name)
            if op in self.calls:
                self.calls[op] += repeat

    def loop(self, s, repeat: int, stage_factor: int, chunk: int) -> None:
        extent = int_extent(s)
        chunk = chunk * extent
        if s.thread_binding is not None:
            tag = str(s.thread_binding.thread_tag)
            if tag.startswith("threadIdx"):
                self.threads[tag] = max(self.threads.get(tag, 1), extent)
            self.stmt(s.body, repeat, stage_factor, chunk)
            return
        stages = s.annotations.get("software_pipeline_stage")
        if stages is not None:
            depth = max(int(x) for x in stages) + 1
            self.stages = max(self.stages, depth)
            self.async_ = max(self.async_, int("software_pipeline_async_stages" in s.annotations))
            stage_factor, chunk = depth, 1
        self.stmt(s.body, repeat * extent, stage_factor, chunk)


def tensor_core_vector(mod) -> list[float]:
    """The features of `mod["main"]` named by `NAMES`."""
    c = _Count()
    c.stmt(mod["main"].body, 1, 1, 0)
    mma = c.calls[_MMA]
    if not mma:
        return [0.0] * len(NAMES)
    threads = 1
    for ext in c.threads.values():
        threads *= ext
    return [_lg(mma), _lg(mma * threads), _lg(c.calls[_LDMATRIX]), _lg(threads // 32),
            _lg(c.stages), float(c.async_), _lg(c.smem)]
