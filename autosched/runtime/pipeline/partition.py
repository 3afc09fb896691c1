"""Stage boundaries and per-layer actions: the fastest simulated 1F1B step within budget.

A candidate is contiguous stages (boundaries) and one action per layer. For fixed
boundaries, each stage takes the fastest actions (least forward + backward, costs.py's
knapsack, exact) whose bytes, times the micro-batches it keeps in memory under 1F1B
(min(S - i, M), or fewer when it parks some, see bpipe.py), fit what the stage may use:
the budget less what a pressured stage parks on it. A stage that parks takes its fastest
choice that leaves its partner room for what it receives (the partner then takes its
fastest fitting one). The candidate is then played by the simulation
(schedule.py), which is the judge: its step time ranks candidates, and its per-stage
peak memory must be within the budget.

Which boundaries are tried: all of them while there are at most EXHAUSTIVE compositions
of L layers into S stages (C(L - 1, S - 1)): then the result is exact for the simulated
step whenever a stage's fastest actions are also its fastest forward and fastest
backward (as when an action's backward is a fixed multiple of its forward; the simulated
step grows with every op's duration). Beyond that, a dynamic program over (stage, first
layer) keeps the boundaries whose (bottleneck stage time, sum of stage times) no other
beats in both, the two terms of the 1F1B step (M - 1) * max + sum of a pipeline without
transfers, and the simulation ranks those.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .costs import ModelCosts, Link, frontiers, stage_extra
from .schedule import Simulation, StageCost, Transfer, held_counts, simulate

EXHAUSTIVE = 5000
BYTES_SLACK = 1e-9         # relative: float sums of bytes compared with a budget


@dataclass(frozen=True)
class Parking:
    """Stage `src` keeps `resident` of its micro-batches' activations at its peak by
    parking `micro_batches` on stage `dst`, which then holds at most `in_count` of them
    at once (both counts from the schedule's structure, bpipe.parking_options)."""

    src: int
    dst: int
    resident: int
    in_count: int
    micro_batches: tuple


@dataclass
class Candidate:
    boundaries: tuple
    actions: tuple                # one action name per layer
    stage_costs: list             # StageCost per stage
    transfers: list               # schedule.Transfer
    simulation: Simulation

    @property
    def step_s(self) -> float:
        return self.simulation.step_s


class Search:
    """The search space of one model, stage count and micro-batch count (frontiers built
    once, reused by every evaluation)."""

    def __init__(self, model: ModelCosts, stages: int, micro_batches: int, budget: float,
                 link: Link, exhaustive: int = EXHAUSTIVE):
        if not 1 <= stages <= len(model.layers):
            raise ValueError(f"{stages} stages for {len(model.layers)} layers: each stage "
                             "needs at least one layer")
        self.model, self.S, self.M, self.budget, self.link = \
            model, stages, micro_batches, budget, link
        self.exhaustive = exhaustive     # most boundary choices tried one by one
        self.frontiers = frontiers(model)
        self.held = held_counts(stages, micro_batches)
        self.extras = [stage_extra(model, i, stages) for i in range(stages)]

    def fits(self, nbytes: float, capacity: float) -> bool:
        return nbytes <= capacity * (1 + BYTES_SLACK)

    # -- one candidate ------------------------------------------------------------------
    def evaluate(self, bounds: tuple, parking: dict) -> Candidate | None:
        """The candidate of these boundaries under `parking` ({src stage: Parking}), or
        None if some stage cannot fit or the simulated memory exceeds the budget."""
        S, budget = self.S, self.budget
        chosen = [None] * S
        for i in range(S):
            if i in parking:                 # the pair's choice, together
                p = parking[i]
                chosen[i], chosen[p.dst] = self._pair(bounds, p) or (None, None)
            elif chosen[i] is None and i not in {p.dst for p in parking.values()}:
                chosen[i] = self._fastest(bounds, i, self.held[i], budget)
        if any(point is None for point in chosen):
            return None
        costs, transfers = [], []
        for i, point in enumerate(chosen):
            extra = self.extras[i]
            send = self.link.seconds(self.model.layers[bounds[i + 1]].in_bytes) \
                if i + 1 < S else 0.0
            costs.append(StageCost(point.forward_s + extra.forward_s,
                                   point.backward_s + extra.backward_s,
                                   point.bytes + extra.bytes, send))
        for i, p in sorted(parking.items()):
            nbytes = costs[i].act_bytes
            transfers.append(Transfer(p.src, p.dst, p.micro_batches, nbytes,
                                      self.link.seconds(nbytes)))
        sim = simulate(costs, self.M, transfers)
        if any(not self.fits(s.peak_bytes, budget) for s in sim.stages):
            return None
        actions = tuple(a for point in chosen for a in point.actions)
        return Candidate(tuple(bounds), actions, costs, transfers, sim)

    def _fastest(self, bounds: tuple, i: int, count: int, avail: float):
        """Stage i's fastest point with `count` micro-batches in `avail` bytes, or None."""
        room = avail / count - self.extras[i].bytes
        return self.frontiers[bounds[i], bounds[i + 1]].fastest_within(
            room * (1 + BYTES_SLACK))

    def _pair(self, bounds: tuple, p: Parking):
        """(src point, dst point): the fastest src choice that fits with `p.resident`
        micro-batches and leaves its partner room for its own and `p.in_count` parked
        ones (the partner then takes its fastest fitting choice); None if none does."""
        room = self.budget / p.resident - self.extras[p.src].bytes
        fitting = [q for q in self.frontiers[bounds[p.src], bounds[p.src + 1]].points
                   if q.bytes <= room * (1 + BYTES_SLACK)]
        for q in sorted(fitting, key=lambda q: q.time_s):
            parked = p.in_count * (q.bytes + self.extras[p.src].bytes)
            partner = self._fastest(bounds, p.dst, self.held[p.dst], self.budget - parked)
            if partner is not None:
                return q, partner
        return None

    # -- all candidates -----------------------------------------------------------------
    def best(self, parking: dict | None = None) -> Candidate | None:
        """The fastest candidate under `parking` (None: no stage parks), or None."""
        parking = parking or {}
        best = None
        for bounds in self.boundaries(parking):
            cand = self.evaluate(bounds, parking)
            if cand is not None and (best is None or cand.step_s < best.step_s):
                best = cand
        return best

    def boundaries(self, parking: dict):
        """The boundaries to try: all of them, or the DP's (max, sum) frontier."""
        L, S = len(self.model.layers), self.S
        if math.comb(L - 1, S - 1) <= self.exhaustive:
            for cut in itertools.combinations(range(1, L), S - 1):
                yield (0, *cut, L)
            return
        yield from self._pareto_boundaries(parking)

    def _stage_time(self, a: int, b: int, i: int, parking: dict) -> float | None:
        """Stage i's fastest time on layers a..b-1 alone (partners' parked bytes not
        counted: the DP proposes, evaluate() decides)."""
        count = parking[i].resident if i in parking else self.held[i]
        extra = self.extras[i]
        point = self.frontiers[a, b].fastest_within(
            (self.budget / count - extra.bytes) * (1 + BYTES_SLACK))
        return None if point is None else point.time_s + extra.time_s

    def _pareto_boundaries(self, parking: dict):
        """Per (stages placed, next layer): the non-dominated (max, sum) prefixes."""
        L, S = len(self.model.layers), self.S
        table = {(0, 0): [(0.0, 0.0, (0,))]}
        for i in range(S):
            for a in range(L):
                prefixes = table.get((i, a))
                if not prefixes:
                    continue
                last = L if i == S - 1 else L - (S - 1 - i)
                for b in range(a + 1, last + 1):
                    if i == S - 1 and b != L:
                        continue
                    t = self._stage_time(a, b, i, parking)
                    if t is None:
                        continue
                    cell = table.setdefault((i + 1, b), [])
                    cell += [(max(m, t), s + t, bounds + (b,)) for m, s, bounds in prefixes]
                    table[i + 1, b] = _pareto(cell)
        for _, _, bounds in table.get((S, L), []):
            yield bounds


def _pareto(points: list) -> list:
    points = sorted(points, key=lambda p: (p[0], p[1]))
    kept = []
    for p in points:
        if not kept or p[1] < kept[-1][1]:
            kept.append(p)
    return kept


def least_budget(search: Search, parking_choices: dict) -> float:
    """The least per-device budget some boundaries fit, every layer at its least-memory
    action, with each pressured stage parking as well as it can (`parking_choices`:
    {src stage: [Parking, ...]}); schedule structure only (transfers taking no time).
    Beyond `search.exhaustive` boundary choices: a min-max dynamic program without
    parking (a budget that works, perhaps not the least)."""
    S, L = search.S, len(search.model.layers)

    def need(i, a, b):
        least = search.frontiers[a, b].least_bytes + search.extras[i].bytes
        return least, search.held[i] * least

    if math.comb(L - 1, S - 1) > search.exhaustive:
        best = {0: 0.0}                      # first layer of the next stage -> min max
        for i in range(S):
            nxt = {}
            for a, m in best.items():
                for b in (range(a + 1, L - (S - 2 - i)) if i < S - 1 else (L,)):
                    v = max(m, need(i, a, b)[1])
                    nxt[b] = min(nxt.get(b, math.inf), v)
            best = nxt
        return best[L]
    out = math.inf
    for cut in itertools.combinations(range(1, L), S - 1):
        bounds = (0, *cut, L)
        least, needs = zip(*(need(i, bounds[i], bounds[i + 1]) for i in range(S)))
        needs = list(needs)
        for src, options in parking_choices.items():
            if not options:
                continue
            dst = options[0].dst
            needs[src], needs[dst] = min(
                [(needs[src], needs[dst])] +
                [(p.resident * least[src], needs[dst] + p.in_count * least[src])
                 for p in options], key=max)
        out = min(out, max(needs))
    return out
