"""A real search space small enough to measure whole: a 64^3 fp32 matmul whose one
sketch splits i and j in two (7 x 7 ways), vectorises the inner j loop or not, and
unrolls the reduction or not: 196 candidates plus the unscheduled default.

tests/data/tiny_matmul.jsonl holds a measurement of every candidate on this machine
kind (made by `python tests/data/make_tiny_matmul_log.py`), so the search can be tested
on real latencies with the simulated measurer, never building anything.
"""
from __future__ import annotations

import itertools

from search_space import Candidate, SearchSpace
from search_space.sketch import DefaultSketch, Sketch

SHAPE = {"M": 64, "N": 64, "K": 64}
LOG = "tests/data/tiny_matmul.jsonl"
_SPLITS = tuple((a, 64 // a) for a in (1, 2, 4, 8, 16, 32, 64))


class SplitSketch(Sketch):
    """i0 j0 k i1 j1 with i0 parallel; j1 vectorised and k unrolled by choice."""

    name = "split"

    def apply(self, sch, decide) -> None:
        block = sch.get_sblock("C")
        i, j, k = sch.get_loops(block)
        i0, i1 = sch.split(i, list(decide.tile("i", 64, 2)))
        j0, j1 = sch.split(j, list(decide.tile("j", 64, 2)))
        sch.reorder(i0, j0, k, i1, j1)
        sch.parallel(i0)
        if decide.choice("vectorize", (0, 1)):
            sch.vectorize(j1)
        unroll = decide.choice("unroll", (0, 16))
        if unroll:
            sch.annotate(k, "pragma_auto_unroll_max_step", unroll)


class TinyRules:
    def sketches(self, task, target):
        return [DefaultSketch(), SplitSketch()]

    def check(self, mod, target):
        return None


def make_space(task, target) -> SearchSpace:
    """A `space_factory` for the tuning loop."""
    return SearchSpace(task, target, TinyRules())


def all_candidates() -> list[Candidate]:
    """Every candidate of the space, the default first."""
    out = [Candidate("default")]
    for i, j, vec, unroll in itertools.product(_SPLITS, _SPLITS, (0, 1), (0, 16)):
        out.append(Candidate.make("split", {"i": i, "j": j, "vectorize": vec,
                                            "unroll": unroll}))
    return out
