"""Measuring runnable candidates side by side: saved bytes, held-out step times, gradients.

    saved, chosen_on, reported = measure_points(points, inputs, loss_fn, rounds=40)

Saved bytes come from one metered step each. Step times come from interleaved rounds
(timing.interleaved: every candidate once a round, in turn, so load from outside reaches
each alike), split by round: the odd rounds are what a choice is made on, the even ones
what is reported, so a choice's luck in its own measurement does not flatter the report,
and both halves span the run's phases alike (a machine's speed can drift within minutes,
and not alike for every program).
"""
from __future__ import annotations

import torch

from ..model.training_step import training_step
from .measured_step import measure_step
from .timing import interleaved


def measure_points(points: dict, inputs, loss_fn=None, rounds: int = 40, steps: int = 1,
                   clock: str = "wall", failed=None) -> tuple[dict, dict, dict]:
    """points: {name: (module, info)}. Returns (saved bytes, odd rounds' step times,
    even rounds' step times), each {name: ...}. A point whose step fails is measured no
    further, reported through failed(name, exception) and removed from `points`; the
    others still are. Points that share one module object are timed once and share the
    times."""
    if rounds < 2:
        raise ValueError(f"rounds must be at least 2 (choose on odd, report even), got {rounds}")
    saved = {}
    for k, (m, _) in list(points.items()):
        try:
            saved[k] = measure_step(m, inputs, loss_fn, repeats=1, warmup=1,
                                    clock=clock).saved_bytes
        except Exception as e:
            if failed is None:
                raise
            failed(k, e)
            del points[k]

    def timer(m):
        return lambda: measure_step(m, inputs, loss_fn, repeats=steps, warmup=0,
                                    clock=clock).times_s
    first = {}
    for k, (m, _) in points.items():
        first.setdefault(id(m), k)
    times = interleaved({k: timer(points[k][0]) for k in first.values()}, rounds)
    times = {k: times[first[id(m)]] for k, (m, _) in points.items()}

    def flat(per_round):
        return [t for r in per_round for t in r]
    return saved, {k: flat(v[0::2]) for k, v in times.items()}, \
        {k: flat(v[1::2]) for k, v in times.items()}


def grad_error(ref: dict, got: dict) -> float:
    """Largest |difference| relative to the largest |reference| entry, over all
    parameters' gradients ({name: tensor}, as parameter_grads returns them)."""
    return max(float((got[n] - r).abs().max() / r.abs().max().clamp_min(1e-30))
               for n, r in ref.items())


def peak_allocated(run, inputs, loss_fn) -> int:
    """torch.cuda.max_memory_allocated over one step (parameters and gradients
    included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    training_step(run, inputs, loss_fn)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()
