"""Fixtures for the RPC tests: one real TVM tracker for the session (servers are added
per test under their own key, so killing them never affects another test; two shared
servers serve the tests that leave them healthy), a small matmul task and short
measurement limits."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from support.rpcfarm import Farm

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

_keys = itertools.count()

# Short limits: a hang costs seconds; generous enough for a loaded 2-core machine.
FAST = dict(number=2, repeat=3, min_repeat_ms=0, warmup=1, build_workers=2,
            build_timeout=60.0, run_timeout=8.0)


@pytest.fixture(scope="session")
def farm(tmp_path_factory):
    """A tracker on a free loopback port; every process it started dies at the end."""
    f = Farm(str(tmp_path_factory.mktemp("farm")))
    try:
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="session")
def pool(farm):
    """(key, servers): two servers shared by the tests that leave servers healthy."""
    return "pool", farm.add_servers("pool", 2)


@pytest.fixture
def key():
    """A server key of its own for each test."""
    return f"t{next(_keys)}"


@pytest.fixture(scope="session")
def farm_settings():
    """Measurement settings for the farm: short run limits, builds given a loaded machine."""
    from autosched.measure import MeasureSettings

    return MeasureSettings(**FAST)


@pytest.fixture(scope="session")
def matmul64():
    """The 64^3 fp32 matmul of examples/matmul.py (the farm tests' task)."""
    from autosched.workload import load_tasks

    return load_tasks(str(ROOT / "examples" / "matmul.py"),
                      arg_items=["M=64", "N=64", "K=64"])[0]
