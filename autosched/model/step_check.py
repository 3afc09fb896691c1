"""Whether the kernels export-model chose still win in the whole compiled step, and which
groups of them to undo where they do not.

A kernel chosen per operator (its call timed beside torch's operator) can still slow the
model down: inductor copies a layout around the opaque call, loses a fusion across it,
or the kernel's threads contend with torch's. So before the library is final the whole
step (a training step: forward, loss, backward; or one inference call) is compiled with
autosched's backend over the chosen kernels and timed against the same step compiled by
inductor alone (`torch.compile(model)`, its default backend, what a user runs without
autosched), both with `dynamic=False`, their timed repeats alternating round by round.

Groups: the chosen tasks of one workload (all `aten_mm` tasks, all `aten_conv2d` tasks),
joined with the workloads that compute other outputs of the same aten call (the backend
replaces the outputs of one call together or not at all), named by their workloads
joined with "+".

Beyond noise: each round gives the ratio of the step's time with kernels to inductor's
time in the same round (the pair shares whatever load the machine had then); the step
with kernels counts as faster only where the distribution-free confidence interval of
the median ratio (order statistics of the ratios at sign-test coverage, `CONFIDENCE`)
lies wholly below 1.0. It needs no resampling, so the same samples always decide alike.

Greedy undo: where the step with every group is not faster beyond noise, the step without
each one group is timed (all those variants and inductor in the same alternating
rounds), the group whose removal helps most is undone (the lowest median ratio, a
variant faster beyond noise first), and so on until the step is faster beyond noise or
no group is left, which leaves inductor alone. Each variant is compiled once (G groups
compile at most G(G+1)/2 variants, and inductor once a stage), then only timed.

The decision (`greedy_undo`, `verdict`) reads samples from a callable and times nothing,
so it is tested on synthetic samples; `check_step` compiles and times.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from .choice import STEP_SLOWER

CONFIDENCE = 0.95
ROUNDS = 15          # alternating rounds per stage: 12 of 15 must be faster at 95 %
REPEAT_S = 0.05      # one timed repeat lasts at least this long (calls are added)
WARMUP_CALLS = 2     # untimed calls after the one that compiles

# measure(variants) -> ({variant: seconds per step, one per round}, inductor's per round)
Measure = Callable[[list[tuple[str, ...]]], tuple[dict, list[float]]]


def min_rounds(confidence: float = CONFIDENCE) -> int:
    """The fewest rounds whose median ratio has an interval at `confidence`."""
    n = 1
    while 2 * 0.5 ** n > 1 - confidence:
        n += 1
    return n


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE
                    ) -> tuple[float, float, float]:
    """(median, low, high): the order statistics s[k-1], s[n-k] of the sorted values,
    with the largest k whose sign-test coverage 1 - 2 P(Binomial(n, 1/2) < k) is at
    least `confidence`."""
    n = len(values)
    if n < min_rounds(confidence):
        raise ValueError(f"{n} rounds give no {confidence:.0%} interval; at least "
                         f"{min_rounds(confidence)} do")
    s = sorted(values)
    k, below = 0, 0   # below: the number of outcomes of n fair coins with fewer than k heads
    while 2 * (below + math.comb(n, k)) <= (1 - confidence) * 2 ** n:
        below += math.comb(n, k)
        k += 1
    return statistics.median(s), s[k - 1], s[n - k]


@dataclass(frozen=True)
class Verdict:
    """The median ratio of the step's time to inductor's over the rounds, its interval."""

    ratio: float
    low: float
    high: float

    @property
    def faster(self) -> bool:
        return self.high < 1.0


def verdict(samples: Sequence[float], inductor: Sequence[float],
            confidence: float = CONFIDENCE) -> Verdict:
    """The verdict on one variant from its samples and inductor's of the same rounds."""
    if len(samples) != len(inductor):
        raise ValueError(f"{len(samples)} samples against inductor's {len(inductor)}")
    return Verdict(*median_interval([s / i for s, i in zip(samples, inductor)], confidence))


@dataclass(frozen=True)
class Variant:
    """One timed variant of the step: the groups whose kernels ran, its seconds per step
    and inductor's, one each per round, and the verdict."""

    stage: int
    groups: tuple[str, ...]
    samples: tuple[float, ...]
    inductor: tuple[float, ...]
    verdict: Verdict

    def to_json(self) -> dict:
        v = self.verdict
        return {"stage": self.stage, "groups": list(self.groups), "rounds": len(self.samples),
                "median_s": statistics.median(self.samples),
                "inductor_median_s": statistics.median(self.inductor),
                "ratio": v.ratio, "interval": [v.low, v.high], "faster": v.faster,
                "samples_s": list(self.samples), "inductor_samples_s": list(self.inductor)}


