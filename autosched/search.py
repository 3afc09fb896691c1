"""Search strategies: which candidates to measure next.

A strategy proposes new candidates (never one already measured) and learns from the
results: "random" (uniform samples) and "evolutionary" (mutation guided by a learned cost
model). Names become strategies in `autosched.components.make_strategy`.
"""
from __future__ import annotations

import random
from typing import Protocol

from search_space import Candidate, InvalidCandidate, SearchSpace

from cost_model import CostModel

from .errors import UserError

_ATTEMPTS_PER_CANDIDATE = 20


class SearchStrategy(Protocol):
    # the learned model the strategy ranks with (shared by a run's strategies, so the
    # loop can warm-start it once), or None for a strategy that learns nothing
    cost_model: CostModel | None

    def seed_candidates(self, candidates: list[Candidate]) -> None:
        """Warm start: good candidates of this task and of similar tasks (from the
        database) that the strategy may start from; a strategy may ignore them."""

    def propose(self, space: SearchSpace, n: int, exclude: set[str],
                rng: random.Random) -> list[tuple[Candidate, object]]:
        """Up to `n` new (candidate, scheduled module) pairs whose keys are not in
        `exclude`; fewer when the space has no more."""

    def update(self, space: SearchSpace, candidates: list[Candidate], mods: list,
               results: list) -> None:
        """Learn from measured results (MeasureResult per candidate)."""


def sketch_weights(space: SearchSpace, measured) -> dict[str, float]:
    """How often to draw each sketch of `space`: its prior (`space.priors`) while it has
    no measurements (no sketch in `measured`), then 1 (uniform: what was measured
    decides, through the cost model and the race)."""
    return {name: 1.0 if name in measured else prior for name, prior in space.priors.items()}


def fresh_samples(space: SearchSpace, n: int, exclude: set[str], rng: random.Random,
                  weights: dict[str, float] | None = None) -> list:
    """Up to `n` distinct samples of `space` whose keys are not in `exclude`, their
    sketches drawn in proportion to `weights` (uniformly when None)."""
    out, seen = [], set(exclude)
    for _ in range(n * _ATTEMPTS_PER_CANDIDATE):
        if len(out) >= n:
            break
        try:
            cand, mod = space.sample(rng, weights=weights)
        except InvalidCandidate:
            continue
        if cand.key in seen:
            continue
        seen.add(cand.key)
        out.append((cand, mod))
    return out


class RandomSearch:
    """Random samples from the space, de-duplicated against everything measured: each
    sketch drawn in proportion to its prior until it has measurements, uniformly after
    (`sketch_weights`), and its decisions uniformly."""

    cost_model = None

    def __init__(self):
        self._measured: set[str] = set()  # the sketches with a measurement in this run

    def seed_candidates(self, candidates) -> None:
        return None  # random sampling has no use for a warm start

    def propose(self, space, n, exclude, rng):
        return fresh_samples(space, n, exclude, rng, sketch_weights(space, self._measured))

    def update(self, space, candidates, mods, results):
        self._measured.update(c.sketch for c in candidates)


