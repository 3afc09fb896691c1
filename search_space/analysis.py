"""What rule writers need to know about the blocks of a task's PrimFunc.

Rules never look for blocks by name: they ask these functions what a block is
(a contraction with data reuse, an elementwise stage, a row reduction, ...) and
which iteration variables each buffer access uses.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

# SBlock iter_type codes (tvm.tirx.IterVar): data parallel and commutative reduction.
_SPATIAL, _REDUCE = 0, 2


@dataclass(frozen=True)
class BlockInfo:
    name: str
    spatial: tuple[int, ...]   # extents of spatial (data-parallel) iter vars
    reduce: tuple[int, ...]    # extents of reduction iter vars
    other: int                 # iter vars of any other kind (opaque, ...)
    is_output: bool

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduce)

    @property
    def is_spatial(self) -> bool:
        return not self.reduce and not self.other


def _extent(dom) -> int:
    return int(dom.extent)


def block_info(sch, block) -> BlockInfo:
    """Iteration structure of one block (`sch.get(block)` is the s_tir SBlock)."""
    stmt = sch.get(block)
    spatial, reduce, other = [], [], 0
    for iv in stmt.iter_vars:
        kind = int(iv.iter_type)
        if kind == _SPATIAL:
            spatial.append(_extent(iv.dom))
        elif kind == _REDUCE:
            reduce.append(_extent(iv.dom))
        else:
            other += 1
    outputs = {sch.get(b).name_hint for b in sch.get_output_blocks(root_block(sch))}
    return BlockInfo(stmt.name_hint, tuple(spatial), tuple(reduce), other,
                     stmt.name_hint in outputs)


def root_block(sch):
    return sch.get_sblock("root") if _has_root(sch) else None


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:
        return False


def blocks(sch) -> list:
    """The task's blocks in program order (children of the root block)."""
    return list(sch.get_child_blocks(root_block(sch)))


# ---------------------------------------------------------------- access analysis


@dataclass(frozen=True)
class IterVar:
    name: str
    kind: str      # "S" spatial, "R" reduction, "O" anything else
    extent: int


@dataclass(frozen=True)
class Access:
    """One buffer access of a block, dimension by dimension."""

    buffer: str
    index: int                              # position in the block's reads (or writes)
    uses: tuple[frozenset, ...]             # iter var names each dimension's index uses
    exact: tuple[str | None, ...]           # the iter var a dimension is exactly, else None

    def iters(self) -> frozenset:
        return frozenset().union(*self.uses) if self.uses else frozenset()

    def dim_of(self, var: str) -> int | None:
        """The one dimension indexed exactly by `var` (and no other dimension uses it)."""
        dims = [d for d, used in enumerate(self.uses) if var in used]
        if len(dims) == 1 and self.exact[dims[0]] == var:
            return dims[0]
        return None


@dataclass(frozen=True)
class BlockAnalysis:
    """A block's iteration space and accesses, enough to pick the rules that fit it."""

    name: str
    iters: tuple[IterVar, ...]
    reads: tuple[Access, ...]
    writes: tuple[Access, ...]
    loops_bound: bool     # its loops bind its iter vars one to one, in order
    is_output: bool

    @property
    def spatial(self) -> tuple[IterVar, ...]:
        return tuple(v for v in self.iters if v.kind == "S")

    @property
    def reduce(self) -> tuple[IterVar, ...]:
        return tuple(v for v in self.iters if v.kind == "R")

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduce) and all(v.kind in "SR" for v in self.iters)

    @property
    def is_spatial(self) -> bool:
        return all(v.kind == "S" for v in self.iters)

    @property
    def is_elementwise(self) -> bool:
        """Spatial, one write indexed exactly by every iter var in order (a map)."""
        if not self.is_spatial or len(self.writes) != 1:
            return False
        return self.writes[0].exact == tuple(v.name for v in self.iters)

    def reused_reads(self) -> tuple[Access, ...]:
        """Reads that miss a spatial iter var: each element is used by many outputs."""
        names = {v.name for v in self.spatial}
        return tuple(a for a in self.reads if names - a.iters())

    def streams(self, var: str, skip: frozenset = frozenset()) -> bool:
        """Whether a vector along `var` reads every operand (but those in `skip`)
        contiguously or as a broadcast: `var` indexes no dimension, or only the last."""
        for acc in self.reads:
            if acc.buffer in skip:
                continue
            if any(var in used for used in acc.uses[:-1]):
                return False
        return True

    @property
    def is_contraction(self) -> bool:
        """A reduction with data reuse (matmul, conv): worth multi-level tiling."""
        return self.is_reduction and bool(self.spatial) and len(self.reads) >= 2 \
            and bool(self.reused_reads()) and len(self.writes) == 1

    @property
    def is_row_reduction(self) -> bool:
        """A reduction without reuse across outputs (row max/sum of softmax, norms)."""
        return self.is_reduction and not self.is_contraction


