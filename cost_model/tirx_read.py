"""Read a kernel written in TVM's TIRx (a function with a device entry, scope ids such as
`T.cta_id` / `T.thread_id`, `T.alloc_buffer` statements and `T.ptx` calls) into plain
Python data, once: every instruction call with the loops around it and the warpgroups
that reach it, the shared / local allocations, the global stores, the tensor maps.

TIRx kernels are not scheduled loop nests: a warp-specialised kernel splits its threads
into roles by conditions on the thread index (`if tid // 128 == 2:` producer, else
consumers), and its data moves through instruction calls (TMA, wgmma) rather than
buffer stores. So the walk tracks, per statement, which warpgroups can reach it: at a
condition, each warpgroup whose 128 threads all agree on it goes down one branch only;
one whose threads disagree (an elected thread, `tid % 128 == 0`) or where the condition
depends on more than the thread index goes down both.

Calls are recognised by the instruction names of TVM's `T.ptx` table (`tirx.ptx.wgmma_*`
with an `m64nNkK` shape, `tirx.ptx.cp_async_bulk_tensor_g2s*` TMA loads, `..._s2g` TMA
stores, `mbarrier_init`, `setmaxnreg`, `stmatrix`), so the reading holds for any kernel
built from them, not only for one template's text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from search_space.tir import expr_dtype

from .ir_walk import StmtWalker, dtype_bytes, int_extent

WARPGROUP = 128
# (parent, child) scope of `ScopeIdDef.scope` (the ScopeBinding enum of TVM's
# tirx/exec_scope.h) -> the id of thread `t` of a block in that scope
_SCOPE_ID = {3: lambda t: t // WARPGROUP, 4: lambda t: t // 32,
             5: lambda t: t % WARPGROUP // 32, 6: lambda t: t % 32, 7: lambda t: t,
             8: lambda t: t % WARPGROUP}
_LANES = {3: WARPGROUP, 4: 32, 7: 1}      # threads per id of a scope under the CTA
_CTA_SCOPES = (1, 2)                      # kernel -> cta, cluster -> cta
_SHAPE = re.compile(r"^m(\d+)n(\d+)k(\d+)$")
# the binary expression nodes `value` evaluates (non-negative index arithmetic: TIR's
# truncating Div / Mod agree with the floor forms there)
BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
          "FloorDiv": lambda a, b: a // b, "Div": lambda a, b: a // b,
          "FloorMod": lambda a, b: a % b, "Mod": lambda a, b: a % b, "Min": min, "Max": max,
          "EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "LT": lambda a, b: a < b,
          "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b, "GE": lambda a, b: a >= b,
          "And": lambda a, b: a and b, "Or": lambda a, b: a or b}


@dataclass(frozen=True)
class LoopInfo:
    var: object
    extent: int
    unrolled: bool


@dataclass
class CallInfo:
    """One instruction call: its name (without "tirx."), arguments, the loops around it
    (outermost first) and the warpgroups that reach it."""

    name: str
    args: list
    loops: tuple
    warpgroups: frozenset
    conditions: tuple = ()     # (condition, the branch taken) around it, outermost first

    def repeat(self, inner_of: int = 0) -> int:
        """How often it runs per thread inside loop `inner_of` (0: all loops)."""
        out = 1
        for lp in self.loops[inner_of:]:
            out *= lp.extent
        return out

    def k_loop(self) -> int | None:
        """Index of its innermost loop that is not unrolled (the main loop's step), or None."""
        return next((i for i in range(len(self.loops) - 1, -1, -1)
                     if not self.loops[i].unrolled), None)


@dataclass
class TirxKernel:
    """What a TIRx kernel holds (see the module docstring)."""

    grid: int = 1                       # CTAs launched
    threads: int = 0                    # threads per CTA
    scope_vars: dict = field(default_factory=dict)   # var -> ScopeBinding value
    calls: list = field(default_factory=list)        # CallInfo
    allocs: list = field(default_factory=list)       # (name, scope, bytes)
    global_stores: list = field(default_factory=list)  # (bytes, vector) per store
    tensor_maps: dict = field(default_factory=dict)  # map var -> (dtype bytes, box, buffer)

    @property
    def warpgroups(self) -> int:
        return max(self.threads // WARPGROUP, 1)

    def named(self, *parts: str) -> list:
        """The calls whose instruction name contains every one of `parts`."""
        return [c for c in self.calls if all(p in c.name for p in parts)]

    def thread_env(self, t: int) -> dict:
        """Values of the scope-id variables of thread `t` of a CTA (the CTA id absent)."""
        return {v: _SCOPE_ID[s](t) for v, s in self.scope_vars.items() if s in _SCOPE_ID}


def wgmma_shape(call: CallInfo) -> tuple[int, int, int] | None:
    """(m, n, k) of a wgmma multiply-accumulate call, from its shape modifier."""
    for a in call.args:
        if type(a).__name__ == "StringImm":
            m = _SHAPE.match(str(a.value))
            if m:
                return int(m[1]), int(m[2]), int(m[3])
    return None


def value(e, env: dict):
    """An integer (or boolean) expression evaluated with variables from `env`; None
    when it depends on anything else."""
    kind = type(e).__name__
    if kind == "IntImm":
        return int(e.value)
    if kind == "Var":
        return env.get(e)
    if kind == "Cast":
        return value(e.value, env)
    if kind == "Not":
        a = value(e.a, env)
        return None if a is None else not a
    op = BINARY.get(kind)
    if op is None:
        return None
    a = value(e.a, env)
    if a is None:
        return None
    b = value(e.b, env)
    if b is None or (kind in ("FloorDiv", "Div", "FloorMod", "Mod") and b == 0):
        return None
    return op(a, b)


def loaded(e):
    """The buffer load (`TensorLoad`) an address expression points at (through
    `address_of`, `cvta_generic_to_shared`, `reinterpret`), or None."""
    while type(e).__name__ == "Call" and len(e.args):
        e = e.args[-1] if str(e.op.name).endswith("reinterpret") else e.args[0]
    return e if type(e).__name__ == "TensorLoad" else None


def pointed_var(e):
    """The variable an address expression takes the address of (a tensor map), or None."""
    while type(e).__name__ == "Call" and len(e.args):
        e = e.args[-1]
    return e if type(e).__name__ == "Var" else None


def _pointer(data):
    """The buffer of `buffer_data(buffer)` (what `A.data` reads as), else `data` itself."""
    if type(data).__name__ == "Call" and str(data.op.name).endswith("buffer_data"):
        return data.args[0]
    return data


class _Reader(StmtWalker):
    """The walk; its context is (loops, warpgroups, conditions), warpgroups None for
    'all'."""

    def __init__(self, func):
        self.k = TirxKernel()
        self.is_tirx = False
        # bytes of one element of each parameter buffer (by buffer and data pointer) and
        # of each buffer declared over one (by name)
        self.elements, self.views = {}, {}
        for p in func.params:
            try:
                data, dtype = p.data, str(p.dtype)
            except AttributeError:       # a plain handle, not a buffer
                continue
            self.elements[p] = self.elements[data] = dtype_bytes(dtype)

    def stmt(self, s, *ctx) -> None:
        kind = type(s).__name__
        if kind == "ScopeIdDefStmt":
            self.scope(getattr(s, "def"))
        elif kind == "AllocBuffer":
            b = s.buffer
            size = dtype_bytes(str(b.dtype))
            for d in b.shape:
                size *= int(d) if type(d).__name__ == "IntImm" else 1
            self.k.allocs.append((str(b.name), str(b.scope()), size))
        elif kind == "DeclBuffer" and _pointer(s.data) in self.elements:
            # a view of a parameter's memory (`decl_buffer(..., data=C.data)`)
            self.views[str(s.buffer.name)] = self.elements[_pointer(s.data)]
        elif kind == "IfThenElse":
            self.branch(s, *ctx)
        elif kind == "SBlockRealize" and not self.is_tirx:
            return           # a block before any scope id: an s_tir schedule, not TIRx
        else:
            super().stmt(s, *ctx)

    def scope(self, d) -> None:
        self.is_tirx = True
        scope, ext = int(d.scope), d.extents
        sizes = [int(x) if type(x).__name__ == "IntImm" else 1 for x in (ext or [])]
        total = 1
        for x in sizes:
            total *= x
        if scope in _CTA_SCOPES:
            self.k.grid *= total
        if scope in _LANES:
            self.k.threads = max(self.k.threads, total * _LANES[scope])
        for v in d.def_ids:
            self.k.scope_vars[v] = scope

    def branch(self, s, loops, wgs, conds) -> None:
        wgs = frozenset(range(self.k.warpgroups)) if wgs is None else wgs
        then, other = set(), set()
        for w in wgs:
            first = value(s.condition, self.k.thread_env(w * WARPGROUP))
            seen = {first} if first is None else \
                {value(s.condition, self.k.thread_env(t))
                 for t in range(w * WARPGROUP, (w + 1) * WARPGROUP)}
            if seen == {True}:
                then.add(w)
            elif seen == {False}:
                other.add(w)
            else:                    # threads of the warpgroup differ, or it depends on more
                then.add(w)
                other.add(w)
        if then:
            self.stmt(s.then_case, loops, frozenset(then), conds + ((s.condition, True),))
        if other and s.else_case is not None:
            self.stmt(s.else_case, loops, frozenset(other), conds + ((s.condition, False),))

    def loop(self, s, loops, wgs, conds) -> None:
        lp = LoopInfo(s.loop_var, int_extent(s), int(s.kind) == 3)
        self.stmt(s.body, loops + (lp,), wgs, conds)

    def store(self, s, loops, wgs, conds) -> None:
        if str(s.buffer.scope()).startswith("global"):
            # a vector value, or a word packing several elements of the parameter whose
            # memory the buffer views (a pair of fp16 written as one uint32)
            dtype = expr_dtype(s.value)
            size = dtype_bytes(dtype)
            element = self.views.get(str(s.buffer.name), self.elements.get(s.buffer, size))
            vector = ("x" in dtype and dtype.rsplit("x", 1)[1].isdigit()) or size > element
            self.k.global_stores.append((size, bool(vector)))

    def evaluate(self, s, loops, wgs, conds) -> None:
        e = s.value
        if type(e).__name__ != "Call" or type(e.op).__name__ != "Op":
            return
        name = str(e.op.name).removeprefix("tirx.")
        args = list(e.args)
        if name == "tvm_call_packed" and args and type(args[0]).__name__ == "StringImm" \
                and str(args[0].value) == "runtime.cuTensorMapEncodeTiled":
            self.tensor_map(args)
            return
        wgs = frozenset(range(self.k.warpgroups)) if wgs is None else wgs
        self.k.calls.append(CallInfo(name, args, loops, wgs, conds))

    def tensor_map(self, args) -> None:
        """cuTensorMapEncodeTiled(map, dtype, rank, address, sizes[rank],
        strides[rank - 1], box[rank], element strides[rank], ...)."""
        try:
            rank = int(args[3].value)
            box = tuple(int(a.value) for a in args[5 + 2 * rank - 1:5 + 3 * rank - 1])
        except (AttributeError, IndexError, TypeError, ValueError):
            return
        buf = _pointer(args[4])
        name = str(buf.name) if type(buf).__name__ == "Var" else str(buf)
        self.k.tensor_maps[args[1]] = (dtype_bytes(str(args[2].value)), box, name)


def read_tirx(func) -> TirxKernel | None:
    """The kernel of a TIRx PrimFunc, or None for a function that is not TIRx (no scope
    ids: an s_tir schedule)."""
    r = _Reader(func)
    r.stmt(func.body, (), None, ())
    return r.k if r.is_tirx else None
