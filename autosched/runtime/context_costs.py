"""Action costs measured where they run: inside the whole model.

A layer run on its own is not quite that layer inside the model, and compiled it can be
a different program: at its boundaries the compiler converts layouts (a convolution
block's channels-last activations back to contiguous ones and again), it cannot fuse
across them, and a checkpoint region changes how much of that happens: a block timed
alone can rank its actions differently from the same block inside the compiled model.

So a profile's costs come from the whole model (compiled, for a compiled profile): per
group of identical layers and per action, the model with that group under the action and
every other layer kept, timed round by round beside the all-kept model. The action's cost
per layer of the group is the layer's own keep time plus the step difference over the
group's size, so a plan that puts one action on a whole group is predicted at what was
measured, and mixed plans add the measured differences. Where several groups have an
action, the model with all of them under it is timed too. Where it costs less than the
groups' differences add up to, by more than the noise, the action costs once for any
layer under it (once_costs.py: a compiled conv net can pay for a recomputed convolution
anywhere once): the charge is the profile's, paid once by a plan, and each layer
keeps its difference less the charge; two charged actions are timed on two groups at once
to see whether they share it. Where it costs more, what the groups' differences miss is
spread over those layers, raising them (summed, the groups' differences carry the
all-kept median's error once per group, which can hide what they miss).
(No torch here: building and timing come from the caller, see model_profile.py.)

Bytes likewise: a layer saved on its own does not save what the model's next layer makes
it save. Compiled, a selective layer followed by one that joins its region keeps the
outputs the next layer's input is rebuilt from (a GPT block's last linear), which alone
it drops, so a layer's own bytes undercount the model's. `bytes_in_context` raises each group's action bytes to what
the whole model saved under it (never lowers them: see there).

    found = context_costs(layers, groups, build, measure, rounds, saved_of)
    profile = bytes_in_context(profile, groups, found.saved)     # once_costs: found.once_costs
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from functools import partial
from itertools import combinations

from .actions import ACTIONS
from .once_costs import charge, combined
from .prediction import predict
from .timing import interleaved, spread

KEPT = "keep"
EVERYWHERE = "everywhere"       # variants key: (EVERYWHERE, action) beside (group, action)
MIXED = "mixed"                 # (MIXED, a, b): a on one group, b on another


@dataclass(frozen=True)
class InContext:
    layers: list              # the layers with their in-context costs
    keep_s: float             # the all-kept step's median seconds
    saved: dict               # bytes each variant saved: {"keep" or (group, action): bytes}
    once_costs: tuple = ()    # once_costs.OnceCost: paid once by a plan, not per layer


def context_costs(layers: list, groups: list[list[int]], build, measure, rounds: int,
                  saved_of=None) -> InContext:
    """The layers' costs as the whole model measures them (see the module docstring).

    layers: LayerProfiles measured each on its own (their options' bytes are kept; their
    times are replaced); groups: lists of layer indices that share one signature;
    build(actions) -> the model running those actions, one name per layer (compiled,
    for a compiled profile);
    measure(model) -> one step's seconds; rounds: samples per variant, interleaved;
    saved_of(model) -> one step's saved-activation bytes (measured once per group
    variant; `saved` is empty without it).
    Offload actions keep their times: their compute is their base action's (see
    prediction.compute_times) and their transfers are not the compiler's. An action two
    or more groups have is also timed on all of them at once (its bytes are not measured
    there: bytes_in_context raises by one group's variant at a time); two actions found
    to cost once each are timed once more, each on a group of its own, beside their
    group variants, to see whether they share it.
    """
    n = len(layers)
    variants = {KEPT: build([KEPT] * n)}
    for g, members in enumerate(groups):
        for name in _timed_actions(layers[members[0]]):
            variants[g, name] = build([name if i in members else KEPT for i in range(n)])
    saved = {key: saved_of(run) for key, run in variants.items()} if saved_of else {}
    everywhere = _layers_with_action_in_several_groups(layers, groups)
    for name, where in everywhere.items():
        variants[EVERYWHERE, name] = build([name if i in where else KEPT for i in range(n)])
    steps = _Steps(interleaved({key: partial(measure, run) for key, run in variants.items()},
                               rounds))
    charges = _charges(everywhere, len(groups), steps)
    out = _group_costs(layers, groups, steps, charges)
    for name, where in everywhere.items():
        if name not in charges:
            out = _raised_to_everywhere(out, name, where, steps)
    shared = _shared_charges(charges, groups, n, variants, build, measure, rounds)
    return InContext(out, steps.keep_s, saved, combined(charges, shared))


def _charges(everywhere, n_groups: int, steps) -> dict[str, tuple[float, float]]:
    """{action: (seconds, spread)} for the actions of `everywhere` that cost once for any
    layer under them (once_costs.charge, beyond the noise of the variants it reads)."""
    out = {}
    for name in everywhere:
        having = [(g, name) for g in range(n_groups) if (g, name) in steps.samples]
        on_all = (EVERYWHERE, name)
        noise = sum(steps.noise(key) for key in [*having, on_all]) / (len(having) - 1)
        found = charge([steps.delta(key) for key in having], steps.delta(on_all), noise)
        if found > 0:
            out[name] = (found, steps.noise(on_all))
    return out


def _group_costs(layers, groups, steps, charges) -> list:
    """`layers` with each group variant's step difference, less its action's charge,
    shared over the group's layers on top of their keep times."""
    out = list(layers)
    for key in steps.samples:
        if key[0] == EVERYWHERE:
            continue
        g, name = key
        size = len(groups[g])
        delta = (steps.delta(key) - (charges[name][0] if name in charges else 0.0)) / size
        for i in groups[g]:
            out[i] = _with_option(out[i], name, _with_time(
                out[i].options[name], out[i].options[KEPT].time_s + delta,
                steps.noise(key) / size))
    return out


class _Steps:
    """Interleaved step samples per variant, read against the all-kept model's."""

    def __init__(self, samples: dict):
        self.kept = samples.pop(KEPT)
        self.keep_s = statistics.median(self.kept)
        self.samples = samples

    def delta(self, key) -> float:
        return statistics.median(self.samples[key]) - self.keep_s

    def noise(self, key) -> float:
        return spread(self.samples[key]) + spread(self.kept)


def _raised_to_everywhere(layers, name, where, steps):
    """`layers` with what the groups' differences miss of `name` everywhere spread over
    the layers `where` it runs, if they miss any (a cost the groups add up to more than
    is a charge: see context_costs)."""
    summed = sum(layers[i].options[name].time_s - layers[i].options[KEPT].time_s
                 for i in where)
    missed = (steps.delta((EVERYWHERE, name)) - summed) / len(where)
    if missed <= 0:
        return layers
    out = list(layers)
    for i in where:
        cost = out[i].options[name]
        out[i] = _with_option(out[i], name, _with_time(
            cost, cost.time_s + missed,
            cost.spread_s + spread(steps.samples[EVERYWHERE, name]) / len(where)))
    return out


def _shared_charges(charges, groups, n: int, variants, build, measure, rounds
                    ) -> dict[frozenset, float]:
    """{frozenset((a, b)): seconds} for the pairs of charged actions that share their
    charge: the model with a on one group and b on another, timed round by round beside
    those two groups' variants and the kept model (again: the machine moves), costs less
    than the two add up to by more than the noise (at most the smaller charge)."""
    pairs = {}
    for a, b in combinations(sorted(charges), 2):
        g_a = next(g for g in range(len(groups)) if (g, a) in variants)
        g_b = next((g for g in range(len(groups)) if g != g_a and (g, b) in variants), None)
        if g_b is None:
            continue
        mixed = [a if i in groups[g_a] else b if i in groups[g_b] else KEPT
                 for i in range(n)]
        pairs[a, b] = ((g_a, a), (g_b, b), build(mixed))
    if not pairs:
        return {}
    timers = {KEPT: partial(measure, variants[KEPT])}
    for (a, b), (key_a, key_b, mixed) in pairs.items():
        timers[key_a] = partial(measure, variants[key_a])
        timers[key_b] = partial(measure, variants[key_b])
        timers[MIXED, a, b] = partial(measure, mixed)
    steps = _Steps(interleaved(timers, rounds))
    out = {}
    for (a, b), (key_a, key_b, _) in pairs.items():
        both = (MIXED, a, b)
        common = steps.delta(key_a) + steps.delta(key_b) - steps.delta(both)
        noise = steps.noise(key_a) + steps.noise(key_b) + steps.noise(both)
        if common > noise:
            out[frozenset((a, b))] = min(common, charges[a][0], charges[b][0])
    return out


def _timed_actions(layer) -> list[str]:
    """The actions of `layer` whose costs the whole model measures (offload keeps its
    own: see context_costs)."""
    return [name for name in layer.options if name != KEPT and not ACTIONS[name].offload]


def _layers_with_action_in_several_groups(layers, groups) -> dict[str, list[int]]:
    """{action: the layers of every group that has it}, for actions two or more groups
    have (with one group, the group's variant already puts the action everywhere)."""
    having: dict[str, list[list[int]]] = {}
    for members in groups:
        for name in _timed_actions(layers[members[0]]):
            having.setdefault(name, []).append(members)
    return {name: sorted(i for members in found for i in members)
            for name, found in having.items() if len(found) > 1}


def _with_option(layer, name: str, cost):
    return dataclasses.replace(layer, options={**layer.options, name: cost})


def bytes_in_context(profile, groups: list[list[int]], saved: dict):
    """`profile` with its bytes moved to what the whole model saved (context_costs'
    `saved`): the rest by the all-kept model's error, then each group's action bytes by
    the error of the model with that group under the action, spread over the group's
    layers, where the model saved more than predicted. Never down: an action's bytes in
    context are one variant's, all else kept, and do not add up where layers share what
    they save (a U-Net's skip tensors; a layer whose neighbour changes layout), so lowered
    by one variant's surplus they can predict a plan far under what it saves; a
    prediction over the truth only leaves memory unused, which fitting by
    measurement (measured_choice.fit_by_measurement) gives back."""
    if not saved:
        return profile
    n = len(profile.layers)
    kept = saved[KEPT] - predict(profile, [KEPT] * n).saved_bytes
    profile = dataclasses.replace(profile, rest_bytes=max(0, profile.rest_bytes + kept))
    layers = list(profile.layers)
    for key, measured in saved.items():
        if key == KEPT:
            continue
        g, name = key
        error = measured - predict(profile, [name if i in groups[g] else KEPT
                                             for i in range(n)]).saved_bytes
        for i in groups[g]:
            cost = layers[i].options[name]
            moved = cost.internal_bytes + max(0, round(error / len(groups[g])))
            layers[i] = _with_option(layers[i], name,
                                     dataclasses.replace(cost, internal_bytes=moved))
    return dataclasses.replace(profile, layers=layers)


def _with_time(cost, total_s: float, spread_s: float):
    """`cost` taking `total_s` seconds, split between forward and backward as it was."""
    total_s = max(total_s, 0.0)
    share = cost.fwd_s / cost.time_s if cost.time_s > 0 else 0.5
    return dataclasses.replace(cost, fwd_s=total_s * share, bwd_s=total_s * (1 - share),
                               spread_s=spread_s)
