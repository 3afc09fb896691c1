"""Tensor-core intrinsics for the tensor-core sketch: warp-level m16n16k16 tiles made of
two `mma.sync.m16n8k16` instructions, fragments loaded from shared memory with
`ldmatrix`, accumulators zeroed and stored per 16 x 16 tile.

TVM 0.27 registers such intrinsics for fp16 (and int8, fp8) but not for bf16; these are
our own, one generator for both 16-bit input types, so the sketch names one family for
every dtype it supports. Each intrinsic is a TVMScript pair: the description (the scalar
computation `tensorize` matches, also what the CPU check of a schedule runs in place of
the instruction) and the implementation (the PTX the CUDA code generator emits).

Fragment layout (32 threads x 8 values per 16 x 16 tile; scopes: see FRAG_SCOPE): element (i, j)
of a tile lives in thread 4 * (i % 8) + (j % 8) // 2, slot 4 * (j // 8) + 2 * (i // 8) +
j % 2 -- the register layout `ldmatrix` fills and `mma.sync` reads (PTX ISA, "Matrix
fragments for mma.m16n8k16").

`intrin_names(in_dtype, acc_dtype, b_kn)` registers (once per process) and returns the
five names the sketch tensorizes with.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass

WARP = 32
TILE = 16                  # m = n = k of one warp-level tile
SLOTS = TILE * TILE // WARP  # values per thread per tile
INPUT_DTYPES = ("float16", "bfloat16")
PTX_TYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
# The scope of every fragment (A, B and the accumulators). Lowering
# (TransformMmaBufferLayout) turns a buffer of this scope whose last two dimensions are
# 32 x 8 blocks into 8 registers per thread per block -- exactly our fragments' layout --
# and the intrinsics, the only code touching fragments, address each thread's own
# registers (offset / 32). "warp" scope goes through LowerWarpMemory instead, which in
# TVM 0.27 leaves ldmatrix-written buffers whole in every thread (local memory) and
# turns unrolled accumulator offsets into divisions nvcc cannot fold (local memory again).
FRAG_SCOPE = "m16n8k8.matrixA"
# The output tiles the accumulators are staged in (one 16 x 16 tile per warp): static
# shared memory, apart from the dynamic pipeline buffers. In dynamic shared memory the
# tiles would be merged into the pipeline's space (MergeSharedMemoryAllocations reuses it
# by liveness, without a barrier), where one warp's write-back would race another's last
# fragment loads; per warp they take at most 8 KiB, well inside the static 48 KiB.
OUT_SCOPE = "shared"


def fragment_slot(i, j):
    """(thread, slot) holding element (i, j) of a 16 x 16 tile (see the module docstring)."""
    return 4 * (i % 8) + (j % 8) // 2, 4 * (j // 8) + 2 * (i // 8) + j % 2


def _slot_element(tx, slot):
    """The inverse of `fragment_slot`: (i, j) of the element in thread `tx`, `slot`."""
    return 8 * (slot % 4 // 2) + tx // 4, 8 * (slot // 4) + 2 * (tx % 4) + slot % 2


@dataclass(frozen=True)
class MmaIntrinsics:
    """The names of one dtype family's intrinsics."""

    load_a: str
    load_b: str
    compute: str
    fill: str
    store: str