class EvolutionarySearch:
    """Evolution guided by a learned cost model (as in Ansor and MetaSchedule).

    Each `propose` builds a population from the warm-start candidates (`seed_candidates`),
    the best candidates measured so far in this run and fresh samples; then for
    `generations` rounds parents are picked by tournament on the model's score and
    mutated (one decision each, via `space.mutate`) with probability `mutation_prob`.
    The best-scored unseen candidates of everything visited are proposed, except an
    `epsilon` share of fresh random samples that keeps the model honest. Nothing in
    `exclude`, and nothing proposed before in this run, is ever proposed.

    Sketches race: each batch first takes the best-scored candidate of every sketch
    still in the race (up to half the batch), then the best-scored of all. A sketch is
    in the race until it has `race_trials` measurements in this run and its best is
    more than `race_margin` times the run's best. Without the race a space whose
    sketches differ in size lets the model, trained on the first few results, keep
    mutating the sketch it has seen most and never measure the good decisions of another
    (a matmul's register-blocked micro-kernels, one measurement in 64).

    Until a sketch has measurements in this run, fresh samples draw it in proportion to
    its prior (`SearchSpace.priors`, uniform unless the rule set says otherwise), and a
    batch too small for every sketch's leader takes the highest prior's first: with an
    untrained model (all scores tie) that is what shapes a first round, e.g. mostly
    tensor-core candidates for a 16-bit GEMM while the SIMT sketches still get measured.
    """

    def __init__(self, cost_model: CostModel, population: int = 64, generations: int = 4,
                 mutation_prob: float = 0.85, epsilon: float = 0.1, elites: int = 8,
                 tournament: int = 3, race_trials: int = 4, race_margin: float = 2.0):
        if population < 2 or generations < 0 or not 0 <= epsilon <= 1 or \
                not 0 <= mutation_prob <= 1:
            raise UserError("evolutionary search: population >= 2, generations >= 0, "
                            "epsilon and mutation_prob in [0, 1]")
        self.cost_model = cost_model
        self.population, self.generations = int(population), int(generations)
        self.mutation_prob, self.epsilon = float(mutation_prob), float(epsilon)
        self.elites, self.tournament = int(elites), max(1, int(tournament))
        self.race_trials, self.race_margin = int(race_trials), float(race_margin)
        self._by_sketch: dict[str, list[float]] = {}  # measured medians of each sketch
        self._seeds: dict[str, Candidate] = {}
        self._best: list[tuple[float, str, Candidate]] = []  # measured, fastest first
        self._proposed: set[str] = set()

    def seed_candidates(self, candidates) -> None:
        """Warm start: the best records of this task (and of similar tasks)."""
        for cand in candidates:
            self._seeds.setdefault(cand.key, cand)

    def propose(self, space, n, exclude, rng):
        taken = set(exclude) | self._proposed
        visited: dict[str, tuple] = {}
        population = self.initial_population(space, rng, visited)
        for _ in range(self.generations):
            if not population:
                break
            population = self._next_generation(space, population, rng, visited)
        n_random = min(n, int(round(self.epsilon * n)))
        picks = self._best_unseen(space, visited, n - n_random, taken, rng)
        picks += fresh_samples(space, n - len(picks), taken | {c.key for c, _ in picks}, rng,
                               self.sketch_weights(space))
        self._proposed.update(c.key for c, _ in picks)
        return picks

    def update(self, space, candidates, mods, results):
        self.cost_model.update(space.task, candidates, mods, results)
        for cand, res in zip(candidates, results):
            medians = self._by_sketch.setdefault(cand.sketch, [])
            if res.ok:
                self._best.append((res.median, cand.key, cand))
                medians.append(res.median)
            else:
                medians.append(float("inf"))
        self._best.sort(key=lambda t: (t[0], t[1]))
        del self._best[self.population:]

    def initial_population(self, space, rng, visited: dict) -> list:
        """The first generation: the warm-start seeds and the run's best adapted to this
        space (at most half), then fresh samples; every member is added to `visited`."""
        parents = list(self._seeds.values()) + [c for _, _, c in self._best]
        pop = []
        for cand in parents:
            got = space.adapt(cand, rng)
            if got is not None and got[0].key not in visited:
                visited[got[0].key] = got
                pop.append(got)
        pop = pop[: self.population // 2]  # leave room for diversity
        for cand, mod in fresh_samples(space, self.population - len(pop), set(visited), rng,
                                       self.sketch_weights(space)):
            visited[cand.key] = (cand, mod)
            pop.append((cand, mod))
        return pop

    def _scores(self, space, pairs, rng) -> list[float]:
        scores = self.cost_model.predict(space.task, [c for c, _ in pairs], [m for _, m in pairs])
        # ties (an untrained model scores everything 0) are broken at random
        return [float(s) + 1e-9 * rng.random() for s in scores]

    def _next_generation(self, space, population, rng, visited) -> list:
        scores = self._scores(space, population, rng)
        order = sorted(range(len(population)), key=lambda i: -scores[i])
        nxt = [population[i] for i in order[: self.elites]]
        keys = {c.key for c, _ in nxt}
        for _ in range(self.population * 4):
            if len(nxt) >= self.population:
                break
            parent = population[min(rng.sample(range(len(population)),
                                               min(self.tournament, len(population))),
                                    key=lambda i: -scores[i])]
            child = parent
            if rng.random() < self.mutation_prob:
                try:
                    child = space.mutate(parent[0], rng)
                except InvalidCandidate:
                    continue
            if child[0].key in keys:
                continue
            keys.add(child[0].key)
            visited.setdefault(child[0].key, child)
            nxt.append(child)
        return nxt

    def sketch_weights(self, space) -> dict[str, float]:
        """How often fresh samples draw each sketch: by the space's priors until the
        sketch has measurements in this run (`sketch_weights`)."""
        return sketch_weights(space, self._by_sketch)

    def in_race(self, sketch: str) -> bool:
        """Whether `sketch` still gets a measurement in every batch (see the class doc)."""
        medians = self._by_sketch.get(sketch, [])
        if len(medians) < self.race_trials or not self._best:
            return True
        return min(medians) <= self.race_margin * self._best[0][0]

    def _best_unseen(self, space, visited, n, taken, rng) -> list:
        pool = [pair for key, pair in visited.items() if key not in taken]
        if n <= 0 or not pool:
            return []
        scores = self._scores(space, pool, rng)
        order = sorted(range(len(pool)), key=lambda i: -scores[i])
        leaders, racing = [], set()
        for i in order:
            sketch = pool[i][0].sketch
            if sketch not in racing and self.in_race(sketch):
                racing.add(sketch)
                leaders.append(i)
        # a batch too small for every sketch's leader takes the unmeasured sketches of
        # the highest prior first (stable: by score among equals)
        weights = self.sketch_weights(space)
        leaders.sort(key=lambda i: -weights[pool[i][0].sketch])
        leaders = leaders[: max(1, n // 2)] if len(racing) > 1 else []
        rest = [i for i in order if i not in set(leaders)]
        return [pool[i] for i in (leaders + rest)[:n]]
