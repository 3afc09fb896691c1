"""What rule writers need to know about a block beyond its iteration kinds: each buffer
access dimension by dimension, whether its loops bind its iteration variables one to
one, which loops carry a reduction, and whether its value has a branch in it.

Rules never look for blocks by name: they ask these functions what a block is
(a contraction with data reuse, an elementwise stage, a row reduction, ...) and
which iteration variables each buffer access uses.
"""
from __future__ import annotations

from dataclasses import dataclass

from .blocks import ITER_REDUCE, ITER_SPATIAL, output_names

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
    # per dimension, (outer, inner) when its index is outer * extent(inner) + inner: a
    # grouped operand's dimension that holds group after group (weight[g * F/G + f])
    grouped: tuple[tuple[str, str] | None, ...]

    def iters(self) -> frozenset:
        return frozenset().union(*self.uses) if self.uses else frozenset()

    def dim_of(self, var: str) -> int | None:
        """The one dimension indexed exactly by `var` (and no other dimension uses it)."""
        dims = [d for d, used in enumerate(self.uses) if var in used]
        if len(dims) == 1 and self.exact[dims[0]] == var:
            return dims[0]
        return None

    def panel_dim(self, var: str) -> int | None:
        """The one dimension along which `var` runs contiguously: indexed by `var`
        exactly, or by `outer * extent(var) + var` (no other dimension uses it)."""
        dims = [d for d, used in enumerate(self.uses) if var in used]
        if len(dims) != 1:
            return None
        d, grouped = dims[0], self.grouped[dims[0]]
        return d if self.exact[d] == var or (grouped and grouped[1] == var) else None


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


def _grouped(index_expr, extents: dict) -> tuple[str, str] | None:
    """(outer, inner) when `index_expr` is outer * extent(inner) + inner, both iter vars."""
    if type(index_expr).__name__ != "Add":
        return None
    for prod, inner in ((index_expr.a, index_expr.b), (index_expr.b, index_expr.a)):
        if type(prod).__name__ != "Mul" or type(inner).__name__ != "Var":
            continue
        for outer, k in ((prod.a, prod.b), (prod.b, prod.a)):
            if type(outer).__name__ == "Var" and _const(k) and outer.name in extents \
                    and extents.get(inner.name) == int(k):
                return outer.name, inner.name
    return None


def _access(region, index: int, names: dict, analyzer) -> Access:
    """What each dimension's index uses, simplified over the iter vars' domains first:
    a grouped convolution written for any `groups` indexes channels by
    f // (F / groups) * (C / groups) + c, which for one group does not depend on f."""
    from tvm.tirx.analysis import undefined_vars

    uses, exact, grouped = [], [], []
    for rng in region.region:
        index_expr = analyzer.simplify(rng.min)
        used = frozenset(v.name for v in undefined_vars(index_expr) if v.name in names)
        uses.append(used)
        single = _const(rng.extent) and int(rng.extent) == 1
        is_var = single and type(index_expr).__name__ == "Var"
        exact.append(index_expr.name if is_var and index_expr.name in names else None)
        grouped.append(_grouped(index_expr, names) if single else None)
    return Access(region.source.name, index, tuple(uses), tuple(exact), tuple(grouped))


def _domains(block):
    """An arithmetic analyzer that knows the range of every iter var of `block` that
    takes more than one value (one of extent 1 stays a variable: a batch of one still
    indexes its dimension)."""
    import tvm

    analyzer = tvm.sym.Analyzer()
    for iv in block.iter_vars:
        if not _const(iv.dom.extent) or int(iv.dom.extent) > 1:
            analyzer.bind(iv.var, iv.dom)
    return analyzer


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


def analyse(sch, block) -> BlockAnalysis:
    """Iter vars, accesses and loop binding of one block of the schedule."""
    stmt = sch.get(block)
    kinds = {ITER_SPATIAL: "S", ITER_REDUCE: "R"}
    iters = tuple(IterVar(iv.var.name, kinds.get(int(iv.iter_type), "O"), int(iv.dom.extent))
                  for iv in stmt.iter_vars)
    names = {v.name: v.extent for v in iters}   # iter var name -> extent
    analyzer = _domains(stmt)
    reads = tuple(_access(r, i, names, analyzer) for i, r in enumerate(stmt.reads))
    writes = tuple(_access(w, i, names, analyzer) for i, w in enumerate(stmt.writes))
    return BlockAnalysis(stmt.name_hint, iters, reads, writes,
                         _loops_bound(sch, block, stmt), stmt.name_hint in output_names(sch))


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
                if int(iv.iter_type) != ITER_SPATIAL:
                    kind = "R"
                    break
                kind = "S"
        kinds.append(kind)
    return kinds
