"""Fixtures for cost-model tests: the synthetic tiling sketch and measurer shared with
the search tests (tests/search/synthetic.py)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def synthetic():
    from support.modules import load_by_path

    return load_by_path(Path(__file__).resolve().parents[1] / "search" / "synthetic.py",
                        "autosched_test_synthetic")


@pytest.fixture(scope="session")
def matmul_space(synthetic):
    return synthetic.make_space(synthetic.matmul_task())


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
