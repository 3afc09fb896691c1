"""GPU-side analysis of a task's blocks: which loops are spatial or reduction, which
reductions reuse their inputs (multi-level tiling pays off) and which are row
reductions (cross-thread reduction pays off), how much shared memory a tile stages,
and which vector widths a cooperative fetch can use safely.

Everything here reads the blocks' iteration variables and buffer accesses; nothing
depends on the names of one example's blocks.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..blocks import block_info, blocks
from ..tir import free_vars, iter_nodes

SPATIAL, REDUCE, OTHER = "S", "R", "X"


@dataclass(frozen=True)
class Access:
    """One buffer a block reads: the buffer, its index expressions (in block iteration
    variables) and whether the buffer is a parameter of the function."""

    buffer: object
    indices: tuple
    is_param: bool

    @property
    def name(self) -> str:
        return str(self.buffer.name)


def _realize_of(sch, block):
    """The SBlockRealize of `block` (its iteration-variable bindings)."""
    from tvm import s_tir

    loops = sch.get_loops(block)
    if not loops:
        return None
    name = sch.get(block).name_hint
    for node in iter_nodes(sch.get(loops[-1]).body):
        if isinstance(node, s_tir.SBlockRealize) and node.block.name_hint == name:
            return node
    return None


def loop_kinds(sch, block) -> list[str]:
    """For each loop above `block`: SPATIAL when only spatial iteration variables are
    bound to it, REDUCE when only reduction ones are, OTHER otherwise (or unused)."""
    realize = _realize_of(sch, block)
    loops = sch.get_loops(block)
    if realize is None:
        return [OTHER] * len(loops)
    uses: dict = {}
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        kind = {0: SPATIAL, 2: REDUCE}.get(int(iv.iter_type), OTHER)
        for v in free_vars(value):
            uses.setdefault(v, set()).add(kind)
    kinds = []
    for loop in loops:
        found = uses.get(sch.get(loop).loop_var, set())
        kinds.append(found.pop() if len(found) == 1 else OTHER)
    return kinds


def loop_positions(sch, block) -> list[int | None]:
    """For each loop above `block`, the position of the iteration variable bound to
    exactly that loop (None for a loop bound to no variable or through an expression):
    on an unscheduled block every loop has one."""
    realize = _realize_of(sch, block)
    loops = sch.get_loops(block)
    if realize is None:
        return [None] * len(loops)
    out = []
    for loop in loops:
        var = sch.get(loop).loop_var
        out.append(next((pos for pos, value in enumerate(realize.iter_values)
                         if value.same_as(var)), None))
    return out


def reads(sch, block) -> list[Access]:
    """The buffers `block` reads (in its read-region order, which is the index order
    `cache_read` expects), without the buffers it also writes (a reduction's own
    accumulator)."""
    stmt = sch.get(block)
    written = {str(w.source.name) for w in stmt.writes}
    params = {str(p.name) for p in sch.mod["main"].params}
    out = []
    for region in stmt.reads:
        name = str(region.source.name)
        if name in written:
            continue
        out.append(Access(region.source, tuple(r.min for r in region.region), name in params))
    return out


def read_indices(sch, block) -> list[int]:
    """Positions in the block's read regions of the buffers `reads` returns."""
    stmt = sch.get(block)
    written = {str(w.source.name) for w in stmt.writes}
    return [i for i, r in enumerate(stmt.reads) if str(r.source.name) not in written]


def _spatial_vars(stmt) -> list:
    return [iv.var for iv in stmt.iter_vars if int(iv.iter_type) == 0 and int(iv.dom.extent) > 1]


def has_reuse(sch, block) -> bool:
    """A reduction whose inputs are each read by many outputs: some input's indices
    miss a (non-unit) spatial variable, so a tile of outputs shares staged data.
    Matmul and convolution have it; a row sum does not."""
    stmt = sch.get(block)
    spatial = _spatial_vars(stmt)
    for acc in reads(sch, block):
        used = {v for e in acc.indices for v in free_vars(e)}
        if any(not any(v.same_as(u) for u in used) for v in spatial):
            return True
    return False


def footprint_bytes(sch, block, tiles: dict, whole: frozenset = frozenset()) -> int:
    """Shared-memory bytes to stage every input of `block` for one tile: `tiles` maps
    an iteration variable's position to its tile extent (others span one point); the
    inputs named in `whole` (a producer computed at the block's tile, chains.py) span
    the block's whole reduction extent instead."""
    import tvm

    stmt = sch.get(block)
    full = dict(tiles)
    for pos, iv in enumerate(stmt.iter_vars):
        if int(iv.iter_type) == 2:
            full[pos] = int(iv.dom.extent)
    analyzers = {}

    def analyzer(bound: dict):
        key = id(bound)
        if key not in analyzers:
            analyzers[key] = tvm.sym.Analyzer()
            for pos, iv in enumerate(stmt.iter_vars):
                analyzers[key].bind(iv.var, tvm.ir.Range(0, int(bound.get(pos, 1))))
        return analyzers[key]

    total = 0
    for acc in reads(sch, block):
        bounds = analyzer(full if acc.name in whole else tiles)
        n = 1
        for e in acc.indices:
            b = bounds.const_int_bound(e)
            n *= int(b.max_value) - int(b.min_value) + 1
        total += n * ((int(acc.buffer.dtype.bits) * int(acc.buffer.dtype.lanes) + 7) // 8)
    return total


def innermost_var_position(sch, block, acc: Access) -> int | None:
    """When the innermost index of `acc` is exactly one iteration variable, its
    position in the block's iteration variables (the dimension a vector load walks)."""
    stmt = sch.get(block)
    last = acc.indices[-1]
    for pos, iv in enumerate(stmt.iter_vars):
        if last.same_as(iv.var):
            return pos
    return None


@dataclass(frozen=True)
class TaskBlocks:
    """The roles the blocks of a task play for the CUDA rules (names, in program order)."""

    tiled: tuple[str, ...]       # reductions with data reuse: multi-level tiling
    rows: tuple[str, ...]        # reductions without reuse: cross-thread reduction
    spatial: tuple[str, ...]     # non-output spatial blocks: inlining candidates
    outputs: tuple[str, ...]


def classify(sch) -> TaskBlocks:
    tiled, rows, spatial, outputs = [], [], [], []
    for b in blocks(sch):
        info = block_info(sch, b)
        if info.is_output:
            outputs.append(info.name)
        if info.is_reduction and not info.other:
            (tiled if has_reuse(sch, b) else rows).append(info.name)
        elif info.is_spatial and not info.is_output:
            spatial.append(info.name)
    return TaskBlocks(tuple(tiled), tuple(rows), tuple(spatial), tuple(outputs))