def _access(region, index: int, names: set) -> Access:
    from tvm.tirx.analysis import undefined_vars

    uses, exact = [], []
    for rng in region.region:
        used = frozenset(v.name for v in undefined_vars(rng.min) if v.name in names)
        uses.append(used)
        is_var = type(rng.min).__name__ == "Var" and _const(rng.extent) and int(rng.extent) == 1
        exact.append(rng.min.name if is_var and rng.min.name in names else None)
    return Access(region.source.name, index, tuple(uses), tuple(exact))


def _const(expr) -> bool:
    return type(expr).__name__ == "IntImm"


def _find_realize(stmt, block):
    """The SBlockRealize of `block` under `stmt` (a small walk over the loop nest)."""
    kind = type(stmt).__name__
    if kind == "SBlockRealize":
        if stmt.block.same_as(block):
            return stmt
        return _find_realize(stmt.block.body, block)
    if kind == "SeqStmt":
        for s in stmt.seq:
            found = _find_realize(s, block)
            if found is not None:
                return found
        return None
    body = getattr(stmt, "body", None)
    return _find_realize(body, block) if body is not None else None


def _realize_and_loops(sch, block, stmt):
    """The block's SBlockRealize and its loops. The walk starts at the outermost loop
    around the block, not at the function body: schedules call this often."""
    loops = sch.get_loops(block)
    start = sch.get(loops[0]) if loops else sch.mod["main"].body
    return _find_realize(start, stmt), loops


def _loops_bound(sch, block, stmt) -> bool:
    realize, loops = _realize_and_loops(sch, block, stmt)
    if realize is None or len(loops) != len(stmt.iter_vars):
        return False
    return all(val.same_as(sch.get(loop).loop_var)
               for val, loop in zip(realize.iter_values, loops))


def loops_bound(sch, block) -> bool:
    """Whether the block's loops bind its iter vars one to one, in order."""
    return _loops_bound(sch, block, sch.get(block))


def is_spatial_block(sch, block) -> bool:
    """All iter vars data parallel (cheaper than `analyse(...).is_spatial`)."""
    return all(int(iv.iter_type) == _SPATIAL for iv in sch.get(block).iter_vars)


def analyse(sch, block) -> BlockAnalysis:
    """Iter vars, accesses and loop binding of one block of the schedule."""
    stmt = sch.get(block)
    kinds = {_SPATIAL: "S", _REDUCE: "R"}
    iters = tuple(IterVar(iv.var.name, kinds.get(int(iv.iter_type), "O"), _extent(iv.dom))
                  for iv in stmt.iter_vars)
    names = {v.name for v in iters}
    reads = tuple(_access(r, i, names) for i, r in enumerate(stmt.reads))
    writes = tuple(_access(w, i, names) for i, w in enumerate(stmt.writes))
    outputs = {sch.get(b).name_hint for b in sch.get_output_blocks(root_block(sch))}
    return BlockAnalysis(stmt.name_hint, iters, reads, writes,
                         _loops_bound(sch, block, stmt), stmt.name_hint in outputs)


