"""Timing alternatives until their medians separate, and the confidence where they do not.

The planner compares actions by their median times. Two medians a few percent apart on a
noisy machine may be in the wrong order; `settle` keeps sampling the alternatives whose
medians are not yet apart by more than their spreads (half the interquartile range each),
up to `max_repeats` samples, and `spread` states how far each median can be trusted:
profiles record it beside every time (ActionCost.spread_s). `interleaved` times several
alternatives round by round, so load from outside reaches each alike.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence


def spread(samples: list[float]) -> float:
    """Half the interquartile range (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return (q3 - q1) / 2


def separated(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether the medians of two sample sets are apart by more than both spreads."""
    return abs(statistics.median(a) - statistics.median(b)) > spread(a) + spread(b)


def settle(sample: Callable[[str], list[tuple[float, float]]], names: list[str],
           repeats: int, max_repeats: int) -> dict[str, list[tuple[float, float]]]:
    """Per name, (forward, backward) samples: `repeats` rounds of `sample(name)` (one round
    may give several samples, e.g. one per identical layer), then more rounds for the names
    whose total time is not separated from another's, until all are or each of those has
    had `max_repeats` rounds."""
    samples = {n: [] for n in names}
    rounds = dict.fromkeys(names, 0)

    def more(n):
        samples[n] += sample(n)
        rounds[n] += 1

    for n in names:
        for _ in range(repeats):
            more(n)
    while True:
        totals = {n: [f + b for f, b in samples[n]] for n in names}
        unsettled = [n for n in names if rounds[n] < max_repeats and any(
            not separated(totals[n], totals[m]) for m in names if m != n)]
        if not unsettled:
            return samples
        for n in unsettled:
            more(n)


def interleaved(timers: dict, rounds: int) -> dict:
    """Every timer of `timers` once a round, in turn, for `rounds` rounds: {name: what
    it returned in each round}. Load from outside this process comes in bursts of seconds
    (a shared machine's speed can move by half within minutes); taking
    turns lets a burst reach every side alike, and a median over rounds leaves it out.
    Each round starts one timer later than the one before, so no side always runs first
    (or always right after the same neighbour)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    names = list(timers)
    out: dict = {name: [] for name in names}
    for r in range(rounds):
        start = r % len(names)
        for name in names[start:] + names[:start]:
            out[name].append(timers[name]())
    return out
