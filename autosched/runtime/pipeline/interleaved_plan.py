"""Interleaved 1F1B candidates: chunk boundaries and actions within a per-rank budget.

For v virtual stages per rank the layers split into C = S * v contiguous chunks (chunk c
on rank c % S, interleaved.py). Rank r holds at most H_r chunk micro-batches at once
(interleaved.held_chunk_counts), so every chunk of rank r gets the fastest actions whose
bytes per micro-batch (its part outside the layers included) fit budget / H_r: whatever
mix of its chunks is in flight, the rank then stays within the budget. That share is
safe, not always the loosest; the simulation (simulate_interleaved) is the judge of the
step time and checks every rank's peak.

Which boundaries: every composition of the layers into C chunks while there are at most
partition.EXHAUSTIVE of them, else those of a min-max dynamic program over the chunks'
fastest fitting times (the step of a balanced interleaved pipeline grows with its
slowest chunk).
"""
from __future__ import annotations

import itertools
import math

from .costs import Link, ModelCosts, frontiers, stage_extra
from .interleaved_schedule import held_chunk_counts, interleaving_problem, simulate_interleaved
from .partition import BYTES_SLACK, EXHAUSTIVE, Candidate
from .schedule import StageCost


class InterleavedSearch:
    """Interleaved candidates of one model, rank count, v and micro-batch count
    (`ranges`: costs.frontiers(model), when already built)."""

    def __init__(self, model: ModelCosts, stages: int, virtual: int, micro_batches: int,
                 budget: float, link: Link, exhaustive: int = EXHAUSTIVE,
                 ranges: dict | None = None):
        problem = interleaving_problem(stages, virtual, micro_batches, len(model.layers))
        if problem:
            raise ValueError(problem)
        self.model, self.S, self.v, self.M = model, stages, virtual, micro_batches
        self.C = stages * virtual
        self.budget, self.link, self.exhaustive = budget, link, exhaustive
        self.frontiers = ranges if ranges is not None else frontiers(model)
        held = held_chunk_counts(stages, virtual, micro_batches)
        self.held = [held[c % stages] for c in range(self.C)]
        self.extras = [stage_extra(model, c, self.C) for c in range(self.C)]

    def _point(self, a: int, b: int, c: int):
        room = self.budget / self.held[c] - self.extras[c].bytes
        return self.frontiers[a, b].fastest_within(room * (1 + BYTES_SLACK))

    def evaluate(self, bounds: tuple) -> Candidate | None:
        """The candidate of these chunk boundaries, or None if a chunk cannot fit."""
        points, costs = [], []
        for c in range(self.C):
            point = self._point(bounds[c], bounds[c + 1], c)
            if point is None:
                return None
            extra = self.extras[c]
            send = self.link.seconds(self.model.layers[bounds[c + 1]].in_bytes) \
                if c + 1 < self.C else 0.0
            points.append(point)
            costs.append(StageCost(point.forward_s + extra.forward_s,
                                   point.backward_s + extra.backward_s,
                                   point.bytes + extra.bytes, send))
        sim = simulate_interleaved(costs, self.S, self.M)
        if any(s.peak_bytes > self.budget * (1 + BYTES_SLACK) for s in sim.stages):
            return None
        actions = tuple(a for p in points for a in p.actions)
        return Candidate(tuple(bounds), actions, costs, [], sim)

    def best(self) -> Candidate | None:
        best = None
        for bounds in self.boundaries():
            cand = self.evaluate(bounds)
            if cand is not None and (best is None or cand.step_s < best.step_s):
                best = cand
        return best

    def boundaries(self):
        L, C = len(self.model.layers), self.C
        if math.comb(L - 1, C - 1) <= self.exhaustive:
            for cut in itertools.combinations(range(1, L), C - 1):
                yield (0, *cut, L)
            return
        bounds = self._min_max()
        if bounds is not None:
            yield bounds

    def _min_max(self):
        """The boundaries whose slowest chunk (fastest fitting actions) is fastest."""
        L, C = len(self.model.layers), self.C
        table = {0: (0.0, (0,))}                # next chunk's first layer -> (max, bounds)
        for c in range(C):
            nxt: dict = {}
            for a, (worst, bounds) in table.items():
                ends = range(a + 1, L - (C - 2 - c)) if c < C - 1 else (L,)
                for b in ends:
                    point = self._point(a, b, c)
                    if point is None:
                        continue
                    t = max(worst, point.time_s + self.extras[c].time_s)
                    if b not in nxt or t < nxt[b][0]:
                        nxt[b] = (t, bounds + (b,))
            table = nxt
        return table[L][1] if L in table else None
