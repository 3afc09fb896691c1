"""Evolutionary search on the synthetic test device (see synthetic.py)."""
from __future__ import annotations

import random
import statistics

import pytest

from autosched.components import STRATEGIES, make_strategy
from autosched.config import TuneConfig
from autosched.errors import UserError
from autosched.search import EvolutionarySearch, RandomSearch
from autosched.tuner import tune_tasks
from cost_model import XGBRanker
from search_space import Candidate
from search_space.sketch import Sketch


def evolutionary(seed: int = 0, **options) -> EvolutionarySearch:
    return EvolutionarySearch(XGBRanker(seed=seed), **options)


def test_mutants_are_valid_candidates_of_the_same_sketch(matmul_space):
    rng = random.Random(3)
    for _ in range(25):
        parent, _ = matmul_space.sample(rng)
        child, mod = matmul_space.mutate(parent, rng)
        assert child.sketch == parent.sketch == "tile" and child != parent
        specs = matmul_space.decision_specs(child)
        assert set(specs) == set(child.values())
        assert all(specs[name].contains(value) for name, value in child.decisions)
        assert matmul_space.apply(child).script() == mod.script()  # replays exactly
        changed = [k for k in specs if child.values()[k] != parent.values()[k]]
        assert 1 <= len(changed) <= 2  # one move (a tile move changes one decision)


def test_no_candidate_is_proposed_twice_or_from_exclude(synthetic, matmul_space):
    rng = random.Random(5)
    excluded = {matmul_space.sample(rng)[0].key for _ in range(40)}
    search = evolutionary(5, population=16, generations=2)
    measured, proposed = set(excluded), []
    for _ in range(4):
        picks = search.propose(matmul_space, 12, set(measured), rng)
        assert len(picks) == 12
        for cand, _ in picks:
            assert cand.key not in excluded
        proposed += [c.key for c, _ in picks]
        # half of each batch is "measured"; the rest must still never come back
        for cand, _ in picks[:6]:
            measured.add(cand.key)
        search.update(matmul_space, [c for c, _ in picks],
                      [m for _, m in picks], [synthetic.synthetic_latency(c) for c, _ in picks])
    assert len(proposed) == len(set(proposed)) == 48


class _Tiny(Sketch):
    """Twelve candidates: a split of an 8-loop in two and one of three unroll depths."""

    name = "tiny"

    def apply(self, sch, decide) -> None:
        block = sch.get_sblock("C")
        j = sch.get_loops(block)[1]
        outer, _ = sch.split(j, list(decide.tile("j", 8, 2, 8)))
        sch.annotate(outer, "pragma_auto_unroll_max_step", decide.choice("unroll", (0, 4, 16)))


class _TinyRules:
    def sketches(self, task, target):
        return [_Tiny()]

    def check(self, mod, target):
        return None


def test_a_small_space_is_exhausted_without_repeats(synthetic):
    from search_space import SearchSpace

    space = SearchSpace(synthetic.matmul_task(2, 8, 2), synthetic.LLVM, _TinyRules())
    search = evolutionary(1, population=4, generations=1)
    rng = random.Random(1)
    seen: set[str] = set()
    for _ in range(10):
        picks = search.propose(space, 5, set(), rng)  # nothing excluded by the caller
        if not picks:
            break
        keys = [c.key for c, _ in picks]
        assert not seen & set(keys) and len(set(keys)) == len(keys)
        seen |= set(keys)
        search.update(space, [c for c, _ in picks], [m for _, m in picks],
                      [synthetic.MeasureResult(latencies=(1e-3,)) for _ in picks])
    assert len(seen) == 12 and search.propose(space, 5, set(), rng) == []


def test_seeds_from_a_similar_task_are_adapted_into_this_space(synthetic, matmul_space):
    other = synthetic.make_space(synthetic.matmul_task(128, 64, 32))
    foreign, _ = other.sample(random.Random(0))
    rng = random.Random(0)
    cand, mod = matmul_space.adapt(foreign, rng)
    assert cand.sketch == "tile" and matmul_space.apply(cand).script() == mod.script()
    for name in ("parallel", "vectorize", "unroll", "cache_write"):  # choices carry over
        assert cand.values()[name] == foreign.values()[name]
    assert matmul_space.adapt(Candidate.make("nonexistent", {}), rng) is None
    own, _ = matmul_space.sample(rng)
    search = evolutionary(0, population=8, generations=0)
    search.seed_candidates([own, foreign, Candidate.make("nonexistent", {})])
    population = search.initial_population(matmul_space, rng, {})
    assert len(population) == 8 and population[0][0] == own  # seeds first, as they are
    adapted = population[1][0]
    assert adapted.sketch == "tile" and matmul_space.decision_specs(adapted)
    assert all(adapted.values()[k] == foreign.values()[k]
               for k in ("parallel", "vectorize", "unroll", "cache_write"))


def test_evolution_with_the_model_beats_random_search(synthetic, tmp_path):
    """Median over seeds of the best latency after 48 synthetic trials in the real loop."""
    task = synthetic.matmul_task()

    def best(name, seed, make):
        config = TuneConfig(trials=48, batch_size=16, seed=seed, work_dir=str(tmp_path),
                            db_url=f"sqlite:///{tmp_path}/{name}{seed}.db")
        measurer = synthetic.SyntheticMeasurer()
        result = tune_tasks([task], config, measurer=measurer,
                            space_factory=synthetic.make_space, strategy_factory=make)
        assert len(set(measurer.measured)) == len(measurer.measured) == 48
        return result.tasks[0].best_latency

    evo = [best("evo", seed, lambda: evolutionary(seed, population=32, generations=2))
           for seed in range(5)]
    rnd = [best("rnd", seed, RandomSearch) for seed in range(5)]
    assert statistics.median(evo) < 0.9 * statistics.median(rnd)


def test_make_strategy_is_the_one_entry_point(tmp_path, synthetic, matmul_space):
    assert set(STRATEGIES) == {"random", "evolutionary"}
    assert isinstance(make_strategy("random"), RandomSearch)
    s = make_strategy("evolutionary", seed=1, population=8, generations=1)
    assert isinstance(s, EvolutionarySearch) and not s.cost_model.trained
    with pytest.raises(UserError, match="unknown --strategy"):
        make_strategy("annealing")
    with pytest.raises(UserError, match="population"):
        make_strategy("evolutionary", population=1)
    # cost_model_path warm-starts the strategy's cost model
    rng = random.Random(2)
    pairs = [matmul_space.sample(rng) for _ in range(24)]
    s.update(matmul_space, [c for c, _ in pairs], [m for _, m in pairs],
             [synthetic.synthetic_latency(c) for c, _ in pairs])
    path = str(tmp_path / "m.json")
    s.cost_model.save(path)
    warm = make_strategy("evolutionary", seed=1, cost_model_path=path)
    cands, mods = [c for c, _ in pairs], [m for _, m in pairs]
    assert (warm.cost_model.predict(matmul_space.task, cands, mods) ==
            s.cost_model.predict(matmul_space.task, cands, mods)).all()
