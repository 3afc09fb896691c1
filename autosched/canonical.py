"""Canonical, version-stable serialisation of a TE computation.

We walk the tensor graph ourselves instead of using TVM's structural hash (which
differs across platforms) or its printer (which changes between releases). Variables
are named by position, tensors by topological index, so renaming nothing changes
the text and any change of shape, dtype or arithmetic does.
"""
from __future__ import annotations

import hashlib
import json

from search_space.tir import expr_dtype

_BINARY = (
    "Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max",
    "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or",
)


def _topo_tensors(outputs) -> list:
    order, seen = [], set()

    def visit(t):
        op = t.op
        if op in seen:
            return
        seen.add(op)
        for inp in op.input_tensors:
            visit(inp)
        order.append(op)

    for t in outputs:
        visit(t)
    return order


class _Serializer:
    def __init__(self, ops: list):
        self.op_index = {op: i for i, op in enumerate(ops)}
        self.vars: dict = {}

    def bind(self, var) -> str:
        name = f"v{len(self.vars)}"
        self.vars[var] = name
        return name

    def expr(self, e):  # noqa: C901 - one dispatch table over node kinds
        from tvm import tirx

        kind = type(e).__name__
        if isinstance(e, (int, float, str, bool)):
            return e
        if isinstance(e, tirx.IntImm):
            return [f"int:{expr_dtype(e)}", int(e.value)]
        if isinstance(e, tirx.FloatImm):
            return [f"float:{expr_dtype(e)}", float(e.value)]
        if isinstance(e, tirx.Var):
            return self.vars.get(e, f"free:{e.name}:{expr_dtype(e)}")
        if kind in _BINARY:
            return [kind, expr_dtype(e), self.expr(e.a), self.expr(e.b)]
        if kind == "ProducerLoad":
            return ["load", self.op_index[e.producer.op], e.producer.value_index,
                    [self.expr(i) for i in e.indices]]
        if isinstance(e, tirx.Cast):
            return ["cast", expr_dtype(e), self.expr(e.value)]
        if isinstance(e, tirx.Not):
            return ["not", self.expr(e.a)]
        if isinstance(e, tirx.Select):
            return ["select", self.expr(e.condition), self.expr(e.true_value),
                    self.expr(e.false_value)]
        if kind == "Call" and str(e.op.name) == "te.tensor_load":
            tensor = e.args[0]
            return ["load", self.op_index[tensor.op], int(tensor.value_index),
                    [self.expr(i) for i in list(e.args)[1:]]]
        if kind == "Call":
            return ["call", str(e.op.name), expr_dtype(e), [self.expr(a) for a in e.args]]
        if isinstance(e, tirx.Let):
            name = self.bind(e.var)
            return ["let", name, self.expr(e.value), self.expr(e.body)]
        if isinstance(e, tirx.Reduce):
            return self.reduce(e)
        if kind == "StringImm":
            return ["str", str(e.value)]
        return [kind, str(e)]

    def reduce(self, e):
        comb = e.combiner
        for v in list(comb.lhs) + list(comb.rhs):
            self.bind(v)
        axes = [[self.bind(iv.var), self.expr(iv.dom.min), self.expr(iv.dom.extent)]
                for iv in e.axis]
        return ["reduce",
                [self.expr(x) for x in comb.result],
                [self.expr(x) for x in comb.identity_element],
                [self.expr(x) for x in e.source],
                axes, self.expr(e.condition), int(e.value_index)]

    def op(self, op):
        kind = type(op).__name__
        if kind == "PlaceholderOp":
            return ["placeholder", [self.expr(s) for s in op.shape], str(op.dtype)]
        if kind == "ComputeOp":
            axes = [[self.bind(iv.var), self.expr(iv.dom.extent)] for iv in op.axis]
            body = [self.expr(b) for b in op.body]
            return ["compute", axes, body, [str(op.output(i).dtype) for i in range(op.num_outputs)]]
        raise ValueError(f"unsupported TE operation {kind}")


def canonical_text(inputs, outputs) -> str:
    """JSON text describing the computation from `inputs` to `outputs`."""
    ops = _topo_tensors(list(outputs))
    ser = _Serializer(ops)
    graph = [ser.op(op) for op in ops]
    arg_ops = [ser.op_index[t.op] for t in list(inputs) + list(outputs)]
    return json.dumps({"ops": graph, "args": arg_ops}, sort_keys=True, separators=(",", ":"))


def task_key(canonical: str, args: dict) -> str:
    """Hash of the canonical computation and the workload's argument values."""
    blob = json.dumps({"computation": canonical, "args": args}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]
