"""Costs a model pays once, for any layer under an action: a fixed charge per plan.

A compiled model can pay for an action as a whole graph, not per layer: recomputing any
one convolution layer of a compiled conv net can cost most of what recomputing all of
them costs (a layout conversion the compiler then inserts once), and two actions can
share that charge. A per-layer price cannot hold that: at what one layer alone costs, a
plan that recomputes several layers is predicted far over its step; at an even share of
the all-layers variant, one recomputed layer is predicted far under it.

So a profile keeps such costs apart (ModelProfile.once_costs): a OnceCost is paid once
by a plan that runs any of its actions on any layer, and the layers' own costs are what
is left. context_costs.py finds them from the whole model timed under each group of
identical layers and under all of them at once: with G groups of differences d_g and
an all-groups difference D, a charge F paid by each variant gives d_g = F + c_g and
D = F + sum c_g, so F = (sum d_g - D) / (G - 1). Two charged actions share a charge where
the model with one on a group and the other on another group costs less than the two
groups' variants add up to; the shared part is paid once by either.

No torch here: the predictor and the solver read these.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from .actions import base_action


@dataclass(frozen=True)
class OnceCost:
    actions: frozenset       # paid once if any layer runs one of these (its compute's)
    time_s: float
    spread_s: float = 0.0    # confidence of time_s, from the variants it came from


def paid(once_costs, assignment: list[str]) -> list[OnceCost]:
    """The once costs a plan with `assignment` (one action per layer) pays."""
    running = {base_action(name) for name in assignment}
    return [c for c in once_costs if c.actions & running]


def charge(group_deltas: list[float], everywhere_delta: float, noise_s: float) -> float:
    """The charge each of G >= 2 group variants paid, from their step differences over
    the kept model and the all-groups variant's (module docstring): 0 where it is not
    above `noise_s`, and at most the smallest group difference (a layer's own cost is
    not made negative; so the all-groups variant is predicted at or over what it measured).
    """
    if len(group_deltas) < 2:
        raise ValueError("a charge needs two or more groups' variants")
    found = (sum(group_deltas) - everywhere_delta) / (len(group_deltas) - 1)
    if found <= noise_s:
        return 0.0
    return max(0.0, min(found, min(group_deltas)))


def combined(charges: dict[str, tuple[float, float]], shared: dict[frozenset, float]
             ) -> tuple[OnceCost, ...]:
    """Once costs from each action's charge ({action: (seconds, spread)}) and what pairs
    of them share ({frozenset((a, b)): seconds}, pairs found sharing only): actions that
    all share pairwise pay their smallest shared part once for any of them, each its
    remaining charge on its own."""
    sets: list[list[str]] = []
    for name in sorted(charges):
        for members in sets:
            if all(frozenset((name, m)) in shared for m in members):
                members.append(name)
                break
        else:
            sets.append([name])
    out = []
    for members in sets:
        common = min((shared[frozenset(p)] for p in combinations(members, 2)), default=0.0)
        spread = max(charges[m][1] for m in members)
        if common > 0:
            out.append(OnceCost(frozenset(members), common, spread))
        for m in members:
            own = charges[m][0] - common
            if own > 0:
                out.append(OnceCost(frozenset({m}), own, charges[m][1]))
    return tuple(out)
