"""The blocks of a task's PrimFunc and the kind of each one's iteration variables.

The cheap summary both rule sets start from: which blocks there are, in program order,
which of them write an output, and which iteration variables are data parallel or
reductions (`analysis.py` has the fuller per-access view the CPU rules use).
"""
from __future__ import annotations

from dataclasses import dataclass

# SBlock iter_type codes (tvm.tirx.IterVar): data parallel and commutative reduction.
ITER_SPATIAL, ITER_REDUCE = 0, 2


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


def block_info(sch, block) -> BlockInfo:
    """Iteration structure of one block (`sch.get(block)` is the s_tir SBlock)."""
    stmt = sch.get(block)
    spatial, reduce, other = [], [], 0
    for iv in stmt.iter_vars:
        kind = int(iv.iter_type)
        if kind == ITER_SPATIAL:
            spatial.append(int(iv.dom.extent))
        elif kind == ITER_REDUCE:
            reduce.append(int(iv.dom.extent))
        else:
            other += 1
    return BlockInfo(stmt.name_hint, tuple(spatial), tuple(reduce), other,
                     stmt.name_hint in output_names(sch))


def output_names(sch) -> set[str]:
    """Names of the blocks that write an output of the function."""
    return {sch.get(b).name_hint for b in sch.get_output_blocks(root_block(sch))}


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


def is_spatial_block(sch, block) -> bool:
    """All iter vars data parallel (cheaper than `analyse(...).is_spatial`)."""
    return all(int(iv.iter_type) == ITER_SPATIAL for iv in sch.get(block).iter_vars)
