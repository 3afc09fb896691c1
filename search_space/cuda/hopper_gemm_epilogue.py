"""The epilogue of the Hopper GEMM (`hopper_gemm.py`): what a task computes from each
element of its GEMM's result C before it reaches the function's output.

A task whose blocks are one GEMM followed by a chain of elementwise consumers of C
(bias adds, activations such as GELU through erf or tanh, ReLU, casts, scaling, a
residual add, ...) ending in the function's output is computed by one kernel: C stays
in the accumulator registers, and each output element is the consumers' expressions
composed into one, with C's element in place of every read of it. `extract` reads that
expression off the task's own blocks (no pattern is matched: whatever the consumers
state is carried over), in terms of C's element `c` and the element's batch, row and
column (`b`, `i`, `j`), its other reads being loads of the function's parameters.

What does not fit is refused (`extract` returns a reason): a consumer that reads C or
an intermediate at another element than its own, a reduction after the GEMM, a
parameter read at indices other than the element's own batch / row / column variables
or constants (a bias [N] or [M], a residual [M, N], a batched [B, N] operand fit), a
consumer that reads the GEMM's inputs, or more than one output.

`Epilogue.value` instantiates the expression for one accumulator of the kernel;
`pair_value` packs two adjacent columns' values into one unsigned word of twice the
output's width, the value of a vector store (low half the even column).
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_NODES = 4000          # larger composed expressions are refused (compile time)
PACKED = {8: "uint16", 16: "uint32", 32: "uint64"}   # output bits -> a pair's word


@dataclass(frozen=True, eq=False)
class Epilogue:
    """An output element as an expression of C's element `c` (dtype `c_dtype`) and the
    element's batch, row and column variables `b`, `i`, `j`; loads of the function's
    other parameters in it keep the task's own buffers (the kernel's parameters)."""

    expr: object
    c: object
    b: object
    i: object
    j: object
    c_dtype: str
    out_dtype: str
    operands: tuple = ()      # the parameters it reads (buffers), in parameter order

    def value(self, acc, bb, row, col):
        """The output element for fp32 accumulator `acc` at (`bb`, `row`, `col`); the
        operands are read through one-dimensional views of their data (`flat_views`),
        as device code must read a parameter it does not declare."""
        from tvm import tirx

        c = acc if self.c_dtype == "float32" else tirx.Cast(self.c_dtype, acc)
        subst = {_key(self.c): c, _key(self.b): bb, _key(self.i): row, _key(self.j): col}
        views = {_key(p): v for p, v in zip(self.operands, self.flat_views())}

        def leaf(e):
            if type(e).__name__ != "TensorLoad" or _key(e.source) not in views:
                return None
            flat = tirx.const(0, "int32")
            for x, d in zip(e.indices, e.source.shape):
                flat = flat * int(d) + rebuild(x, subst)
            return tirx.BufferLoad(views[_key(e.source)], [flat])
        return rebuild(self.expr, subst, leaf)

    def flat_views(self) -> tuple:
        """A one-dimensional buffer over each operand's data, made once."""
        from tvm import tirx

        if "_views" not in self.__dict__:
            object.__setattr__(self, "_views", tuple(tirx.decl_buffer(
                (_size(p),), str(p.dtype), f"{p.name}_flat", data=p.data)
                for p in self.operands))
        return self.__dict__["_views"]


def identity(c_dtype: str) -> Epilogue:
    """The epilogue of a plain GEMM: the output is C."""
    c, (b, i, j) = _vars(c_dtype)
    return Epilogue(c, c, b, i, j, c_dtype, c_dtype)


def pair_value(first, second, bits: int):
    """Two `bits`-wide values packed into one unsigned word of twice the width, `first`
    in the low half (the lower address on a little-endian GPU): the value of one vector
    store of two adjacent output columns."""
    from tvm import tirx

    word, half = PACKED[bits], f"uint{bits}"

    def widen(v):
        dt = str(_dtype(v))
        raw = _bf16_bits(v) if dt == "bfloat16" else v if dt == half else \
            tirx.reinterpret(half, v)
        return tirx.Cast(word, raw)
    return tirx.BitwiseOr(widen(first), tirx.LShift(widen(second),
                                                    tirx.const(bits, word)))


