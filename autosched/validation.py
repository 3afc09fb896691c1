"""Input checks: is this task something we can tune on this target?

Run before the database is opened or anything is built, so bad input costs the user one
line and exit code 2, never a run of failing builds recorded as the candidates' fault.
Two stages: `check_tensors` on a workload's TE tensors (concrete, positive, integer
shapes; no tensor returned twice), and `check_task` on a Task for a target (dtypes TVM
can build there; inputs and outputs that fit in the memory of the machine that runs
them).
"""
from __future__ import annotations

import os
import re
from functools import lru_cache

from .errors import UserError

# TVM indexes buffers with 32- or 64-bit integers; a dimension beyond this is a typo,
# not a workload (2**40 elements of one byte is already 1 TiB).
MAX_DIM = 1 << 40

# Int64 is the widest integer TVM takes as a dimension.
INT64_MAX = (1 << 63) - 1

# The least CUDA architecture with hardware support for a dtype family. Below it, nvcc
# rejects the code TVM 0.27 emits (a 64^3 bfloat16 matmul: every candidate fails on
# sm_75, all compile on sm_80; float8_e4m3fn fails on sm_80 with "expression must be an
# lvalue"). At or above it, whether an operation on the type compiles is the
# candidate's own business (float8 products still fail on sm_89: no operator "*").
CUDA_MIN_ARCH = (("float4_", 100), ("float6_", 100), ("float8_", 89), ("bfloat16", 80))

# Memory of the largest GPU of each architecture, used when the GPU that will run the
# kernels is not on this machine (cross-compiling or RPC): the check then refuses only
# what no GPU of that architecture can hold.
CUDA_MEMORY_GIB = {70: 32, 75: 48, 80: 80, 86: 48, 87: 64, 89: 48, 90: 144, 100: 192,
                   103: 288, 120: 96}
CUDA_DEFAULT_MEMORY_GIB = 192


def check_tensors(workload: str, args: dict, tensors) -> None:
    """Raise UserError unless every tensor has a concrete, positive integer shape of
    sane size and no tensor is returned twice (a kernel argument is one buffer). Two
    tensors of one name are fine: names are labels (see `distinct_names`)."""
    from tvm import tirx

    seen = []
    for t in tensors:
        name = t.op.name
        if any(t.op.same_as(s.op) and t.value_index == s.value_index for s in seen):
            raise UserError(f"workload '{workload}': tensor {name!r} is returned twice; "
                            "return each input and output once")
        seen.append(t)
        for axis, dim in enumerate(t.shape):
            if not isinstance(dim, tirx.IntImm):
                kind = "non-integer" if isinstance(dim, tirx.FloatImm) else "symbolic"
                raise UserError(
                    f"workload '{workload}': tensor {name!r} has a {kind} dimension {dim} "
                    f"(axis {axis}); shapes must be concrete integers: make the size a "
                    "parameter with a default and tune each shape as a variant, e.g. "
                    "--arg N=512 --arg N=1024")
            if not 0 < int(dim.value) <= MAX_DIM:
                raise UserError(f"workload '{workload}': tensor {name!r} axis {axis} "
                                f"is {int(dim.value)}{_culprit(args, int(dim.value))}; "
                                f"each dimension must be between 1 and {MAX_DIM}")


def distinct_names(names: list[str], taken=()) -> list[str]:
    """`names` (of a kernel's arguments, in order) with each repeat renamed: the first of
    a name keeps it, the next ones become NAME_1, NAME_2, ..., skipping any name in
    `names` or `taken` (the computation's other tensors) and any given before. The same
    names always give the same result; names without repeats come back unchanged."""
    used = set(names) | set(taken)
    out, given = [], set()
    for name in names:
        new, i = name, 0
        while new in given or (i and new in used):
            i += 1
            new = f"{name}_{i}"
        given.add(new)
        used.add(new)
        out.append(new)
    return out


def check_inputs_returned(workload: str, inputs, outputs) -> None:
    """Raise UserError when an output reads a placeholder the workload did not return:
    the kernel would have an argument nobody can pass."""
    returned = {t.op for t in inputs}
    stack, seen = [t.op for t in outputs], set()
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        for t in op.input_tensors:
            if not t.op.input_tensors and type(t.op).__name__ == "PlaceholderOp" \
                    and t.op not in returned:
                raise UserError(f"workload '{workload}': placeholder {t.op.name!r} is read "
                                f"but not returned; return every input (inputs first, "
                                "outputs last)")
            stack.append(t.op)


def check_args(workload: str, args: dict) -> None:
    """Raise UserError for an integer parameter no TVM shape can hold (beyond int64)."""
    for key, value in args.items():
        if type(value) is int and abs(value) > INT64_MAX:
            raise UserError(f"workload '{workload}': parameter {key}={value} does not fit "
                            f"in a 64-bit integer; dimensions must be between 1 and {MAX_DIM}")


