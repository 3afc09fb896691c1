"""The limits of a CUDA target and the check of a scheduled module against them.

`check_module` lowers the module the way the CUDA build does (up to the host/device
split) and measures every kernel: threads per block and per dimension, shared memory,
virtual threads, vector width. It names the first limit a kernel breaks in words a
user can act on, and finally asks TVM's own `verify_gpu_code` as a second opinion.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..tir import iter_nodes
from .lowering import is_kernel_launch, kernel_roots, lower_for_check

# What every NVIDIA GPU since Kepler allows; the target config can only tighten the
# per-block totals (max_num_threads, max_shared_memory_per_block).
_THREAD_DIM_MAX = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}
_GRID_DIM_MAX = {"blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}
MAX_VTHREAD = 8            # more virtual threads only multiplies code size
MAX_VECTOR_BYTES = 16      # the widest CUDA load/store (float4)
MAX_LOCAL_BYTES = 512 * 1024  # per-thread local memory the hardware allows


@dataclass(frozen=True)
class GpuLimits:
    """Per-block limits of a CUDA target, read from its config."""

    max_threads_per_block: int = 1024
    max_shared_memory_per_block: int = 49152
    warp_size: int = 32
    max_vthread: int = MAX_VTHREAD
    max_vector_bytes: int = MAX_VECTOR_BYTES
    # dynamic shared memory a kernel may opt in to (cudaFuncAttributeMaxDynamicShared-
    # MemorySize); static `__shared__` arrays stay within the 48 KiB above
    max_dynamic_shared_memory_per_block: int = 49152
    registers_per_block: int = 65536

    @staticmethod
    def of(target) -> GpuLimits:
        cfg = target.config
        static = int(cfg.get("max_shared_memory_per_block", 49152))
        return GpuLimits(int(cfg.get("max_num_threads", 1024)), static,
                         int(cfg.get("thread_warp_size", 32)),
                         max_dynamic_shared_memory_per_block=max(static, int(
                             cfg.get("max_dynamic_shared_memory_per_block", static))),
                         registers_per_block=int(cfg.get("registers_per_block", 65536)))

    def verify_gpu_code_constraints(self) -> dict:
        """The constraint dict of `tvm.s_tir.analysis.verify_gpu_code` (0.27 keys)."""
        return {
            "max_threads_per_block": self.max_threads_per_block,
            # static and dynamic together; the static part alone is checked before
            "max_shared_memory_per_block": max(self.max_shared_memory_per_block,
                                               self.max_dynamic_shared_memory_per_block),
            "max_local_memory_per_block": MAX_LOCAL_BYTES,
            "max_thread_x": _THREAD_DIM_MAX["threadIdx.x"],
            "max_thread_y": _THREAD_DIM_MAX["threadIdx.y"],
            "max_thread_z": _THREAD_DIM_MAX["threadIdx.z"],
            "max_vthread": self.max_vthread,
            "max_vector_bytes": self.max_vector_bytes,
        }


@dataclass
class KernelUsage:
    """What one kernel of a lowered function asks of the hardware."""

    extents: dict = field(default_factory=dict)   # thread tag -> extent
    shared_bytes: int = 0          # static `__shared__` arrays
    dynamic_shared_bytes: int = 0  # `shared.dyn`: one extern array, sized at launch
    vector_bytes: int = 0
    global_allocs: tuple = ()   # buffers a kernel would have to allocate in DRAM
    foreign_on_chip: tuple = ()  # shared / local buffers it uses but does not allocate

    @property
    def threads(self) -> int:
        n = 1
        for tag, ext in self.extents.items():
            if tag.startswith("threadIdx"):
                n *= ext
        return n


def _bytes(dtype) -> int:
    return (int(dtype.bits) * int(dtype.lanes) + 7) // 8


def _buffer_bytes(buf) -> int:
    n = 1
    for s in buf.shape:
        n *= int(s)
    return n * _bytes(buf.dtype)


def _expr_dtype(node):
    from tvm.ir import PrimType

    ty = getattr(node, "ty", None) if hasattr(type(node), "ty") else None
    return ty.dtype if isinstance(ty, PrimType) else None


def kernel_usage(func) -> list[KernelUsage]:
    """Usage of every kernel of a function lowered by `lower_for_check`."""
    from tvm import tirx

    out = []
    for root in kernel_roots(func.body):
        use = KernelUsage()
        allocated, used = set(), {}
        for node in iter_nodes(root):
            if is_kernel_launch(node):
                tag = str(node.node.thread_tag)
                use.extents[tag] = max(use.extents.get(tag, 1), int(node.value))
            elif isinstance(node, tirx.AllocBuffer):
                allocated.add(node.buffer.__chandle__())
                scope = str(node.buffer.scope())
                if scope == "shared.dyn":
                    use.dynamic_shared_bytes += _buffer_bytes(node.buffer)
                elif scope.startswith("shared"):
                    use.shared_bytes += _buffer_bytes(node.buffer)
                elif scope == "global":
                    use.global_allocs += (str(node.buffer.name),)
            elif isinstance(node, tirx.BufferStore) or type(node).__name__ == "TensorLoad":
                dt = _expr_dtype(node.value if isinstance(node, tirx.BufferStore) else node)
                if dt is not None and int(dt.lanes) > 1:
                    use.vector_bytes = max(use.vector_bytes, _bytes(dt))
                buf = node.buffer if isinstance(node, tirx.BufferStore) else node.source
                if str(buf.scope()).startswith(("shared", "local")):
                    used.setdefault(buf.__chandle__(), str(buf.name))
            if isinstance(node, tirx.DeclBuffer):   # a view declared inside the kernel
                allocated.add(node.buffer.__chandle__())
        use.foreign_on_chip = tuple(sorted({n for h, n in used.items() if h not in allocated}))
        out.append(use)
    return out


def _bindings(mod):
    """(block name, virtual threads above it, whether a thread is bound above it) for
    every block of a scheduled module but the root."""
    from tvm import s_tir, tirx

    out, stack = [], [(mod["main"].body, 1, False, 0)]
    while stack:
        node, vt, bound, depth = stack.pop()
        if isinstance(node, tirx.For) and node.thread_binding is not None:
            tag = str(node.thread_binding.thread_tag)
            if tag.startswith("vthread"):
                vt *= int(node.extent)
            else:
                bound = True
        if isinstance(node, s_tir.SBlockRealize):
            if depth > 0:
                out.append((str(node.block.name_hint), vt, bound))
            depth += 1
        for child in _stmt_children(node):
            stack.append((child, vt, bound, depth))
    return out


def max_vthreads(mod) -> int:
    """The most virtual threads nested above one block of a scheduled module (they
    disappear in lowering, so they are counted before it)."""
    return max([vt for _, vt, _ in _bindings(mod)] or [1])


def host_blocks(mod) -> list[str]:
    """Blocks with no GPU thread bound above them: code that would run on the host and
    touch device memory there."""
    return sorted({name for name, _, bound in _bindings(mod) if not bound})


def _stmt_children(node):
    from tvm import s_tir, tirx

    if isinstance(node, tirx.SeqStmt):
        return list(node.seq)
    if isinstance(node, (tirx.For, tirx.AttrStmt, tirx.While)):
        return [node.body]
    if isinstance(node, tirx.IfThenElse):
        return [s for s in (node.then_case, node.else_case) if s is not None]
    if isinstance(node, s_tir.SBlockRealize):
        return [node.block]
    if isinstance(node, s_tir.SBlock):
        return [s for s in (node.init, node.body) if s is not None]
    return []


def usage_violation(k: int, use: KernelUsage, limits: GpuLimits) -> str | None:
    """The first limit kernel number `k` breaks, in words; None when it fits."""
    where = f"kernel {k}"
    if use.threads > limits.max_threads_per_block:
        dims = " x ".join(f"{t}={e}" for t, e in sorted(use.extents.items())
                          if t.startswith("threadIdx"))
        return (f"{where} uses {use.threads} threads per block ({dims}); "
                f"the target allows {limits.max_threads_per_block}")
    for tag, ext in sorted(use.extents.items()):
        cap = _THREAD_DIM_MAX.get(tag) or _GRID_DIM_MAX.get(tag)
        if cap is not None and ext > cap:
            return f"{where} binds {ext} to {tag}; the hardware allows {cap}"
    if use.global_allocs:
        return (f"{where} allocates {', '.join(use.global_allocs)} in global memory, "
                "which a kernel cannot do (a buffer computed inside a kernel must be "
                "shared or local)")
    if use.foreign_on_chip:
        return (f"{where} uses {', '.join(use.foreign_on_chip)} in on-chip memory that it "
                "does not allocate: shared and local memory live only as long as their "
                "kernel, so another kernel cannot hand them over")
    if use.shared_bytes > limits.max_shared_memory_per_block:
        return (f"{where} uses {use.shared_bytes} bytes of shared memory per block; "
                f"the target allows {limits.max_shared_memory_per_block}")
    if use.dynamic_shared_bytes + use.shared_bytes > limits.max_dynamic_shared_memory_per_block:
        return (f"{where} uses {use.dynamic_shared_bytes} bytes of dynamic shared memory "
                f"(and {use.shared_bytes} static) per block; the target allows "
                f"{limits.max_dynamic_shared_memory_per_block} in all")
    if use.vector_bytes > limits.max_vector_bytes:
        return (f"{where} uses {use.vector_bytes}-byte vector accesses; "
                f"the widest is {limits.max_vector_bytes}")
    return None


def check_module(mod, target) -> str | None:
    """None when every kernel of the scheduled `mod` fits `target` (a cuda TargetSpec),
    else the first reason it does not."""
    from tvm.s_tir.analysis import verify_gpu_code

    limits = GpuLimits.of(target)
    unbound = host_blocks(mod)
    if unbound:
        what = "block " + unbound[0] + " is" if len(unbound) == 1 else \
            "blocks " + ", ".join(unbound) + " are"
        return f"{what} not bound to GPU threads (would run on the host)"
    vt = max_vthreads(mod)
    if vt > limits.max_vthread:
        return f"{vt} virtual threads above one block; at most {limits.max_vthread}"
    try:
        func = lower_for_check(mod, target.tvm())
    except Exception as e:  # a lowering pass refused the schedule
        return "does not lower for CUDA: " + _first_line(str(e))
    kernels = kernel_usage(func)
    if not kernels:
        return "no kernel: no loop is bound to blockIdx/threadIdx"
    for k, use in enumerate(kernels):
        reason = usage_violation(k, use, limits)
        if reason:
            return reason
    if not verify_gpu_code(func, limits.verify_gpu_code_constraints()):
        return "TVM's verify_gpu_code rejects the lowered kernel (limits: " \
               + ", ".join(f"{k}={v}" for k, v in limits.verify_gpu_code_constraints().items()) + ")"
    return None


def _first_line(text: str) -> str:
    """The most telling line of a TVM error: its last non-empty line, which carries the
    message (the lines above are the traceback)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:400] if lines else "unknown error"
