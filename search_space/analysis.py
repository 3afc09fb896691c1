"""What rule writers need to know about the blocks of a task's PrimFunc."""
from __future__ import annotations

from dataclasses import dataclass


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
        if kind == 0:
            spatial.append(_extent(iv.dom))
        elif kind == 2:
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