@dataclass(frozen=True)
class StepCheck:
    """What the check found: the groups it started with, those undone (in order), every
    variant timed, and how."""

    step: str                    # "training step" | "inference"
    groups: tuple[str, ...]
    undone: tuple[str, ...]
    variants: tuple[Variant, ...]
    confidence: float = CONFIDENCE
    threads: int = 0

    @property
    def kept(self) -> tuple[str, ...]:
        return tuple(g for g in self.groups if g not in self.undone)

    def to_json(self) -> dict:
        return {"step": self.step, "confidence": self.confidence, "threads": self.threads,
                "groups": list(self.groups), "undone": list(self.undone),
                "kept": list(self.kept), "variants": [v.to_json() for v in self.variants]}


def greedy_undo(groups: Sequence[str], measure: Measure,
                confidence: float = CONFIDENCE) -> tuple[list[str], list[Variant]]:
    """(the groups to undo, in order; every variant timed): the step with all `groups`
    first, then, while the current step is not faster than inductor beyond noise, the
    step without each one of its groups (one call of `measure` per stage), undoing the
    group whose removal helps most: of the variants faster beyond noise, if any, else
    of all, the one with the lowest median ratio (the first in name order on a tie).
    The last group left is undone without a measurement: without it inductor alone
    runs."""
    def stage(number, candidates):
        timed, inductor = measure(candidates)
        return [Variant(number, c, tuple(timed[c]), tuple(inductor),
                        verdict(timed[c], inductor, confidence)) for c in candidates]

    current = stage(0, [tuple(sorted(groups))])[0]
    variants, undone = [current], []
    while not current.verdict.faster:
        if len(current.groups) == 1:
            undone.append(current.groups[0])
            break
        options = stage(len(undone) + 1, [tuple(g for g in current.groups if g != drop)
                                          for drop in current.groups])
        variants += options
        best = min(options, key=lambda v: (not v.verdict.faster, v.verdict.ratio))
        undone += [g for g in current.groups if g not in best.groups]
        current = best
    return undone, variants


def chosen_groups(model_ops, choices) -> dict[str, tuple[int, ...]]:
    """{group name: the indices of its chosen tasks} (`choices` follow `model_ops.ops`):
    the chosen tasks by workload, workloads joined where one aten call has outputs in
    both."""
    chosen = [i for i, c in enumerate(choices) if c.chosen == "autosched"]
    parent = {choices[i].workload: choices[i].workload for i in chosen}

    def root(w):
        while parent[w] != w:
            w = parent[w]
        return w

    index = {op.key: i for i, op in enumerate(model_ops.ops)}
    for i in chosen:
        for key in model_ops.ops[i].siblings:
            j = index.get(key)
            if j is not None and choices[j].chosen == "autosched":
                parent[root(choices[j].workload)] = root(choices[i].workload)
    members: dict[str, list[str]] = {}
    for w in parent:
        members.setdefault(root(w), []).append(w)
    name = {w: "+".join(sorted(members[root(w)])) for w in parent}
    out: dict[str, list[int]] = {}
    for i in chosen:
        out.setdefault(name[choices[i].workload], []).append(i)
    return {g: tuple(ix) for g, ix in sorted(out.items())}


def undo(choices, groups: dict[str, tuple[int, ...]], undone) -> list:
    """`choices` with the tasks of the `undone` groups left to torch (STEP_SLOWER)."""
    drop = {i for g in undone for i in groups[g]}
    return [replace(c, excluded=STEP_SLOWER) if i in drop else c
            for i, c in enumerate(choices)]


def report_lines(doc: dict) -> list[str]:
    """What the check (the `step_check` entry of model_ops.json) found, one line per
    variant, then what was undone."""
    lines = [f"step check ({doc['step']}, compiled with kernels against inductor, "
             f"{doc['confidence']:.0%} interval of the median ratio over the rounds):"]
    for v in doc["variants"]:
        low, high = v["interval"]
        lines.append(f"  stage {v['stage']}: kernels of {', '.join(v['groups'])}: "
                     f"{v['median_s'] * 1e3:.3f} ms vs inductor "
                     f"{v['inductor_median_s'] * 1e3:.3f} ms ({v['ratio']:.3f}x, "
                     f"{low:.3f}-{high:.3f}, {v['rounds']} rounds): "
                     f"{'faster' if v['faster'] else 'not faster beyond noise'}")
    undone = ", ".join(doc["undone"]) or "none"
    lines.append(f"step check undid ({STEP_SLOWER}): {undone}; kept: "
                 f"{', '.join(doc['kept']) or 'none (inductor alone)'}")
    return lines