_CHILDREN = ("a", "b", "value", "args", "condition", "true_value", "false_value")


def _conditional(expr) -> bool:
    kind = type(expr).__name__
    if kind == "Select" or (kind == "Call" and "if_then_else" in str(expr.op.name)):
        return True
    for field in _CHILDREN:
        child = getattr(expr, field, None)
        if child is None or isinstance(child, (int, float, str)):
            continue
        items = list(child) if field == "args" else [child]
        if any(_conditional(c) for c in items):
            return True
    return False


def computes_conditionally(sch, block) -> bool:
    """Whether the block's value has a branch in it (a padding stage, a mask)."""
    body = sch.get(block).body
    return type(body).__name__ == "BufferStore" and _conditional(body.value)


def param_buffers(sch) -> set[str]:
    """Names of the function's argument buffers (inputs and outputs)."""
    func = sch.mod["main"]
    return {buf.name for buf in func.params}


def output_dtype(task) -> str:
    return task.outputs[-1].dtype if task.outputs else "float32"


# Vector register width by -mcpu for x86. TVM's LLVM query reports the width of
# the machine it runs on for every x86 -mcpu, so a cross target needs the table.
_X86_BITS = {
    **dict.fromkeys(("skylake-avx512", "cascadelake", "cooperlake", "cannonlake",
                     "icelake-client", "icelake-server", "tigerlake", "rocketlake",
                     "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
                     "znver4", "znver5", "knl", "knm", "x86-64-v4"), 512),
    **dict.fromkeys(("haswell", "broadwell", "skylake", "alderlake", "raptorlake",
                     "meteorlake", "arrowlake", "lunarlake", "gracemont", "znver1", "znver2",
                     "znver3", "x86-64-v3", "core-avx2", "sandybridge", "ivybridge",
                     "corei7-avx", "core-avx-i", "bdver1", "bdver2", "bdver3", "bdver4",
                     "btver2"), 256),
    **dict.fromkeys(("x86-64", "x86-64-v2", "core2", "nehalem", "westmere", "corei7",
                     "penryn", "silvermont", "goldmont", "btver1"), 128),
}


def _bits_from_mattr(mattr) -> int | None:
    feats = {f.strip() for f in (mattr.split(",") if isinstance(mattr, str) else mattr or ())}
    if "+avx512f" in feats:
        return 512
    if feats & {"+avx", "+avx2"}:
        return 256
    return None


@lru_cache(maxsize=16)
def _vector_bits(target_key: str) -> int:
    import json

    config = json.loads(target_key)
    bits = _bits_from_mattr(config.get("mattr")) or _X86_BITS.get(str(config.get("mcpu", "")))
    if bits:
        return bits
    import tvm
    from tvm.target import codegen

    try:
        bits = int(codegen.llvm_get_vector_width(tvm.target.Target(config)))
    except Exception:  # an LLVM without this query: assume 128-bit SIMD
        bits = 128
    return bits if bits > 0 else 128


def vector_lanes(target, dtype: str = "float32") -> int:
    """SIMD lanes of `dtype` on `target` (a TargetSpec): 16 fp32 lanes on AVX-512."""
    import tvm

    width = tvm.DataType(dtype).bits
    return max(1, _vector_bits(target.key) // max(8, width))


def loop_kinds(sch, block) -> list[str]:
    """For each loop around `block`: "S" when only spatial iter vars depend on it,
    "R" when a reduction (or other) iter var does, "-" when none does."""
    from tvm.tirx.analysis import undefined_vars

    stmt = sch.get(block)
    realize, loops = _realize_and_loops(sch, block, stmt)
    kinds = []
    for loop in loops:
        var = sch.get(loop).loop_var
        kind = "-"
        for iv, val in zip(stmt.iter_vars, realize.iter_values):
            if any(v.same_as(var) for v in undefined_vars(val)):
                if int(iv.iter_type) != _SPATIAL:
                    kind = "R"
                    break
                kind = "S"
        kinds.append(kind)
    return kinds
