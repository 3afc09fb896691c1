"""SearchSpace: the sketches of one task on one target, and the operations the tuner
and the search strategies need: sample, apply (replay), check, mutate."""
from __future__ import annotations

import logging
import random
from collections import Counter

from .candidate import Candidate
from .decisions import Decider, InvalidCandidate
from .fast_math import fast_math_form
from .sketch import DefaultSketch, RuleSet, Sketch

# a logger name, not an import: `autosched -v` configures the `autosched` loggers
log = logging.getLogger("autosched.search_space")

SPACE_VERSION = "12"
_MAX_SAMPLE_TRIES = 32
# Decision specs kept per candidate (a candidate's specs never change: replay is
# deterministic); the search mutates the same parents again and again.
_SPECS_KEPT = 4096
# Samples of a sketch that have all failed, none ever succeeding in this space, after
# which random sampling stops drawing it (a rule that does not fit this task at all).
_GIVE_UP_AFTER = 48


def _rule_sets() -> dict[str, RuleSet]:
    """The one table from target kind to rule set (imported when first asked for)."""
    from . import cpu, cuda

    return {"llvm": cpu.RULES, "cuda": cuda.RULES}


def _default_sketch(target) -> Sketch:
    """The default candidate's sketch of a target kind, without its rule set's analysis
    of the task: what a space holds when that analysis fails."""
    if target.kind == "cuda":
        from .cuda.common import DefaultGpuSketch
        from .cuda.limits import GpuLimits

        return DefaultGpuSketch(GpuLimits.of(target))
    return DefaultSketch()


