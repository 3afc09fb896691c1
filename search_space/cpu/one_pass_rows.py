"""`rows_one_pass`: the row-wise sketch on the one-pass form of a program's row
statistics (softmax's max and sum of exp, layer norm's mean and variance; see
`one_pass.py`).

The rewrite's lane count is this sketch's first decision (`one_pass.lanes`: vector
widths up to the row length; a row that is no whole number of them leaves a tail the
rewrite folds in); the rewritten program is then scheduled
as `rows` schedules any program of row reductions and elementwise stages. Offered to
every task whose blocks hold such a pair, found by analysis, never by names.
"""
from __future__ import annotations

from ..analysis import analyse
from ..blocks import blocks
from ..decisions import Decider
from ..sketch import Sketch
from .common import CpuParams
from .one_pass import one_pass_form, row_extents
from .reduction import row_sketches, tail_widths


class OnePassRowSketch(Sketch):
    """`rows` on the one-pass rewrite, one rewrite per lane count."""

    name = "rows_one_pass"
    math_variants = True

    def __init__(self, func, widths: tuple[int, ...], params: CpuParams):
        self.params = params
        self.widths = widths
        self._func = func
        self._forms: dict[int, tuple] = {}   # lanes -> (program, the `rows` sketch of it)

    def _form(self, width: int):
        form = self._forms.get(width)
        if form is None:
            import tvm
            from tvm import s_tir

            prog = one_pass_form(self._func, width)
            sch = s_tir.Schedule(tvm.IRModule({"main": prog}))
            infos = [analyse(sch, b) for b in blocks(sch)]
            (rows,) = row_sketches(sch, infos, self.params)
            form = self._forms[width] = (prog, rows)
        return form

    def program(self, func, decide: Decider):
        return self._form(decide.choice("one_pass.lanes", self.widths))[0]

    def apply(self, sch, decide: Decider) -> None:
        # `program` has made the lane decision on this decider
        self._form(decide.made["one_pass.lanes"])[1].apply(sch, decide)


def one_pass_sketches(sch, infos, params: CpuParams) -> list[OnePassRowSketch]:
    """`rows_one_pass` for a program that `rows` schedules and whose row statistics
    have a one-pass form."""
    if not row_sketches(sch, infos, params):
        return []
    extents = row_extents(sch.mod["main"])
    if not extents:
        return []
    widths = tail_widths(min(extents), params)
    return [OnePassRowSketch(sch.mod["main"], widths, params)]
