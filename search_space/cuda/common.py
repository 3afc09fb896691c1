"""Schedule steps shared by the CUDA sketches: inlining, thread binding of a whole
block, unroll annotations; and the two sketches built only from them: `default`
(every block fused, split and bound, no decisions) and `simple` (the same after
inlining, with the thread count and unroll depth as decisions). `reference_schedule`
is the default's schedule as a plain module, what the correctness reference runs on
the device."""
from __future__ import annotations

from ..blocks import blocks
from ..decisions import Decider
from ..sketch import Sketch
from .analysis import SPATIAL, classify, loop_kinds
from .limits import GpuLimits

DEFAULT_THREADS = 256
UNROLL_STEPS = (0, 16, 64, 512)


def thread_options(limits: GpuLimits) -> tuple[int, ...]:
    """Thread counts per block to choose from: the warp size doubled up to the limit."""
    opts, t = [], limits.warp_size
    while t <= limits.max_threads_per_block:
        opts.append(t)
        t *= 2
    return tuple(opts)


def try_inline(sch, name: str) -> bool:
    """compute_inline the named block when TVM allows it (a block that cannot be inlined,
    such as one whose result is read at different points, stays as it is)."""
    try:
        sch.compute_inline(sch.get_sblock(name))
        return True
    except Exception:  # TVM refuses: the block keeps its own loops
        return False


def inline_spatial(sch, names) -> None:
    """Inline the named spatial producers, consumers last first so chains collapse."""
    for name in reversed(list(names)):
        if _exists(sch, name):
            try_inline(sch, name)


def _exists(sch, name: str) -> bool:
    try:
        sch.get_sblock(name)
        return True
    except Exception:  # removed by an earlier inline
        return False


def fold_consumers(sch, block) -> None:
    """Fold the chain of single consumers after `block` into it (a padding's slice, the
    reindex copy, bias, activation, casts) until one does not fold (it reads the output
    at other points, or is another reduction: it stays its own kernel)."""
    from tvm.s_tir.schedule import ScheduleError

    for _ in range(16):
        consumers = sch.get_consumers(block)
        if len(consumers) != 1:
            return
        try:
            sch.reverse_compute_inline(consumers[0])
        except ScheduleError:
            return


def is_bound(sch, block) -> bool:
    return any(sch.get(lp).thread_binding is not None for lp in sch.get_loops(block))


def annotate_unroll(sch, loop, steps: int) -> None:
    """Ask the lowering to unroll loops below `loop` up to `steps` iterations, in the
    generated code (explicit) rather than by a pragma to nvcc."""
    if steps > 0:
        sch.annotate(loop, "pragma_auto_unroll_max_step", steps)
        sch.annotate(loop, "pragma_unroll_explicit", 1)


def spatial_outer(sch, block) -> tuple[list, list]:
    """The block's spatial loops moved outside its other loops; (spatial, rest)."""
    loops = sch.get_loops(block)
    kinds = loop_kinds(sch, block)
    sp = [lp for lp, k in zip(loops, kinds) if k == SPATIAL]
    rest = [lp for lp, k in zip(loops, kinds) if k != SPATIAL]
    first_rest = next((i for i, k in enumerate(kinds) if k != SPATIAL), len(kinds))
    if SPATIAL in kinds[first_rest:]:
        sch.reorder(*sp, *rest)
    return sp, rest


def bind_block(sch, block, threads: int, unroll: int = 0):
    """Fuse the block's spatial loops, split by `threads`, bind blockIdx.x/threadIdx.x;
    reduction loops run serially inside each thread. Returns the blockIdx loop."""
    sp, _ = spatial_outer(sch, block)
    if not sp:
        sp = [sch.add_unit_loop(block)]
    fused = sch.fuse(*sp) if len(sp) > 1 else sp[0]
    extent = int(sch.get(fused).extent)
    bx, tx = sch.split(fused, [None, max(1, min(threads, extent))])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    annotate_unroll(sch, bx, unroll)
    return bx


def bind_unbound(sch, limits: GpuLimits, decide: Decider | None) -> None:
    """Bind every top-level block not yet bound; the thread count is a decision when a
    decider is given, else DEFAULT_THREADS."""
    for b in blocks(sch):
        if is_bound(sch, b):
            continue
        name = sch.get(b).name_hint
        if decide is None:
            bind_block(sch, b, min(DEFAULT_THREADS, limits.max_threads_per_block))
            continue
        threads = decide.choice(f"{name}.threads", thread_options(limits))
        unroll = decide.choice(f"{name}.unroll", UNROLL_STEPS)
        bind_block(sch, b, threads, unroll)


class DefaultGpuSketch(Sketch):
    """The computation as written, made valid CUDA: each block is one kernel with its
    spatial loops spread over blocks of DEFAULT_THREADS threads. No decisions."""

    name = "default"

    def __init__(self, limits: GpuLimits):
        self.limits = limits

    def apply(self, sch, decide: Decider) -> None:
        bind_unbound(sch, self.limits, None)


def reference_schedule(mod, limits: GpuLimits):
    """`mod` made valid CUDA in the plainest way, the `default` sketch's schedule: each
    block its own kernel, its spatial loops fused over blockIdx.x / threadIdx.x, its
    reductions serial in each thread. Nothing is inlined or reordered across blocks,
    so every value is computed by the same arithmetic as the unscheduled function."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    bind_unbound(sch, limits, None)
    return sch.mod


class SimpleGpuSketch(Sketch):
    """Elementwise producers inlined, then each block bound like the default with its
    thread count and unroll depth as decisions."""

    name = "simple"

    def __init__(self, limits: GpuLimits):
        self.limits = limits

    def apply(self, sch, decide: Decider) -> None:
        inline_spatial(sch, classify(sch).spatial)
        bind_unbound(sch, self.limits, decide)


# a function attribute naming the TVM pipeline (`tvm.compile(tir_pipeline=...)`) the CUDA
# builder compiles its module with (autosched/measure/cuda/compiler.py)
PIPELINE_ATTR = "autosched.tir_pipeline"