def describe(error: BaseException) -> str:
    """One line for an exception: the last line of its text, else its type's name (an
    exception with an empty message, e.g. a bare StopIteration, still says what it is)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


class SearchSpace:
    """All schedules our rules can build for `task` on `target` (a TargetSpec)."""

    version = SPACE_VERSION

    def __init__(self, task, target, rules: RuleSet):
        self.task = task
        self.target = target
        self.rules = rules
        self.sketches: dict[str, Sketch] = self._offered(task, target, rules)
        if not self.sketches:
            raise ValueError(f"no sketch applies to {task.name} on {target.kind}")
        # each sketch's prior weight (Sketch.prior): how often a search draws it while
        # the sketch has no measurements; all equal (uniform) unless the rules say so
        self.priors: dict[str, float] = {n: float(s.prior) for n, s in self.sketches.items()}
        if not all(w > 0 for w in self.priors.values()):
            raise ValueError(f"sketch priors must be positive: {self.priors}")
        # per computation a sketch schedules (the task's, or a sketch's rewrite of it):
        # that computation and its form with vectorisable float32 exp / tanh (None
        # when it has neither), by id; the computation is held so its id stays unique
        self._fast_forms: dict[int, tuple] = {}
        # the decision specs of candidates made or replayed here, oldest first
        self._specs: dict[Candidate, dict] = {}
        # Sketches found to make no decision have exactly one candidate; random sampling
        # skips them once seen (the tuner measures the default candidate first anyway).
        self._fixed: set[str] = set()
        # Sampling's record of each sketch: the ones that scheduled a candidate, failed
        # samples of the others, and the ones it stopped drawing (name -> last error)
        self._worked: set[str] = set()
        self._failed: Counter = Counter()
        self.given_up: dict[str, str] = {}

    @staticmethod
    def _offered(task, target, rules: RuleSet) -> dict[str, Sketch]:
        """The rule set's sketches for the task; when its analysis of the task fails,
        the target's default sketch alone (the task still gets its default candidate)."""
        try:
            return {s.name: s for s in rules.sketches(task, target)}
        except Exception as e:  # noqa: BLE001 - any failure of the rules, one note
            log.warning("no sketch for %s on %s (%s); only its default candidate is tuned",
                        task.name, target.kind, describe(e))
            sketch = _default_sketch(target)
            return {sketch.name: sketch}

    def _schedule(self, sketch: Sketch, decide: Decider):
        """The scheduled module of `sketch` with `decide`'s decisions, or InvalidCandidate:
        any exception while making the program, the decisions or the schedule is this
        candidate's failure (one line naming the sketch), never the caller's."""
        from tvm import s_tir

        try:
            sch = s_tir.Schedule(self._program(sketch, decide))
            sketch.apply(sch, decide)
            return sch.mod
        except InvalidCandidate:
            raise
        except Exception as e:  # noqa: BLE001 - a rule or a schedule primitive refused
            raise InvalidCandidate(f"{sketch.name}: {describe(e)}") from None

    def _program(self, sketch: Sketch, decide: Decider):
        """The computation a sketch schedules: the task's own or the sketch's rewrite of
        it (`Sketch.program`), and for a sketch that takes variants (`math_variants`)
        and a computation that calls float32 exp or tanh, its fast-math form when the
        `fast_math` decision says so (same blocks, vectorisable exp / tanh)."""
        import tvm

        func = sketch.program(self.task.func, decide)
        if sketch.math_variants:
            fast = self._fast_form(func)
            if fast is not None and decide.choice("fast_math", (False, True)):
                func = fast
        return tvm.IRModule({"main": func})

    def _fast_form(self, func):
        """`func`'s fast-math form, or None; a rewrite that fails leaves the program
        without one (its sketches still schedule the plain form), with a note."""
        known = self._fast_forms.get(id(func))
        if known is None and _holds_bfloat16(func):
            # TVM's VectorizeLoop refuses the forms' Let bindings in a loop that also
            # converts bfloat16 ("Let cannot bind the same var to two different values"):
            # every such candidate would be a build error
            known = self._fast_forms[id(func)] = (func, None)
        if known is None:
            try:
                fast = fast_math_form(func)
            except Exception as e:  # noqa: BLE001 - the plain form is always there
                log.warning("%s: no fast-math form (%s)", self.task.name, describe(e))
                fast = None
            known = self._fast_forms[id(func)] = (func, fast)
        return known[1]

    def _sketch(self, name: str) -> Sketch:
        try:
            return self.sketches[name]
        except KeyError:
            raise InvalidCandidate(f"unknown sketch {name!r}") from None

    def apply(self, cand: Candidate):
        """Replay a candidate exactly: the scheduled IRModule, or InvalidCandidate."""
        decide = Decider(cand.values(), strict=True)
        mod = self._schedule(self._sketch(cand.sketch), decide)
        extra = set(cand.values()) - set(decide.made)
        if extra:
            raise InvalidCandidate(f"decisions not used by sketch {cand.sketch}: {sorted(extra)}")
        return mod

    def sample(self, rng: random.Random, sketch: str | None = None,
               weights: dict[str, float] | None = None) -> tuple[Candidate, object]:
        """A random valid candidate and its module (retries past refused decisions), of
        `sketch`, or of a sketch drawn uniformly or, with `weights` (sketch name ->
        relative weight, e.g. `priors`), in proportion to its weight."""
        last = None
        for _ in range(_MAX_SAMPLE_TRIES):
            names = [sketch] if sketch else self._sampled_sketches()
            name = _draw(names, weights, rng)
            decide = Decider(rng=rng, strict=False)
            try:
                mod = self._schedule(self.sketches[name], decide)
            except InvalidCandidate as e:
                last = e
                self._sample_failed(name, e)
                continue
            self._worked.add(name)
            if not decide.made:
                self._fixed.add(name)
            return self._made(name, decide), mod
        raise InvalidCandidate(f"could not sample a valid schedule: {last}")

    def _sampled_sketches(self) -> list[str]:
        live = set(self.sketches) - set(self.given_up)
        open_ = sorted(live - self._fixed)
        return open_ or sorted(live) or sorted(self.sketches)

    def _sample_failed(self, name: str, error: InvalidCandidate) -> None:
        """Count a failed sample of `name`; a sketch that has never scheduled this task
        in `_GIVE_UP_AFTER` tries is drawn no more. When no sketch but the default is
        left, the space says so once: sampling gives the default candidate alone."""
        if name in self._worked or name in self.given_up:
            return
        self._failed[name] += 1
        if self._failed[name] < _GIVE_UP_AFTER:
            return
        self.given_up[name] = str(error)
        log.debug("%s: sketch %s gave up (%s)", self.task.name, name, error)
        if set(self.sketches) - set(self.given_up) <= {"default"}:
            log.warning("%s on %s: no sketch schedules this task (%s); only its default "
                        "candidate is tuned", self.task.name, self.target.kind, error)

    def decision_specs(self, cand: Candidate) -> dict:
        """The spec of every decision the candidate's sketch makes."""
        specs = self._specs.get(cand)
        if specs is None:
            decide = Decider(cand.values(), strict=True)
            self._schedule(self._sketch(cand.sketch), decide)
            self._made(cand.sketch, decide)
            specs = decide.specs
        return specs

    def _made(self, sketch: str, decide: Decider) -> Candidate:
        """The candidate a schedule's decisions make; its specs are kept for
        `decision_specs` (a mutation of it then needs no replay)."""
        cand = Candidate.make(sketch, decide.made)
        self._specs[cand] = decide.specs
        while len(self._specs) > _SPECS_KEPT:
            del self._specs[next(iter(self._specs))]
        return cand

    def mutate(self, cand: Candidate, rng: random.Random) -> tuple[Candidate, object]:
        """Change one decision (the sketch stays); later decisions that no longer fit
        are re-sampled. Returns the mutant and its module."""
        specs = self.decision_specs(cand)
        if not specs:
            return self.sample(rng)
        values = cand.values()
        for _ in range(_MAX_SAMPLE_TRIES):
            name = rng.choice(sorted(specs))
            fixed = dict(values, **{name: specs[name].mutate(values[name], rng)})
            try:
                mutant, mod = self._replay_loosely(cand.sketch, fixed, rng)
            except InvalidCandidate:
                continue
            if mutant != cand:
                return mutant, mod
        return self.sample(rng, cand.sketch)

    def adapt(self, cand: Candidate, rng: random.Random):
        """Replay `cand`, re-sampling the decisions that do not fit (a candidate of a
        similar task with other extents): (candidate, module), or None when its sketch
        is not in this space or no fitting replay is found."""
        try:
            return cand, self.apply(cand)
        except InvalidCandidate:
            pass
        if cand.sketch not in self.sketches:
            return None
        try:
            return self._replay_loosely(cand.sketch, cand.values(), rng)
        except InvalidCandidate:
            return None

    def _replay_loosely(self, sketch: str, values: dict, rng: random.Random):
        """Replay `values`, sampling a decision wherever a value is missing or refused."""
        decide = Decider(values, rng=rng, strict=False)
        mod = self._schedule(self._sketch(sketch), decide)
        return self._made(sketch, decide), mod

    def check(self, mod) -> str | None:
        """None when the module fits the target's limits, else why not (a check that
        fails on the module says why, as a refusal: the candidate is `invalid`)."""
        try:
            return self.rules.check(mod, self.target)
        except Exception as e:  # noqa: BLE001 - one candidate's failure, not the run's
            return f"limit check failed: {describe(e)}"

    def default_candidate(self) -> Candidate | None:
        """The candidate equal to the unscheduled build, when the rule set has one."""
        return Candidate("default") if "default" in self.sketches else None


def _draw(names: list[str], weights: dict[str, float] | None, rng: random.Random) -> str:
    """One of `names`, in proportion to `weights` (absent names weigh 1); equal weights
    draw exactly as `rng.choice` does, so a uniform prior changes no seeded sample."""
    w = [1.0 if weights is None else float(weights.get(n, 1.0)) for n in names]
    if len(set(w)) <= 1:
        return rng.choice(names)
    return rng.choices(names, weights=w)[0]


def generate_space(task, target) -> SearchSpace:
    """The one entry point: the search space of `task` on `target` (a TargetSpec)."""
    rules = _rule_sets().get(target.kind)
    if rules is None:
        raise ValueError(f"no search-space rules for target kind {target.kind!r}")
    return SearchSpace(task, target, rules)


def _holds_bfloat16(func) -> bool:
    """Whether a parameter of `func` is a bfloat16 buffer."""
    return any(str(buf.dtype) == "bfloat16" for buf in func.params)