def _bf16_bits(v):
    """The 16 bits of bfloat16 value `v`, by integer arithmetic on fp32 bits: for a
    rounding of an fp32 value (the usual last cast), round to nearest even (NaN stays a
    quiet NaN), else the top half of `v`'s exact fp32 value. Integer arithmetic gives
    the same bits on every target, where a bf16 reinterpret does not survive TVM's
    bf16 legalisation for the CPU (which also drops a rounding cast's round trip)."""
    from tvm import tirx

    u32 = (lambda k: tirx.const(k, "uint32"))
    if isinstance(v, tirx.Cast) and str(_dtype(v.value)) == "float32":
        x = v.value     # repeated, not let-bound: TVM's CPU bf16 legalisation
        u = tirx.reinterpret("uint32", x)   # mistreats a let (compilers share it anyway)
        rne = (u + u32(0x7FFF) + ((u >> u32(16)) & u32(1))) >> u32(16)
        return tirx.Cast("uint16", tirx.Select(x != x, u32(0x7FC0), rne))
    raw = tirx.reinterpret("uint32", tirx.Cast("float32", v))
    return tirx.Cast("uint16", raw >> u32(16))


def pairs_fit(n: int, out_dtype: str) -> bool:
    """Whether the write-back stores each pair of adjacent columns (even column first)
    as one word of twice the output's width: rows of an even length keep every pair
    aligned to the word (an output 16-byte aligned, as the kernel's is)."""
    import tvm

    return n % 2 == 0 and tvm.DataType(out_dtype).bits in PACKED


