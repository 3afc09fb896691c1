"""Bringing a reduction into GEMM form, the shape tensor cores compute: C[b, m, n] +=
A[b, m, k] * B[b, k, n] (or B[b, n, k]).

A block qualifies when it sums the product of two reads, and each of its iteration
variables plays one GEMM role, read off which accesses use it:

- batch: a spatial variable used by A, B and the output;
- M: spatial, used by A and the output;   N: spatial, used by B and the output;
- K: a reduction variable used by A and B.

Matmul, batch matmul and dense are GEMMs as written; a convolution becomes one as an
implicit GEMM (M = batch x output pixels, K = filter window x input channels). The
schedule reindexes the three accesses (`reindex`: one intermediate buffer per access,
indexed by the block's own variables), fuses each role's variables into one
(`transform_layout` of those buffers, `transform_block_layout` of the block) and pads
every GEMM extent up to a multiple the tiles need (`pad_einsum`). The intermediate
buffers never reach memory: the sketch inlines them into its shared-memory copies and
its write-back, where their index arithmetic (the convolution's window, the padding's
bounds) becomes the copies' addresses and predicates.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..tir import free_vars

BATCH, M, N, K = "batch", "m", "n", "k"


@dataclass(frozen=True)
class GemmRoles:
    """Which iteration variables (by position) form each GEMM dimension, the extents of
    the fused dimensions, the buffers' dtypes, and whether B is best staged [k, n]
    (its innermost index is an N variable, so rows of N are contiguous)."""

    groups: dict          # role -> tuple of iteration-variable positions
    extents: dict         # role -> fused extent
    in_dtype: str
    acc_dtype: str
    b_kn: bool
    a_index: int          # positions of A and B in the block's read regions
    b_index: int
    runs: tuple = (1, 1)  # contiguous elements a staged row of A, of B starts with


    @property
    def dims(self) -> tuple[str, ...]:
        """The GEMM dimensions present, in the block's new variable order."""
        return tuple(r for r in (BATCH, M, N, K) if self.groups.get(r))


def _product_reads(stmt):
    """The two buffer loads multiplied in a `C = C + x * y` update (casts allowed), or
    None."""
    from tvm import tirx

    value = stmt.body.value if isinstance(stmt.body, tirx.BufferStore) else None
    if not isinstance(value, tirx.Add) or stmt.init is None:
        return None
    prod = value.b if isinstance(value.b, tirx.Mul) else value.a
    if not isinstance(prod, tirx.Mul):
        return None
    loads = []
    for side in (prod.a, prod.b):
        while isinstance(side, tirx.Cast):
            side = side.value
        if type(side).__name__ != "TensorLoad":   # a buffer load (0.27's node name)
            return None
        loads.append(side)
    return loads


def gemm_roles(sch, block) -> GemmRoles | None:
    """The GEMM roles of `block`'s variables, or None when it is not a GEMM in
    disguise (see the module docstring)."""
    stmt = sch.get(block)
    loads = _product_reads(stmt)
    if loads is None or len(stmt.writes) != 1:
        return None
    out = stmt.writes[0]
    used = [{str(v.name) for e in ld.indices for v in free_vars(e)} for ld in loads]
    out_used = {str(v.name) for r in out.region for v in free_vars(r.min)}
    groups = {BATCH: [], M: [], N: [], K: []}
    for pos, iv in enumerate(stmt.iter_vars):
        name, spatial = str(iv.var.name), int(iv.iter_type) == 0
        key = (spatial, name in used[0], name in used[1], name in out_used)
        role = {(True, True, True, True): BATCH, (True, True, False, True): M,
                (True, False, True, True): N, (False, True, True, False): K}.get(key)
        if role is None:
            if int(iv.dom.extent) == 1:
                continue
            return None
        groups[role].append(pos)
    if not (groups[M] and groups[N] and groups[K]):
        return None
    extents = {r: _product(int(stmt.iter_vars[p].dom.extent) for p in ps)
               for r, ps in groups.items() if ps}
    reads = [str(r.source.name) for r in stmt.reads]
    a, b = (str(ld.source.name) for ld in loads)
    last_b = {str(v.name) for v in free_vars(loads[1].indices[-1])}
    n_names = {str(stmt.iter_vars[p].var.name) for p in groups[N]}
    b_kn = bool(last_b & n_names)
    runs = (_run(stmt, loads[0], groups[K]), _run(stmt, loads[1], groups[N if b_kn else K]))
    return GemmRoles({r: tuple(ps) for r, ps in groups.items() if ps}, extents,
                     str(loads[0].source.dtype), str(out.source.dtype), b_kn,
                     reads.index(a), reads.index(b), runs)


