"""Fixtures for cost-model tests on the synthetic device (tests/support/synthetic.py)."""
from __future__ import annotations

import random

import pytest


@pytest.fixture(scope="session")
def measured(synthetic, matmul_space):
    """96 distinct random candidates of the 256^3 matmul with their synthetic results."""
    rng = random.Random(7)
    seen, cands, mods = set(), [], []
    while len(cands) < 96:
        cand, mod = matmul_space.sample(rng)
        if cand.key not in seen:
            seen.add(cand.key)
            cands.append(cand)
            mods.append(mod)
    return cands, mods, [synthetic.synthetic_latency(c) for c in cands]
