"""Packing an operand of a contraction into a blocked layout.

The register tile of a contraction reads, for every step of the reduction, one
vector of the operand along the vector axis. In the operand's own layout those
vectors lie a whole row apart (B[k, j] of a matmul) or are not contiguous at all
(w[j, k] of a dense layer). Packing copies the operand once per call into
X_packed[..., v // nb, <reduction dims>, v % nb], so the inner loops stream one
contiguous block: the layout vendor GEMMs use.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..analysis import BlockAnalysis
from ..decisions import InvalidCandidate


@dataclass(frozen=True)
class PackPlan:
    buffer: str    # the operand to pack (an argument of the function)
    dim: int       # its dimension along which the vector iter var runs (panel_dim)
    iter: str      # the spatial iter var that becomes the vector axis
    outer_at: int  # where the outer part v // nb goes among the remaining dims


def find_pack_plan(info: BlockAnalysis, params: set[str]) -> PackPlan | None:
    """The operand worth packing: an argument buffer reused across outputs (it misses
    a spatial iter var) and indexed by a spatial iter var along which it runs
    contiguously (`Access.panel_dim`) and the other operands stream (see
    `BlockAnalysis.streams`). The last spatial iter var is preferred (the output's
    contiguous axis), then earlier ones."""
    candidates = [v for v in reversed(info.spatial) if v.extent > 1]
    reduce = {v.name for v in info.reduce}
    for var in candidates:
        for acc in info.reused_reads():
            dim = acc.panel_dim(var.name) if acc.buffer in params else None
            if dim is None or not info.streams(var.name, frozenset([acc.buffer])):
                continue
            rest = [d for d in range(len(acc.uses)) if d != dim]
            outer_at = next((i for i, d in enumerate(rest) if acc.uses[d] & reduce), 0)
            return PackPlan(acc.buffer, dim, var.name, outer_at)
    return None


def packed_index(plan: PackPlan, ndim: int, nb: int):
    """The index map (as a function of the operand's indices) of the packed layout."""

    def index_map(*idx):
        rest = [idx[d] for d in range(ndim) if d != plan.dim]
        rest.insert(plan.outer_at, idx[plan.dim] // nb)
        return tuple(rest) + (idx[plan.dim] % nb,)

    return index_map


def pack_operand(sch, block, plan: PackPlan, nb: int) -> str:
    """Insert the packing stage for `block`'s operand; returns the new block's name.
    Its loops follow the packed layout so the copy writes contiguously."""
    from tvm.tirx import IndexMap

    reads = sch.get(block).reads  # the operand's position may move when producers inline
    index = next((i for i, r in enumerate(reads) if r.source.name == plan.buffer), None)
    if index is None:  # a producer computed into the block replaced the operand's reads
        raise InvalidCandidate(f"pack {plan.buffer}: the block no longer reads it")
    ndim = len(reads[index].region)
    packed = sch.cache_read(block, index, "global")
    index_map = IndexMap.from_func(packed_index(plan, ndim, nb), ndim=ndim,
                                   index_dtype="int32")
    sch.transform_layout(packed, ("write", 0), index_map)
    sch.transform_block_layout(packed, index_map)
    return sch.get(packed).name_hint