def writeback_twin(batch: int, m: int, n: int, epilogue: Epilogue):
    """The kernel's write-back as a plain function for the CPU: parameters (acc,
    *operands, out) with acc the fp32 GEMM result [batch, M, N], each operand flat (its
    `flat_views` buffer) and out [batch, M, N] in the output dtype -- or [batch, M, N /
    2] words of two columns where the kernel stores pairs (`pairs_fit`) -- each value
    made by the same `Epilogue.value` and `pair_value` as the kernel's, so running it
    checks the extracted epilogue and the packing against the task's own reference."""
    import tvm
    from tvm import tirx
    from tvm.script import tirx as T

    out_dt, value = epilogue.out_dtype, epilogue.value
    pairs = pairs_fit(n, out_dt)
    bits = tvm.DataType(out_dt).bits
    width, word = (n // 2, PACKED[bits]) if pairs else (n, out_dt)

    # fmt: off
    @T.prim_func(s_tir=True, check_well_formed=False)
    def twin(acc: T.Buffer((batch, m, n), "float32"), out: T.Buffer((batch, m, width), word)):
        for bb, i, jj in T.grid(batch, m, width):
            with T.sblock("writeback"):
                vb, vi, vj = T.axis.remap("SSS", [bb, i, jj])
                if pairs:
                    out[vb, vi, vj] = pair_value(value(acc[vb, vi, 2 * vj], vb, vi, 2 * vj),
                                                 value(acc[vb, vi, 2 * vj + 1], vb, vi,
                                                       2 * vj + 1), bits)
                else:
                    out[vb, vi, vj] = value(acc[vb, vi, vj], vb, vi, vj)
    # fmt: on
    acc, out = twin.params
    return tirx.PrimFunc([acc, *epilogue.flat_views(), out], twin.body, twin.ret_type,
                         twin.attrs)


def extract(func, gemm_stmt, consumers, roles_vars, a_buf, b_buf):
    """(Epilogue, None) for the chain `consumers` (block statements after the GEMM block
    `gemm_stmt`, in order) of `func`, or (None, reason). `roles_vars` are the GEMM's
    (batch or None, M, N) iteration variables; `a_buf`, `b_buf` its inputs."""
    from tvm import tirx

    params = list(func.params)
    c_buf = gemm_stmt.writes[0].source
    c_var, out_vars = _vars(str(c_buf.dtype))
    known = {_key(c_buf): c_var}        # buffer -> its element's expression
    lead = roles_vars[0] is not None
    names = (out_vars if lead else out_vars[1:])
    # the GEMM's own element: C[(b,) i, j] in its iteration variables
    if not _indices_are(gemm_stmt.body.indices, [v for v in roles_vars if v is not None]):
        return None, "the GEMM writes C other than at its own element"
    extents = [int(d) for d in c_buf.shape]
    last, read = c_buf, []
    for stmt in consumers:
        problem = _elementwise(stmt, extents)
        if problem:
            return None, problem
        own = [iv.var for iv in stmt.iter_vars]
        index_map = {_key(v): n for v, n in zip(own, names)}
        operands, reason = [], []

        def leaf(e, own=own, index_map=index_map, operands=operands, reason=reason):
            if isinstance(e, tirx.Var):
                return index_map.get(_key(e))
            if type(e).__name__ != "TensorLoad":
                return None
            src = e.source
            if _key(src) in known:
                if not _indices_are(e.indices, own):
                    reason.append(f"{stmt.name_hint} reads {src.name} at another element")
                    return e
                return known[_key(src)]
            if any(src.same_as(p) for p in (a_buf, b_buf)) or \
                    not any(src.same_as(p) for p in params):
                reason.append(f"{stmt.name_hint} reads {src.name}, not an epilogue operand")
                return e
            if not all(_role_or_const(x, own) for x in e.indices):
                reason.append(f"{stmt.name_hint} reads {src.name} at an index other than "
                              "its batch, row, column or a constant")
                return e
            operands.append(src)
            return tirx.BufferLoad(src, [rebuild(x, index_map) for x in e.indices])
        try:
            value = rebuild(stmt.body.value, {}, leaf)
        except ValueError as e:
            return None, str(e)
        if reason:
            return None, reason[0]
        out = stmt.body.buffer
        known[_key(out)] = value
        last = out
        read += operands
    expr = known[_key(last)]
    if _count(expr) > MAX_NODES:
        return None, f"an epilogue of more than {MAX_NODES} operations"
    if not last.same_as(params[-1]):
        return None, "the chain does not end in the function's last parameter"
    written = [s.body.buffer for s in consumers[:-1]] + [c_buf] * bool(consumers)
    if any(w.same_as(p) for w in written for p in params):
        return None, "an intermediate result is also an output"
    used = [p for p in params if any(p.same_as(q) for q in read)]
    return Epilogue(expr, c_var, *out_vars, str(c_buf.dtype), str(last.dtype),
                    tuple(used)), None


def _elementwise(stmt, extents) -> str | None:
    """Why block `stmt` is not an elementwise map over C's elements, or None."""
    from tvm import tirx

    if stmt.init is not None or any(int(iv.iter_type) != 0 for iv in stmt.iter_vars):
        return f"{stmt.name_hint} reduces after the GEMM"
    if not isinstance(stmt.body, tirx.BufferStore):
        return f"{stmt.name_hint} is not an elementwise store"
    doms = [(int(iv.dom.min), int(iv.dom.extent)) for iv in stmt.iter_vars]
    if doms != [(0, e) for e in extents]:
        return f"{stmt.name_hint} does not map C's elements one to one"
    if not _indices_are(stmt.body.indices, [iv.var for iv in stmt.iter_vars]):
        return f"{stmt.name_hint} writes other than at its own element"
    return None


def _indices_are(indices, vars_) -> bool:
    return len(indices) == len(vars_) and all(x.same_as(v) for x, v in zip(indices, vars_))


def _role_or_const(x, own) -> bool:
    from tvm import tirx

    return isinstance(x, tirx.IntImm) or any(x.same_as(v) for v in own)


def _vars(c_dtype: str):
    from tvm import tirx

    return tirx.Var("c", c_dtype), tuple(tirx.Var(n, "int32") for n in ("b", "i", "j"))


def _key(node) -> int:
    """A dictionary key for a TIR object by identity (TIR expressions overload ==)."""
    return node.__chandle__()


def _size(buf) -> int:
    out = 1
    for d in buf.shape:
        out *= int(d)
    return out


def _dtype(e) -> str:
    from ..tir import expr_dtype

    return expr_dtype(e)


def _count(e) -> int:
    from ..tir import iter_nodes

    return sum(1 for _ in iter_nodes(e))


def rebuild(e, subst: dict, leaf=None):
    """`e` rebuilt bottom-up with variables replaced by `subst` (keyed by `_key`) and
    any node for which `leaf` returns an expression replaced by it; ValueError for a
    node this rebuilder does not know (the epilogue is then refused)."""
    from tvm import ir, tirx

    if leaf is not None:
        got = leaf(e)
        if got is not None:
            return got
    if isinstance(e, tirx.Var):
        return subst.get(_key(e), e)
    if isinstance(e, (tirx.IntImm, tirx.FloatImm)):
        return e
    go = (lambda x: rebuild(x, subst, leaf))
    if type(e).__name__ == "TensorLoad":
        return tirx.BufferLoad(e.source, [go(x) for x in e.indices])
    if isinstance(e, tirx.Cast):
        return tirx.Cast(_dtype(e), go(e.value))
    if isinstance(e, tirx.Not):
        return tirx.Not(go(e.a))
    if isinstance(e, tirx.Select):
        return tirx.Select(go(e.condition), go(e.true_value), go(e.false_value))
    if isinstance(e, ir.Call):
        return ir.Call(e.op, [go(x) for x in e.args], attrs=e.attrs, ty_args=e.ty_args,
                       ret_ty=e.ty)
    for cls in _binary():
        if type(e) is cls:
            return cls(go(e.a), go(e.b))
    raise ValueError(f"an epilogue expression holds {type(e).__name__}")


def _binary() -> tuple:
    from tvm import tirx

    return (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod,
            tirx.Min, tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE,
            tirx.And, tirx.Or, tirx.BitwiseAnd, tirx.BitwiseOr, tirx.BitwiseXor,
            tirx.LShift, tirx.RShift)