def check_step(spec, directory, model_ops, choices, train: bool, threads: int,
               rounds: int = ROUNDS, confidence: float = CONFIDENCE) -> StepCheck | None:
    """Time the step of the model `spec` (a loaded model file) compiled with the kernels
    of the library in `directory` as `choices` choose them, against inductor alone, and
    undo groups greedily (module doc); None where no kernel is chosen."""
    import tempfile

    import torch

    groups = chosen_groups(model_ops, choices)
    if not groups:
        return None
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="autosched-step-") as scratch:
            timer = _StepTimer(spec, directory, choices, groups, train, scratch)
            undone, variants = greedy_undo(list(groups), lambda c: timer.measure(c, rounds),
                                           confidence)
    finally:
        torch.set_num_threads(previous)
        torch._dynamo.reset()
    return StepCheck(_step_name(train), tuple(groups), tuple(undone), tuple(variants),
                     confidence, threads)


def _step_name(train: bool) -> str:
    return "training step" if train else "inference"


class _StepTimer:
    """Compiles the variants of one stage (and inductor) and times them alternating."""

    def __init__(self, spec, directory, choices, groups, train, scratch):
        from ..torch import load_library

        self.spec, self.choices = spec, choices
        self.groups, self.train, self.scratch = groups, train, scratch
        self.library = load_library(directory)
        self.made = 0

    def measure(self, candidates, rounds: int) -> tuple[dict, list[float]]:
        import torch

        torch._dynamo.reset()  # the variants of an earlier stage are not kept
        # every variant is one more compiled entry of the model's code: above the limit
        # dynamo would run the rest eagerly, unnoticed
        with torch._dynamo.config.patch(recompile_limit=len(candidates) + 8):
            steps = {"inductor": self._compiled("inductor", "inductor alone")}
            for c in candidates:
                steps[c] = self._compiled(self._backend(c),
                                          f"autosched's backend with {', '.join(c)}")
            calls = self._calls_per_repeat(steps["inductor"])
            times = _interleaved(steps, rounds, calls)
        return {c: times[c] for c in candidates}, times["inductor"]

    def _backend(self, kept):
        """autosched's backend over the library, with the groups not in `kept` undone:
        a fresh instance reading the variant's own model_ops.json."""
        import os
        from pathlib import Path

        from .choice import write_choices
        from .compile_backend import backend

        self.made += 1
        where = os.path.join(self.scratch, f"variant{self.made}")
        os.makedirs(where)
        left = [g for g in self.groups if g not in kept]
        write_choices(where, self.spec.path, self.train, undo(self.choices, self.groups, left))
        return backend(replace(self.library, path=Path(where)))

    def _compiled(self, compiler, what: str) -> Callable[[], None]:
        """One step of a fresh copy of the model compiled by `compiler`, compiled and
        warmed up."""
        import copy

        import torch

        from ..errors import UserError
        from .training_step import compute_loss

        model = torch.compile(copy.deepcopy(self.spec.model).train(self.train),
                              backend=compiler, dynamic=False)
        inputs, loss_fn = self.spec.inputs, self.spec.loss_fn
        # a step on the GPU is timed to its end, not to the launch of its last kernel
        sync = torch.cuda.synchronize if any(
            isinstance(x, torch.Tensor) and x.is_cuda for x in inputs) else (lambda: None)
        if self.train:
            def step():
                model.zero_grad(set_to_none=True)
                compute_loss(model, inputs, loss_fn).backward()
                sync()
        else:
            def step():
                with torch.no_grad():
                    model(*inputs)
                sync()
        try:
            for _ in range(1 + WARMUP_CALLS):
                step()
        except Exception as e:  # noqa: BLE001 (torch's compilers fail in many ways)
            first = (str(e).strip().splitlines() or [""])[0]
            raise UserError(f"step check: the {_step_name(self.train)} of "
                            f"{self.spec.path} compiled by {what} did not compile or run: "
                            f"{type(e).__name__}: {first} (export with --step-check off "
                            "to skip the check)") from None
        return step

    @staticmethod
    def _calls_per_repeat(step) -> int:
        import time

        start = time.perf_counter()
        step()
        once = time.perf_counter() - start
        return max(1, math.ceil(REPEAT_S / max(once, 1e-9)))


def _interleaved(steps: dict, rounds: int, calls: int) -> dict:
    """{name: seconds per step, one per round}: every step `calls` times a round, in
    turn, each round starting one step later than the one before (no side always runs
    first, or always after the same neighbour)."""
    import time

    names = list(steps)
    out: dict = {n: [] for n in names}
    for r in range(rounds):
        start = r % len(names)
        for n in names[start:] + names[:start]:
            step = steps[n]
            begin = time.perf_counter()
            for _ in range(calls):
                step()
            out[n].append((time.perf_counter() - begin) / calls)
    return out