def _ldmatrix(dtype: str, operand: str, trans: bool):
    """Shared 16 x 16 tile -> fragment. A is read as [m, k]; B as [k, n] (`trans`
    False) or [n, k] (True). The fragment always holds the tile in (row, col) order
    of the mma operand: A as [m, k], B as [n, k] ("col" layout)."""
    from tvm.script import tirx as T

    # ldmatrix transposes 8x8 blocks when the stored rows are not the fragment's rows
    transpose = (operand == "B") != trans
    # fragment coordinates of stored element (r, c)
    to_frag = (lambda r, c: (c, r)) if transpose else (lambda r, c: (r, c))

    def row_offset(tx, stride):
        # which stored row thread tx points ldmatrix at (x4: four 8x8 matrices); the
        # four matrices lie in another order when B is stored [n, k]
        if not trans:
            return stride * (tx % 16) + 8 * (tx // 16)
        return stride * (8 * (tx // 16) + tx % 8) + 8 * ((tx % 16) // 8)

    @T.prim_func(s_tir=True)
    def desc(frag_h: T.handle, smem_h: T.handle) -> None:
        smem = T.match_buffer(smem_h, (TILE, TILE), dtype, align=64, offset_factor=TILE,
                              scope="shared.dyn")
        frag = T.match_buffer(frag_h, (WARP, SLOTS), dtype, align=64, offset_factor=TILE,
                              scope=FRAG_SCOPE)
        with T.sblock("root"):
            T.reads(smem[0:TILE, 0:TILE])
            T.writes(frag[0:WARP, 0:SLOTS])
            for r, c in T.grid(TILE, TILE):
                with T.sblock("load"):
                    vr, vc = T.axis.remap("SS", [r, c])
                    fi, fj = T.meta_var(to_frag(vr, vc))
                    tx, slot = T.meta_var(fragment_slot(fi, fj))
                    T.reads(smem[vr, vc])
                    T.writes(frag[tx, slot])
                    frag[tx, slot] = smem[vr, vc]

    @T.prim_func(s_tir=True)
    def impl(frag_h: T.handle, smem_h: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        smem = T.match_buffer(smem_h, (TILE, TILE), dtype, align=64, offset_factor=TILE,
                              scope="shared.dyn", strides=[s0, s1])
        frag = T.match_buffer(frag_h, (WARP, SLOTS), dtype, align=64, offset_factor=TILE,
                              scope=FRAG_SCOPE)
        with T.sblock("root"):
            T.reads(smem[0:TILE, 0:TILE])
            T.writes(frag[0:WARP, 0:SLOTS])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.ldmatrix(
                    transpose, 4, ".b16", frag.data, frag.elem_offset // WARP,
                    smem.access_ptr("r"), row_offset(tx, s0), dtype=dtype))

    return desc, impl


def _mma(in_dtype: str, acc_dtype: str):
    """C[m, n] += A[m, k] * B[n, k] on fragments: two m16n8k16 instructions."""
    from tvm import tirx
    from tvm.script import tirx as T

    def widen(v):
        return tirx.Cast(acc_dtype, v) if acc_dtype != in_dtype else v

    ptx_in, ptx_acc = PTX_TYPE[in_dtype], PTX_TYPE[acc_dtype]

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (WARP, SLOTS), in_dtype, align=64, offset_factor=TILE,
                           scope=FRAG_SCOPE)
        B = T.match_buffer(b, (WARP, SLOTS), in_dtype, align=64, offset_factor=TILE,
                           scope=FRAG_SCOPE)
        C = T.match_buffer(c, (WARP, SLOTS), acc_dtype, align=64, offset_factor=TILE,
                           scope=FRAG_SCOPE)
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:SLOTS], A[0:WARP, 0:SLOTS], B[0:WARP, 0:SLOTS])
            T.writes(C[0:WARP, 0:SLOTS])
            for i, j, k in T.grid(TILE, TILE, TILE):
                with T.sblock("mma"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    tc, sc = T.meta_var(fragment_slot(vi, vj))
                    ta, sa = T.meta_var(fragment_slot(vi, vk))
                    tb, sb = T.meta_var(fragment_slot(vj, vk))
                    T.reads(C[tc, sc], A[ta, sa], B[tb, sb])
                    T.writes(C[tc, sc])
                    C[tc, sc] = C[tc, sc] + widen(A[ta, sa]) * widen(B[tb, sb])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (WARP, SLOTS), in_dtype, align=64, offset_factor=TILE,
                           scope=FRAG_SCOPE)
        B = T.match_buffer(b, (WARP, SLOTS), in_dtype, align=64, offset_factor=TILE,
                           scope=FRAG_SCOPE)
        C = T.match_buffer(c, (WARP, SLOTS), acc_dtype, align=64, offset_factor=TILE,
                           scope=FRAG_SCOPE)
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:SLOTS], A[0:WARP, 0:SLOTS], B[0:WARP, 0:SLOTS])
            T.writes(C[0:WARP, 0:SLOTS])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                # columns 0-7 of the tile, then 8-15: each half of B's and C's slots
                T.evaluate(T.ptx_legacy.mma(
                    "m16n8k16", "row", "col", ptx_in, ptx_in, ptx_acc,
                    A.data, A.elem_offset // WARP, B.data, B.elem_offset // WARP,
                    C.data, C.elem_offset // WARP, False, dtype=acc_dtype))
                T.evaluate(T.ptx_legacy.mma(
                    "m16n8k16", "row", "col", ptx_in, ptx_in, ptx_acc,
                    A.data, A.elem_offset // WARP,
                    B.data, B.elem_offset // WARP + SLOTS // 2,
                    C.data, C.elem_offset // WARP + SLOTS // 2, False, dtype=acc_dtype))

    return desc, impl


def _fill(acc_dtype: str):
    from tvm import tirx
    from tvm.script import tirx as T

    zero = tirx.const(0, acc_dtype)

    @T.prim_func(s_tir=True)
    def desc(c: T.handle) -> None:
        C = T.match_buffer(c, (WARP, SLOTS), acc_dtype, scope=FRAG_SCOPE)
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:WARP, 0:SLOTS])
            for i, j in T.grid(TILE, TILE):
                with T.sblock("fill"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    tx, slot = T.meta_var(fragment_slot(vi, vj))
                    T.reads()
                    T.writes(C[tx, slot])
                    C[tx, slot] = zero

    @T.prim_func(s_tir=True)
    def impl(c: T.handle) -> None:
        C = T.match_buffer(c, (WARP, SLOTS), acc_dtype, scope=FRAG_SCOPE, offset_factor=1)
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:WARP, 0:SLOTS])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                T.evaluate(T.cuda.mma_fill_legacy(SLOTS, C.data, C.elem_offset // WARP,
                                                  dtype=acc_dtype))

    return desc, impl


def _store(acc_dtype: str):
    """Fragment -> a 16 x 16 tile in shared memory, each thread its own eight values
    (the epilogue then reads the tile from there)."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def desc(c: T.handle, d: T.handle) -> None:
        C = T.match_buffer(c, (WARP, SLOTS), acc_dtype, scope=FRAG_SCOPE)
        D = T.match_buffer(d, (TILE, TILE), acc_dtype, scope=OUT_SCOPE)
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:SLOTS])
            T.writes(D[0:TILE, 0:TILE])
            for i, j in T.grid(TILE, TILE):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    tx, slot = T.meta_var(fragment_slot(vi, vj))
                    T.reads(C[tx, slot])
                    T.writes(D[vi, vj])
                    D[vi, vj] = C[tx, slot]

    @T.prim_func(s_tir=True)
    def impl(c: T.handle, d: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        C = T.match_buffer(c, (WARP, SLOTS), acc_dtype, scope=FRAG_SCOPE, offset_factor=1)
        D = T.match_buffer(d, (TILE, TILE), acc_dtype, scope=OUT_SCOPE, offset_factor=1,
                           strides=[s0, s1])
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:SLOTS])
            T.writes(D[0:TILE, 0:TILE])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                # the tile is the warp's own, reused fragment after fragment: its lanes
                # have read the last one out before any overwrites it, and see all of
                # this one before reading it
                T.evaluate(T.call_extern("void", "__syncwarp"))
                # each lane stores its own eight values (`_slot_element` says where);
                # one call, so the accumulators stay registers with constant indices
                T.evaluate(T.cuda.mma_store_legacy(TILE, TILE, T.address_of(D[0, 0]), C.data,
                                                   C.elem_offset // WARP, s0, dtype=acc_dtype))
                T.evaluate(T.call_extern("void", "__syncwarp"))

    return desc, impl


_REGISTERED: dict = {}


def intrin_names(in_dtype: str, acc_dtype: str, b_kn: bool) -> MmaIntrinsics:
    """The intrinsics for `in_dtype` inputs accumulating in `acc_dtype`, with B staged
    as [k, n] (`b_kn`) or [n, k]; registered with TVM on first use."""
    from tvm.s_tir import TensorIntrin

    short = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
    i, a = short[in_dtype], short[acc_dtype]
    names = MmaIntrinsics(
        load_a=f"autosched_ldmatrix_{i}_a",
        load_b=f"autosched_ldmatrix_{i}_b_{'kn' if b_kn else 'nk'}",
        compute=f"autosched_mma_m16n8k16_{i}_{a}",
        fill=f"autosched_mma_fill_{a}",
        store=f"autosched_mma_store_{a}")
    makers = {names.load_a: lambda: _ldmatrix(in_dtype, "A", False),
              names.load_b: lambda: _ldmatrix(in_dtype, "B", not b_kn),
              names.compute: lambda: _mma(in_dtype, acc_dtype),
              names.fill: lambda: _fill(acc_dtype),
              names.store: lambda: _store(acc_dtype)}
    for name, make in makers.items():
        if name not in _REGISTERED:
            _REGISTERED[name] = make()
            TensorIntrin.register(name, *_REGISTERED[name], override=True)
    return names


def descriptions() -> dict:
    """name -> description PrimFunc of every intrinsic registered so far (what the CPU
    check of a tensor-core schedule substitutes for the instructions)."""
    return {name: pair[0] for name, pair in _REGISTERED.items()}


STORE_LAYOUT = "tirx.index_map.shared_16x16_to_ldmatrix_32x8_layout"


def import_tvm_intrinsics() -> None:
    """Import TVM's own tensor intrinsics (`tvm.s_tir.tensor_intrin`, what MetaSchedule's
    tensor-core rules name) in a process where `register_store_layout` may already have
    run: TVM's module registers the same layout under the same name and refuses one
    that is there, so ours gives way to it (both give every fragment slot the same
    place)."""
    import sys

    import tvm_ffi

    if "tvm.s_tir.tensor_intrin.cuda" not in sys.modules and \
            tvm_ffi.get_global_func(STORE_LAYOUT, allow_missing=True) is not None:
        tvm_ffi.remove_global_func(STORE_LAYOUT)
    import tvm.s_tir.tensor_intrin  # noqa: F401


_LAYOUT_LOCK = threading.Lock()
_LAYOUT_USERS = [0, False]   # compiles inside store_layout(); whether the name is ours


@contextmanager
def store_layout():
    """The fragment layout registered while a tensor-core module compiles (mma_store's
    code generation looks it up by name): ours where TVM's is not there, removed when
    the last compile inside it ends, so TVM's `tensor_intrin` (which registers the same
    name and refuses one that is there) still imports later in the process."""
    import tvm_ffi
    from tvm.runtime import convert

    with _LAYOUT_LOCK:
        if _LAYOUT_USERS[0] == 0:
            _LAYOUT_USERS[1] = tvm_ffi.get_global_func(STORE_LAYOUT,
                                                       allow_missing=True) is None
            if _LAYOUT_USERS[1]:
                tvm_ffi.register_global_func(
                    STORE_LAYOUT, lambda ind: convert(list(fragment_slot(ind[0], ind[1]))))
        _LAYOUT_USERS[0] += 1
    try:
        yield
    finally:
        with _LAYOUT_LOCK:
            _LAYOUT_USERS[0] -= 1
            if _LAYOUT_USERS[0] == 0 and _LAYOUT_USERS[1]:
                tvm_ffi.remove_global_func(STORE_LAYOUT)
                _LAYOUT_USERS[1] = False


def register_store_layout() -> None:
    """Register the fragment layout under the name `mma_store`'s code generation looks
    it up by (TVM's `tensor_intrin.cuda` registers it when imported, which takes
    seconds). Needed wherever a tensor-core module is compiled; idempotent."""
    import tvm_ffi
    from tvm.runtime import convert

    if tvm_ffi.get_global_func(STORE_LAYOUT, allow_missing=True) is None:
        tvm_ffi.register_global_func(
            STORE_LAYOUT, lambda ind: convert(list(fragment_slot(ind[0], ind[1]))))
