"""The CPU search space: which sketches each operator gets, exact replay, JSON
round-trip, decisions that fit their specs, mutation, and invalid candidates."""
from __future__ import annotations

import json
import random

import pytest
import tvm

from search_space import Candidate, InvalidCandidate
from search_space.decisions import ChoiceDecision, TileDecision

from support.cpu_cases import CASES, small_space

CASE_NAMES = sorted(CASES)


def _samples(space, n: int, seed: int):
    rng = random.Random(seed)
    out = []
    for sketch in sorted(space.sketches):
        for _ in range(n if sketch != "default" else 1):
            out.append(space.sample(rng, sketch))
    return out


@pytest.mark.parametrize("case", CASE_NAMES)
def test_sketches_offered(case, target):
    assert sorted(small_space(case, target).sketches) == sorted(CASES[case][4])


@pytest.mark.parametrize("case", CASE_NAMES)
def test_replay_json_and_specs(case, target):
    space = small_space(case, target)
    for cand, mod in _samples(space, 4, seed=11):
        tvm.ir.assert_structural_equal(space.apply(cand), mod)
        again = Candidate.from_json(json.loads(cand.dumps()))
        assert again == cand and again.key == cand.key
        specs = space.decision_specs(cand)
        assert set(specs) == set(cand.values())
        for name, value in cand.values().items():
            assert specs[name].contains(value), (name, value, specs[name])


def test_default_is_the_unscheduled_module(target):
    space = small_space("matmul", target)
    default = space.default_candidate()
    assert default == Candidate("default")
    tvm.ir.assert_structural_equal(space.apply(default), space.task.mod)


@pytest.mark.parametrize("case", CASE_NAMES)
def test_mutate_keeps_sketch_and_validity(case, target):
    space = small_space(case, target)
    rng = random.Random(5)
    for cand, _ in _samples(space, 3, seed=23):
        if cand.sketch == "default":
            continue
        mutant, mod = space.mutate(cand, rng)
        assert mutant.sketch == cand.sketch and mutant != cand
        tvm.ir.assert_structural_equal(space.apply(mutant), mod)
        before, after = cand.values(), mutant.values()
        common = set(before) & set(after)
        assert any(before[n] != after[n] for n in common) or set(before) != set(after)
        if set(before) != set(after):
            # a structural choice changed: the decisions after it were re-sampled
            changed = [n for n in common if before[n] != after[n]]
            assert changed, (cand.dumps(), mutant.dumps())


def _first_tile(cand, space):
    specs = space.decision_specs(cand)
    return next(n for n, s in specs.items() if isinstance(s, TileDecision) and s.parts > 1
                and s.extent > 1)


@pytest.mark.parametrize("case", ["matmul", "conv2d", "dense_gelu", "batch_matmul"])
def test_wrong_tile_product_is_invalid(case, target):
    space = small_space(case, target)
    cand, _ = space.sample(random.Random(3), "tile_pack")
    name = _first_tile(cand, space)
    bad = list(cand.values()[name])
    bad[0] *= 2
    with pytest.raises(InvalidCandidate):
        space.apply(Candidate.make(cand.sketch, dict(cand.values(), **{name: bad})))


def test_other_invalid_candidates(target):
    space = small_space("matmul", target)
    cand, _ = space.sample(random.Random(4), "tile_pack")
    values = cand.values()
    choice = next(n for n, s in space.decision_specs(cand).items()
                  if isinstance(s, ChoiceDecision))
    with pytest.raises(InvalidCandidate):  # a value outside the options
        space.apply(Candidate.make(cand.sketch, dict(values, **{choice: "nonsense"})))
    missing = dict(values)
    missing.pop(sorted(values)[0])
    with pytest.raises(InvalidCandidate):  # a decision left out
        space.apply(Candidate.make(cand.sketch, missing))
    with pytest.raises(InvalidCandidate):  # a decision the sketch never makes
        space.apply(Candidate.make(cand.sketch, dict(values, extra=1)))
    with pytest.raises(InvalidCandidate):  # an unknown sketch
        space.apply(Candidate.make("no_such_sketch", values))


def test_vector_axis_tiles_are_whole_vectors(target):
    """The register tile's vector axis is a whole number of SIMD vectors."""
    from search_space.cpu.lanes import vector_lanes

    lanes = vector_lanes(target)
    space = small_space("matmul", target)
    rng = random.Random(8)
    for _ in range(6):
        cand, _ = space.sample(rng, "tile")
        units = cand.values()[f"C.v_j@{lanes}"]
        assert 64 % (units[-1] * lanes) == 0 and units[-1] * lanes >= lanes


def test_sample_space_check_passes(target):
    space = small_space("dense_gelu", target)
    rng = random.Random(2)
    for _ in range(4):
        _, mod = space.sample(rng)
        assert space.check(mod) is None


def test_check_rejects_big_stack_buffers(target):
    """A whole 1024x512 accumulator on the stack is refused; our sketches' small
    register-tile caches pass."""
    import autosched
    from tvm import s_tir

    from search_space import generate_space

    from support.cpu_cases import ROOT

    (task,) = autosched.load_tasks(f"{ROOT}/examples/matmul.py", ["matmul"],
                                   ["M=1024", "N=512", "K=8"])
    space = generate_space(task, target)
    sch = s_tir.Schedule(task.mod)
    sch.cache_write(sch.get_sblock("C"), 0, "local")
    reason = space.check(sch.mod)
    assert reason is not None and "2097152 bytes" in reason
    rng = random.Random(1)
    for _ in range(3):
        _, mod = space.sample(rng, "tile_pack")
        assert space.check(mod) is None


@pytest.mark.parametrize("case", CASE_NAMES)
def test_random_sampling_returns_the_default_sketch_at_most_once(case, target):
    """The default sketch has one candidate: once sampled, the other sketches share the
    samples (a space with nothing else keeps returning it)."""
    space = small_space(case, target)
    rng = random.Random(6)
    names = [space.sample(rng)[0].sketch for _ in range(13)]
    others = set(space.sketches) - {"default"}
    if others:
        assert names.count("default") <= 1 and set(names) - {"default"} <= others
    else:
        assert set(names) == {"default"}
