"""The dry run as a function (`autosched.dry_run_task`, what `tune --dry-run` and the
search space's benchmarks call): distinct candidates, of one sketch when asked, each
limit-checked and compiled, and every failure counted with its line."""
from __future__ import annotations

from pathlib import Path

import pytest

from autosched import DeviceCodeCheck, UserError, dry_run_task, load_tasks, resolve_target

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def matmul():
    return load_tasks(str(ROOT / "examples" / "matmul.py"),
                      arg_items=["M=32", "N=32", "K=32"])[0]


def test_a_dry_run_of_one_sketch_compiles_distinct_candidates_of_it(matmul):
    report = dry_run_task(matmul, resolve_target("llvm"), 3, seed=1, sketch="tile_pack")
    assert (report.generated, report.passed_check, report.compiled) == (3, 3, 3)
    assert report.by_sketch == {"tile_pack": 3}
    assert not report.failures and not report.messages and report.first_errors == []
    assert report.compiler == "llvm" and report.compile_rate == 1.0
    assert report.sass == []  # nothing asked of the device code
    assert 0 < report.check_seconds + report.compile_seconds <= report.seconds


class _Refusing:
    """A space whose limit check refuses every candidate of the wrapped one."""

    def __init__(self, space):
        self.space = space
        self.sketches, self.priors, self.task = space.sketches, space.priors, space.task

    def sample(self, rng, sketch=None, weights=None):
        return self.space.sample(rng, sketch, weights)

    def check(self, mod):
        return "shared memory 99 KiB over the limit"


def test_every_failure_is_counted_by_kind_and_line(matmul):
    from search_space import generate_space

    report = dry_run_task(matmul, resolve_target("llvm"), 4, seed=0, sketch="tile",
                          space_factory=lambda t, tg: _Refusing(generate_space(t, tg)))
    assert (report.generated, report.passed_check, report.compiled) == (4, 0, 0)
    assert report.failures == {"invalid": 4}
    assert report.messages == {"tile: shared memory 99 KiB over the limit": 4}
    assert report.first_errors == ["tile: shared memory 99 KiB over the limit"] * 3


def test_bad_requests_are_one_line_user_errors(matmul):
    with pytest.raises(UserError) as e:
        dry_run_task(matmul, resolve_target("llvm"), 2, sketch="tensor_core")
    assert str(e.value) == ("dry run: matmul(M=32,N=32,K=32,dtype=float32) has no sketch "
                            "'tensor_core' (its sketches: default, microkernel, tile, "
                            "tile_pack)")
    with pytest.raises(UserError, match="^dry run: SASS is read from cuda builds, not llvm$"):
        dry_run_task(matmul, resolve_target("llvm"), 2, device_code=DeviceCodeCheck(
            require=("HMMA",)))
