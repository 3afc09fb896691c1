"""BPipe's activation balancing: pressured stages park activations on light ones.

Under 1F1B stage i holds min(S - i, M) micro-batches' activations and stage S - 1 - i
holds min(i + 1, M): BPipe pairs them (i < S / 2). Stage i parks some micro-batches'
saved activations on its partner after their forward and fetches them back before their
backward (schedule.py says exactly when), so it needs fewer in its own memory and may
keep activations it would otherwise recompute; its partner needs room for what it
receives, and the link must move them without delaying backwards more than the
recomputation it saves.

Which micro-batches: those in a set of residue classes modulo the stage's warm-up window
(min(S - i, M) micro-batches are in flight at once, so each class has one member in every
window). For each resident count the schedule can reach, `parking_options` keeps the set
that parks the fewest micro-batches, then the one whose partner holds the fewest at once,
counting with unit bytes and transfers of a moment (EPSILON_S: a link moves one transfer
at a time, in schedule.link_order's order, so a park received before the previous
fetch has gone back is hosted beside it, as the runner holds it; with instantaneous
transfers the two would tie and the partner's count would be one too few). The timed
simulation checks the real peaks. Classes are enumerated exhaustively up to a window of
MAX_WINDOW, beyond that as evenly spread classes.

`balance` walks the pairs in order, from the most pressured, and for each tries every
resident count below the 1F1B one; a pair's transfers are kept only if they make the
simulated step strictly faster (or make a plan possible at all) under every budget.
"""
from __future__ import annotations

import itertools
from functools import lru_cache

from .partition import Candidate, Parking, Search
from .schedule import StageCost, Transfer, held_counts, simulate

MAX_WINDOW = 10
EPSILON_S = 2.0 ** -10     # a transfer's time against unit forwards: short, not zero


def pairs(stages: int) -> list[tuple[int, int]]:
    """BPipe's pairs: (pressured stage i, light stage S - 1 - i) for i < S / 2."""
    return [(i, stages - 1 - i) for i in range(stages // 2)]


@lru_cache(maxsize=256)
def parking_options(stages: int, micro_batches: int, src: int, dst: int) -> tuple:
    """For each resident count of stage `src` below its 1F1B count, the fewest-transfer
    Parking on `dst` that reaches it (see the module docstring), most resident first."""
    S, M = stages, micro_batches
    window = held_counts(S, M)[src]
    unit = [StageCost(1.0, 2.0, 0.0) for _ in range(S)]
    unit[src] = StageCost(1.0, 2.0, 1.0)
    best = {}
    for classes in _class_sets(window):
        parked = tuple(m for m in range(M) if m % window in classes)
        if not parked:
            continue
        sim = simulate(unit, M, [Transfer(src, dst, parked, 1.0, EPSILON_S)])
        resident = round(sim.stages[src].peak_bytes)
        incoming = round(sim.stages[dst].parked_bytes_in)
        if resident >= window:
            continue
        option = Parking(src, dst, resident, incoming, parked)
        key = (len(parked), incoming)
        if resident not in best or key < (len(best[resident].micro_batches),
                                          best[resident].in_count):
            best[resident] = option
    return tuple(best[r] for r in sorted(best, reverse=True))


def _class_sets(window: int):
    """Sets of residue classes modulo `window`: all of them for small windows, else the
    evenly spread k-sets for every k."""
    if window <= MAX_WINDOW:
        for k in range(1, window + 1):
            yield from (frozenset(c) for c in itertools.combinations(range(window), k))
        return
    for k in range(1, window + 1):
        yield frozenset(round(j * window / k) % window for j in range(k))


def balance(search: Search, base: Candidate | None) -> Candidate | None:
    """`base` (the best plan without transfers, None if there is none) improved by BPipe
    transfers where they make the simulated step faster."""
    best, parking = base, {}
    for src, dst in pairs(search.S):
        keep = None
        for option in parking_options(search.S, search.M, src, dst):
            trial = dict(parking)
            trial[src] = option
            cand = search.best(trial)
            if cand is not None and (best is None or cand.step_s < best.step_s):
                best, keep = cand, option
        if keep is not None:
            parking[src] = keep
    return best


def options_by_stage(stages: int, micro_batches: int) -> dict:
    """{pressured stage: its parking options} (for partition.least_budget)."""
    return {src: list(parking_options(stages, micro_batches, src, dst))
            for src, dst in pairs(stages)}
