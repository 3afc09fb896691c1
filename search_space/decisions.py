"""Decisions: the open choices of a sketch, and the Decider that makes them.

A sketch is code that schedules a task and asks a `Decider` for every open choice
(tile factors, unroll depth, vector width, compute location, ...). Replaying a
candidate gives the decider fixed values; sampling gives it a random generator.
Every decision is recorded with its spec, so mutation and the cost model can read
the whole space without knowing the sketch.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


class InvalidCandidate(Exception):
    """A candidate's decisions do not fit the sketch (or the sketch cannot apply)."""


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


@dataclass(frozen=True)
class TileDecision:
    """Split `extent` into `parts` factors whose product is `extent`; the innermost
    factor is at most `max_innermost`."""

    extent: int
    parts: int
    max_innermost: int = 64

    def contains(self, value) -> bool:
        if not isinstance(value, (list, tuple)) or len(value) != self.parts:
            return False
        prod = 1
        for v in value:
            if not isinstance(v, int) or v < 1:
                return False
            prod *= v
        return prod == self.extent and value[-1] <= self.max_innermost

    def sample(self, rng: random.Random) -> tuple[int, ...]:
        inner_choices = [d for d in divisors(self.extent) if d <= self.max_innermost]
        inner = rng.choice(inner_choices)
        parts = [1] * (self.parts - 1)
        for p in _prime_factors(self.extent // inner):
            parts[rng.randrange(self.parts - 1)] *= p
        return tuple(parts + [inner])

    def mutate(self, value, rng: random.Random) -> tuple[int, ...]:
        """Move one prime factor from one level to another (the classic tile move)."""
        value = list(value)
        for _ in range(16):
            src, dst = rng.sample(range(self.parts), 2) if self.parts > 1 else (0, 0)
            if src == dst or value[src] == 1:
                continue
            p = rng.choice(_prime_factors(value[src]))
            new = list(value)
            new[src] //= p
            new[dst] *= p
            if self.contains(new):
                return tuple(new)
        return self.sample(rng)

    def to_json(self) -> dict:
        return {"type": "tile", "extent": self.extent, "parts": self.parts,
                "max_innermost": self.max_innermost}


@dataclass(frozen=True)
class ChoiceDecision:
    """One value out of a fixed list of options."""

    options: tuple

    def contains(self, value) -> bool:
        return value in self.options

    def sample(self, rng: random.Random):
        return rng.choice(self.options)

    def mutate(self, value, rng: random.Random):
        others = [o for o in self.options if o != value]
        return rng.choice(others) if others else value

    def to_json(self) -> dict:
        return {"type": "choice", "options": list(self.options)}


Decision = TileDecision | ChoiceDecision


def _normalise(value):
    return tuple(value) if isinstance(value, list) else value


class Decider:
    """Makes a sketch's decisions: from `fixed` values when given, else by sampling.

    With `strict=True` a fixed value that does not fit its spec raises
    `InvalidCandidate`; otherwise it is re-sampled (used by mutation, where an
    earlier change can invalidate a later decision).
    """

    def __init__(self, fixed: dict | None = None, rng: random.Random | None = None,
                 strict: bool = True):
        self.fixed = dict(fixed or {})
        self.rng = rng or random.Random(0)
        self.strict = strict
        self.made: dict[str, Any] = {}
        self.specs: dict[str, Decision] = {}

    def decide(self, name: str, spec: Decision):
        if name in self.made:
            raise InvalidCandidate(f"decision {name!r} made twice by one sketch")
        if name in self.fixed:
            value = _normalise(self.fixed[name])
            if not spec.contains(value):
                if self.strict:
                    raise InvalidCandidate(f"decision {name}={value!r} does not fit {spec}")
                value = spec.sample(self.rng)
        elif self.strict and self.fixed:
            raise InvalidCandidate(f"candidate has no value for decision {name!r}")
        else:
            value = spec.sample(self.rng)
        self.made[name] = value
        self.specs[name] = spec
        return value

    def tile(self, name: str, extent: int, parts: int, max_innermost: int = 64) -> tuple[int, ...]:
        return self.decide(name, TileDecision(int(extent), int(parts), int(max_innermost)))

    def choice(self, name: str, options) -> Any:
        return self.decide(name, ChoiceDecision(tuple(options)))
