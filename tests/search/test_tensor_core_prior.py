"""Sketch priors: a first round of a 16-bit GEMM on a GPU with tensor cores is mostly
tensor-core candidates (the CUDA rules give that sketch a prior above the others'),
while the SIMT sketches are still proposed; spaces without the sketch draw as before,
and once a sketch has measurements its prior no longer counts. On sm_90a a 16-bit GEMM
has two tensor-core sketches, mma.sync (`tensor_core`) and wgmma (`wgmma`), with the
same prior."""
from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from autosched.measure import Measurer
from autosched.search import EvolutionarySearch, RandomSearch, fresh_samples, sketch_weights
from cost_model import XGBRanker
from search_space import generate_space
from search_space.cuda.tensor_core import TensorCoreSketch

TENSOR_CORE_PRIOR = TensorCoreSketch.prior

ROOT = Path(__file__).resolve().parents[2]
MP = str(ROOT / "examples" / "mixed_precision.py")
MATMUL = str(ROOT / "examples" / "matmul.py")
SHAPE = ("M=256", "N=256", "K=256")
SIMT = {"simple", "tile"}
TC = {"tensor_core", "wgmma"}


def _task(path: str, workload: str, *args: str):
    from autosched.workload import load_tasks

    return next(t for t in load_tasks(path, arg_items=[*SHAPE, *args])
                if t.workload == workload)


def _target(arch: str):
    from autosched.target import resolve_target

    return resolve_target(json.dumps({"kind": "cuda", "arch": arch}))


def _space(arch: str, *args: str, path: str = MP, workload: str = "matmul_mp"):
    return generate_space(_task(path, workload, *args), _target(arch))


def _first_proposals(space, n: int, seed: int = 0) -> list:
    """The evolutionary search's first batch after the default (which the loop
    measures first), with an untrained model: every score ties."""
    search = EvolutionarySearch(XGBRanker(seed=0), population=32, generations=1)
    return search.propose(space, n, {space.default_candidate().key}, random.Random(seed))


def _sketches(picks) -> Counter:
    return Counter(c.sketch for c, _ in picks)


@pytest.mark.parametrize("arch, args, prior", [
    ("sm_90a", (), TENSOR_CORE_PRIOR),                  # fp16 in, fp32 accumulation
    ("sm_80", ("dtype=bfloat16",), TENSOR_CORE_PRIOR),
    ("sm_80", ("acc=float16",), TENSOR_CORE_PRIOR),     # fp16 accumulation
    ("sm_75", (), None),                                # no mma.sync sketch before sm_80
    ("sm_75", ("dtype=bfloat16",), None),
])
def test_the_tensor_core_sketch_alone_has_a_prior_above_uniform(arch, args, prior):
    priors = _space(arch, *args).priors
    want = {"default": 1.0, "simple": 1.0, "tile": 1.0}
    if prior is not None:
        want["tensor_core"] = prior
    if arch == "sm_90a":
        want["wgmma"] = prior
    assert priors == want and TENSOR_CORE_PRIOR > 1


def test_a_fp32_matmul_has_a_uniform_prior_and_draws_as_without_one():
    space = _space("sm_90a", path=MATMUL, workload="matmul")
    assert space.priors == {"default": 1.0, "simple": 1.0, "tile": 1.0, "simt_gemm": 1.0}
    other = _space("sm_90a", path=MATMUL, workload="matmul")
    a, b = random.Random(4), random.Random(4)
    drawn = [space.sample(a, weights=space.priors)[0] for _ in range(12)]
    assert drawn == [other.sample(b)[0] for _ in range(12)]
    assert _sketches(_first_proposals(space, 16)) == {"tile": 6, "simt_gemm": 7, "simple": 3}


