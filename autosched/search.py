"""Search strategies: which candidates to measure next.

A strategy proposes new candidates (never one already measured) and learns from the
results. `make_strategy(name)` is the one place names become strategies.
"""
from __future__ import annotations

import random
from typing import Protocol

from search_space import Candidate, InvalidCandidate, SearchSpace

from .errors import UserError

_ATTEMPTS_PER_CANDIDATE = 20


class SearchStrategy(Protocol):
    def propose(self, space: SearchSpace, n: int, exclude: set[str],
                rng: random.Random) -> list[tuple[Candidate, object]]:
        """Up to `n` new (candidate, scheduled module) pairs whose keys are not in
        `exclude`; fewer when the space has no more."""

    def update(self, space: SearchSpace, candidates: list[Candidate], mods: list,
               results: list) -> None:
        """Learn from measured results (MeasureResult per candidate)."""


class RandomSearch:
    """Uniform samples from the space, de-duplicated against everything measured."""

    def propose(self, space, n, exclude, rng):
        out, seen = [], set(exclude)
        for _ in range(n * _ATTEMPTS_PER_CANDIDATE):
            if len(out) >= n:
                break
            try:
                cand, mod = space.sample(rng)
            except InvalidCandidate:
                continue
            if cand.key in seen:
                continue
            seen.add(cand.key)
            out.append((cand, mod))
        return out

    def update(self, space, candidates, mods, results):
        return None


STRATEGIES = {"random": RandomSearch}


def make_strategy(name: str, **options) -> SearchStrategy:
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise UserError(f"unknown --strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None
    return cls(**options)