def _culprit(args: dict, value: int) -> str:
    """Which shape parameter most likely made a bad dimension: one equal to it, else
    a non-positive one."""
    same = [k for k, v in args.items() if type(v) is int and v == value]
    bad = same or [k for k, v in args.items() if type(v) is int and v <= 0]
    if not bad:
        return ""
    return f" (from shape parameter {bad[0]}={args[bad[0]]})"


def dtype_bits(dtype: str) -> int:
    """Bits of one element of `dtype` (lanes included, e.g. float32x4 -> 128)."""
    import tvm

    t = tvm.DataType(dtype)
    return t.bits * t.lanes


def task_bytes(task) -> int:
    """Bytes of all the task's inputs and outputs, which a run holds at once."""
    total = 0
    for spec in task.arg_specs:
        n = 1
        for d in spec.shape:
            n *= d
        total += (n * dtype_bits(spec.dtype) + 7) // 8
    return total


def check_task(task, target) -> None:
    """Raise UserError unless `task` can be built for and run on `target` (a TargetSpec)."""
    for spec in task.arg_specs:
        reason = unsupported_dtype(spec.dtype, target)
        if reason:
            raise UserError(f"{task.name}: tensor {spec.name!r} is {spec.dtype}, {reason}")
    need = task_bytes(task)
    have, where = device_memory(target)
    if need > have:
        raise UserError(f"{task.name}: its inputs and outputs need {format_bytes(need)}, "
                        f"more than the {format_bytes(have)} of {where}")


def check_tasks(tasks, target) -> None:
    """`check_task` for each task, in order (the first problem is reported)."""
    for task in tasks:
        check_task(task, target)


def unsupported_dtype(dtype: str, target) -> str | None:
    """Why `dtype` cannot be tuned on `target`, or None when it can."""
    if dtype != "bool" and dtype_bits(dtype) // _lanes(dtype) < 8:
        # TVM packs sub-byte elements (int4, float4_e2m1fn, float6_*) while numpy holds
        # one a byte, so inputs cannot be copied in ("TensorCopyFromBytes: size
        # mismatch"); TVM 0.27 also fails to compile arithmetic on float4/float6 for llvm.
        return ("whose elements are smaller than a byte: the measurement cannot pass "
                "such tensors to a kernel")
    if target.kind == "llvm":
        return _llvm_compile_error(dtype)
    if target.kind == "cuda":
        arch = _sm(str(target.config.get("arch", "")))
        for prefix, least in CUDA_MIN_ARCH:
            if dtype.startswith(prefix) and arch is not None and arch < least:
                return f"which needs CUDA sm_{least} or newer; the target is sm_{arch}"
    return None


def _lanes(dtype: str) -> int:
    import tvm

    return tvm.DataType(dtype).lanes


@lru_cache(maxsize=None)
def _llvm_compile_error(dtype: str) -> str | None:
    """TVM's complaint when compiling a copy of `dtype` for llvm, None when it compiles.
    This catches names TVM parses but cannot lower (e.g. plain "float8"); compiling to
    memory needs no linker, so a broken toolchain cannot be mistaken for a bad dtype."""
    import tvm
    from tvm import te

    try:
        a = te.placeholder((4,), name="a", dtype=dtype)
        b = te.compute((4,), lambda i: a[i], name="b")
        tvm.compile(tvm.IRModule({"main": te.create_prim_func([a, b])}), target="llvm")
    except Exception as e:  # TVM's own error is the finding
        text = str(e).strip()
        why = text.splitlines()[-1] if text else type(e).__name__
        return f"which TVM cannot compile for llvm ({why})"
    return None


def _sm(arch: str) -> int | None:
    m = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
    return int(m.group(1)) if m else None


def device_memory(target) -> tuple[int, str]:
    """(bytes, description) of the memory the target's kernels run in: this machine's
    RAM for llvm; for cuda the local GPU's memory, else the largest GPU of the arch."""
    if target.kind == "cuda":
        local = local_gpu_memory() if target.has_local_device else None
        if local is not None:
            return local, "this machine's GPU"
        arch = _sm(str(target.config.get("arch", "")))
        gib = CUDA_MEMORY_GIB.get(arch, CUDA_DEFAULT_MEMORY_GIB)
        return gib << 30, f"the largest {target.config.get('arch', 'cuda')} GPU"
    return host_memory(), "this machine's memory"


def host_memory() -> int:
    """Physical memory of this machine, or the container's limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = _cgroup_limit()
    return min(total, limit) if limit else total


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


def local_gpu_memory() -> int | None:
    """Bytes of memory of the GPU this process runs on (CUDA_VISIBLE_DEVICES), or None."""
    from .target import local_gpu

    gpu = local_gpu()
    return gpu.get("memory") if gpu else None


def format_bytes(n: int) -> str:
    """`n` bytes in the largest binary unit that keeps it >= 1, e.g. '4.0 TiB'."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