@pytest.mark.parametrize("arch, args, counts", [
    ("sm_90a", (), {"tensor_core": 6, "wgmma": 7, "simple": 2, "tile": 1}),
    ("sm_80", ("dtype=bfloat16",), {"tensor_core": 11, "tile": 3, "simple": 2}),
])
def test_a_first_batch_of_a_16_bit_gemm_is_mostly_tensor_core(arch, args, counts):
    picks = _first_proposals(_space(arch, *args), 16)
    got = _sketches(picks)
    assert got == counts
    assert sum(got[s] for s in TC) >= 8 and SIMT <= set(got)
    assert len({c.key for c, _ in picks}) == 16


def test_a_batch_too_small_for_every_leader_takes_the_tensor_core_one():
    """Two picks leave room for one sketch's leader: a sketch of the highest prior."""
    for seed in range(3):
        picks = _first_proposals(_space("sm_90a"), 2, seed=seed)
        assert picks[0][0].sketch in TC


def test_random_search_draws_by_prior_until_every_sketch_is_measured():
    from autosched.results import MeasureResult

    space = _space("sm_90a")
    search = RandomSearch()
    first = search.propose(space, 16, set(), random.Random(0))
    assert _sketches(first) == {"wgmma": 7, "tensor_core": 6, "tile": 2,
                                "default": 1}
    assert sketch_weights(space, set()) == space.priors
    search.update(space, [c for c, _ in first], [m for _, m in first],
                  [MeasureResult(latencies=(1.0,))] * len(first))
    # measured: uniform, the same draws as samples without weights
    again = search.propose(_space("sm_90a"), 8, set(), random.Random(3))
    uniform = fresh_samples(_space("sm_90a"), 8, set(), random.Random(3))
    assert [c for c, _ in again] == [c for c, _ in uniform]


def test_the_prior_counts_only_until_a_sketch_has_measurements():
    from autosched.results import MeasureResult

    space = _space("sm_90a")
    search = EvolutionarySearch(XGBRanker(seed=0), population=16, generations=0)
    assert search.sketch_weights(space) == space.priors
    picks = search.propose(space, 6, {space.default_candidate().key}, random.Random(1))
    plain = [(c, m) for c, m in picks if space.priors[c.sketch] == 1.0]  # SIMT sketches
    tcs = [(c, m) for c, m in picks if c.sketch in TC]
    assert plain and tcs
    search.update(space, [c for c, _ in plain], [m for _, m in plain],
                  [MeasureResult(latencies=(2e-3,))] * len(plain))
    assert search.sketch_weights(space) == space.priors  # their prior was 1 already
    search.update(space, [c for c, _ in tcs], [m for _, m in tcs],
                  [MeasureResult(latencies=(1e-3,))] * len(tcs))
    assert search.sketch_weights(space) == dict.fromkeys(space.priors, 1.0)


class _Recording(Measurer):
    """A measurer that builds nothing: every candidate "runs" in 1 ms."""

    concurrency = 16

    def __init__(self):
        self.measured = []

    def measure(self, inputs):
        from autosched.results import MeasureResult

        self.measured += [inp.candidate for inp in inputs]
        return [MeasureResult(latencies=(1e-3,)) for _ in inputs]

    def hardware(self, target):
        return target.fingerprint

    def close(self) -> None:
        return None


def test_the_loop_measures_the_default_first_then_mostly_tensor_core(tmp_path):
    from autosched.config import TuneConfig
    from autosched.tuner import tune_tasks

    config = TuneConfig(target=json.dumps({"kind": "cuda", "arch": "sm_90a"}), trials=16,
                        batch_size=16, db_url=f"sqlite:///{tmp_path}/t.db",
                        work_dir=str(tmp_path), transfer=False)
    measurer = _Recording()
    result = tune_tasks([_task(MP, "matmul_mp")], config, measurer=measurer,
                        strategy_factory=lambda: EvolutionarySearch(XGBRanker(seed=0),
                                                                    population=32,
                                                                    generations=1))
    (state,) = result.tasks
    first = measurer.measured   # what passed the limit check, in the loop's order
    assert state.trials == 16 and len(first) == 16 - state.failures["invalid"]
    assert first[0].sketch == "default"
    got = Counter(c.sketch for c in first)
    assert got == {"default": 1, "tensor_core": 6, "wgmma": 6, "tile": 1, "simple": 2}
