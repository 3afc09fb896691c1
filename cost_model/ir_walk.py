"""Walk a scheduled s_tir PrimFunc once and turn it into plain Python data.

Feature extraction reads the program many times (one footprint per loop level, per
buffer, per cache size), and every attribute access on a TVM object crosses the FFI.
So the program is converted once into small tuples: loops with their kind and extent,
and for every buffer store its loop nest, its arithmetic and its buffer accesses, with
index expressions rewritten in terms of loop ids (block iteration variables are replaced
by their bindings). Everything downstream is pure Python.

Index trees: ("c", int) constant, ("v", loop_id) loop variable, (op, a, b) for op in
+ - * // % min max, and ("?",) for anything the footprint analysis cannot bound.

`StmtWalker` is the one traversal of statements in the package: this module's walker and
the tensor-core counts (`tensor_core.py`) differ only in what they do at loops, blocks,
stores and evaluated calls.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from search_space.tir import expr_dtype

_KINDS = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread"}
_INDEX_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "//", "FloorMod": "%",
              "Div": "//", "Mod": "%", "Min": "min", "Max": "max"}
_UNKNOWN = ("?",)


@dataclass(frozen=True)
class Loop:
    id: int
    extent: int
    kind: str          # serial | parallel | vectorized | unrolled | thread
    tag: str = ""      # thread tag (blockIdx.x, threadIdx.y, vthread, ...) when bound
    unroll: int = 0    # auto-unroll max step annotated on this loop


@dataclass(frozen=True)
class BufferInfo:
    name: str
    shape: tuple[int, ...]
    bytes_per_elem: int
    scope: str


@dataclass
class Access:
    buffer: BufferInfo
    indices: tuple        # index trees, one per dimension
    write: bool


@dataclass
class Store:
    """One buffer store (the body of a leaf block) with everything around it."""

    block: str
    loops: tuple[Loop, ...]
    accesses: list[Access]
    ops: dict[str, int]    # float add/mul/div/math/cmp/select/cast and int ops per iteration
    unroll: int = 0        # auto-unroll max step from the enclosing blocks' annotations


@dataclass
class Program:
    stores: list[Store] = field(default_factory=list)
    allocs: list[BufferInfo] = field(default_factory=list)


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of a dtype ("float16x2" -> 4, "float8_e4m3fn" -> 1, a bool
    or sub-byte type -> 1; 4 when it names no width)."""
    if dtype.startswith("bool"):
        return 1
    width = re.search(r"\d+", dtype)
    bits = int(width.group()) if width else 32
    base, _, lanes = dtype.rpartition("x")
    count = int(lanes) if base and lanes.isdigit() else 1
    return max(1, bits * count // 8)


def _unroll_value(annotations) -> int:
    best = 0
    for key in annotations.keys():
        if "unroll" in str(key):
            try:
                best = max(best, int(annotations[key]))
            except (TypeError, ValueError):
                continue
    return best


class StmtWalker:
    """Visits a TIR statement tree in program order. Sequences, both branches of a
    condition and every statement that only wraps a body (AttrStmt, LetStmt, DeclBuffer,
    AllocBuffer, While, ...) pass the walk on with the same context `ctx`; a subclass
    decides what a loop, a block, a store and an evaluated expression mean, and with
    which context their bodies are walked (`walk_body`)."""

    def stmt(self, s, *ctx) -> None:
        kind = type(s).__name__
        if kind == "For":
            self.loop(s, *ctx)
        elif kind == "SeqStmt":
            for child in s.seq:
                self.stmt(child, *ctx)
        elif kind == "SBlockRealize":
            self.block(s, *ctx)
        elif kind == "BufferStore":
            self.store(s, *ctx)
        elif kind == "Evaluate":
            self.evaluate(s, *ctx)
        elif kind == "IfThenElse":
            self.stmt(s.then_case, *ctx)
            if s.else_case is not None:
                self.stmt(s.else_case, *ctx)
        elif hasattr(s, "body"):
            self.stmt(s.body, *ctx)

    def loop(self, s, *ctx) -> None:
        self.stmt(s.body, *ctx)

    def block(self, s, *ctx) -> None:
        self.stmt(s.block.body, *ctx)

    def store(self, s, *ctx) -> None:
        """A buffer store: nothing below it is a statement."""

    def evaluate(self, s, *ctx) -> None:
        """An expression evaluated for its effect (an intrinsic call)."""


def int_extent(loop) -> int:
    """A loop's extent when it is a constant, else 1."""
    return int(loop.extent) if type(loop.extent).__name__ == "IntImm" else 1


class _Walker(StmtWalker):
    def __init__(self):
        self.program = Program()
        self.buffers: dict = {}
        self.next_loop = 0
        self.block_name = ""

    def buffer(self, buf) -> BufferInfo:
        info = self.buffers.get(buf)
        if info is None:
            shape = tuple(int(s) if type(s).__name__ == "IntImm" else 1 for s in buf.shape)
            info = BufferInfo(str(buf.name), shape, dtype_bytes(str(buf.dtype)), str(buf.scope()))
            self.buffers[buf] = info
        return info

    def index(self, e, env) -> tuple:
        kind = type(e).__name__
        if kind == "IntImm":
            return ("c", int(e.value))
        if kind == "Var":
            return env.get(e, _UNKNOWN)
        op = _INDEX_OPS.get(kind)
        if op is not None:
            return (op, self.index(e.a, env), self.index(e.b, env))
        if kind == "Cast":
            return self.index(e.value, env)
        return _UNKNOWN

    def count(self, e, env, ops: dict, accesses: list) -> None:
        """Arithmetic of a stored value, and the buffers it loads."""
        kind = type(e).__name__
        if kind == "TensorLoad":
            accesses.append(Access(self.buffer(e.source),
                                   tuple(self.index(i, env) for i in e.indices), False))
            return
        if kind in ("IntImm", "FloatImm", "Var", "StringImm"):
            return
        is_float = "float" in expr_dtype(e)
        if kind in ("Add", "Sub", "Mul", "Div", "FloorDiv", "FloorMod", "Mod"):
            name = {"Add": "add", "Sub": "add", "Mul": "mul"}.get(kind, "div")
            _bump(ops, name if is_float else "int")
            self.count(e.a, env, ops, accesses)
            self.count(e.b, env, ops, accesses)
            return
        if kind in ("Min", "Max", "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or"):
            _bump(ops, "cmp")
            self.count(e.a, env, ops, accesses)
            self.count(e.b, env, ops, accesses)
            return
        if kind == "Select":
            _bump(ops, "select")
            for part in (e.condition, e.true_value, e.false_value):
                self.count(part, env, ops, accesses)
            return
        if kind == "Cast":
            _bump(ops, "cast")
            self.count(e.value, env, ops, accesses)
            return
        if kind == "Call":
            name = str(e.op.name) if hasattr(e.op, "name") else ""
            _bump(ops, "select" if name.endswith("if_then_else") else "math")
            for a in e.args:
                self.count(a, env, ops, accesses)
            return
        if kind == "Let":  # the bound value once, then the body that uses it
            self.count(e.value, env, ops, accesses)
            self.count(e.body, env, ops, accesses)
            return
        for attr in ("a", "value"):  # Not, Broadcast, ...: count what is inside
            if hasattr(e, attr):
                self.count(getattr(e, attr), env, ops, accesses)
                return

    def loop(self, s, loops, env, unroll) -> None:
        extent = int_extent(s)
        tag = str(s.thread_binding.thread_tag) if s.thread_binding is not None else ""
        outer = next((lp for lp in loops if tag and lp.tag == tag), None)
        if outer is not None:
            # a cooperative fetch binds threadIdx.x again inside a threadIdx.x loop: it
            # is the same hardware thread index, not a new loop over threads
            inner = dict(env)
            inner[s.loop_var] = ("v", outer.id)
            self.stmt(s.body, loops, inner, unroll)
            return
        loop = Loop(self.next_loop, extent, _KINDS.get(int(s.kind), "serial"), tag,
                    _unroll_value(s.annotations))
        self.next_loop += 1
        inner = dict(env)
        inner[s.loop_var] = ("v", loop.id)
        self.stmt(s.body, loops + (loop,), inner, max(unroll, loop.unroll))

    def block(self, s, loops, env, unroll) -> None:
        blk = s.block
        inner = dict(env)
        for iv, value in zip(blk.iter_vars, s.iter_values):
            inner[iv.var] = self.index(value, env)
        for buf in blk.alloc_buffers:
            self.program.allocs.append(self.buffer(buf))
        outer, self.block_name = self.block_name, str(blk.name_hint)
        # the reduction init runs once per output element: negligible next to the body
        self.stmt(blk.body, loops, inner, max(unroll, _unroll_value(blk.annotations)))
        self.block_name = outer

    def store(self, s, loops, env, unroll) -> None:
        ops: dict[str, int] = {}
        accesses = [Access(self.buffer(s.buffer),
                           tuple(self.index(i, env) for i in s.indices), True)]
        self.count(s.value, env, ops, accesses)
        self.program.stores.append(Store(self.block_name, loops, accesses, ops, unroll))


def _bump(ops: dict, key: str) -> None:
    ops[key] = ops.get(key, 0) + 1


def walk(func) -> Program:
    """The stores, loops, accesses and allocations of a scheduled PrimFunc."""
    w = _Walker()
    w.stmt(func.body, (), {}, 0)
    return w.program