def _run(stmt, load, group) -> int:
    """How many elements along a staged row are contiguous in memory and aligned alike:
    when the access's innermost index is the row's innermost variable, the gcd of that
    variable's extent and the buffer's row length (a vector copy never crosses either);
    else 1."""
    import math

    inner = stmt.iter_vars[group[-1]]
    if not load.indices[-1].same_as(inner.var):
        return 1
    return math.gcd(int(inner.dom.extent), int(load.source.shape[-1]))


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _fuse(vars_, extents):
    """One index from several: v0 * (e1 * e2 ...) + v1 * (e2 ...) + ..."""
    out = vars_[0]
    for v, e in zip(vars_[1:], extents[1:]):
        out = out * e + v
    return out


def to_gemm_form(sch, name: str, roles: GemmRoles, multiple: dict) -> dict:
    """Rewrite block `name` into GEMM form with each fused dimension padded up to a
    multiple of `multiple[role]`; returns the names of the blocks made on the way:
    {"A": copy into A's intermediate, "B": ..., "C": write-back of the output}."""
    block = sch.get_sblock(name)
    stmt = sch.get(block)
    ext = [int(iv.dom.extent) for iv in stmt.iter_vars]
    made = {}
    for key, access in (("A", ("read", roles.a_index)), ("B", ("read", roles.b_index)),
                        ("C", ("write", 0))):
        made[key] = sch.reindex(block, access)
    order = {"A": (BATCH, M, K), "B": (BATCH, K, N) if roles.b_kn else (BATCH, N, K),
             "C": (BATCH, M, N)}
    for key, buf_index in (("A", ("read", roles.a_index)), ("B", ("read", roles.b_index)),
                           ("C", ("write", 0))):
        used = [p for r in (BATCH, M, N, K) for p in roles.groups.get(r, ())
                if r in order[key]]
        used.sort()
        index_map = _buffer_map(used, ext, roles, order[key])
        sch.transform_layout(block, buf_index, index_map)
        # the copy's own variables follow, so it writes (reads) plain variables and can
        # be inlined into the sketch's stages
        sch.transform_block_layout(made[key], index_map)
    sch.transform_block_layout(block, _block_map(len(ext), ext, roles))
    sch.pad_einsum(block, [multiple.get(r, 1) for r in roles.dims])
    return {k: sch.get(v).name_hint for k, v in made.items()}


def _buffer_map(used, ext, roles, order):
    """An index map from an intermediate buffer's indices (the block variables it uses,
    in block order) to its GEMM layout `order`."""
    from tvm.tirx.function import IndexMap

    def fn(*idx):
        at = dict(zip(used, idx))
        return tuple(_fuse([at[p] for p in roles.groups[r]], [ext[p] for p in roles.groups[r]])
                     for r in order if r in roles.groups)

    return IndexMap.from_func(fn, ndim=len(used), index_dtype="int32")


def _block_map(n, ext, roles):
    from tvm.tirx.function import IndexMap

    def fn(*idx):
        return tuple(_fuse([idx[p] for p in roles.groups[r]], [ext[p] for p in roles.groups[r]])
                     for r in roles.dims)

    return IndexMap.from_func(fn, ndim=n, index_dtype="int32")
