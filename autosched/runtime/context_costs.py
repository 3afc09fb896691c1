"""Action costs measured where they run: inside the whole model.

A layer run on its own is not quite that layer inside the model, and compiled it can be
a different program: at its boundaries the compiler converts layouts (a convolution
block's channels-last activations back to contiguous ones and again), it cannot fuse
across them, and a checkpoint region changes how much of that happens. A small ResNet
block compiled alone read 33 ms kept and 24 ms under a selective checkpoint, while in the
compiled model the kept blocks cost about 22 ms each; a plan predicted at 60 ms measured
89 ms.

So a profile's costs come from the whole model (compiled, for a compiled profile): per
group of identical layers and per action, the model with that group under the action and
every other layer kept, timed round by round beside the all-kept model. The action's cost
per layer of the group is the layer's own keep time plus the step difference over the
group's size, so a plan that puts one action on a whole group is predicted at what was
measured, and mixed plans add the measured differences. Where several groups have an
action, the model with all of them under it is timed too, and what the groups' differences
miss of it is spread over those layers, raising them (summed, the groups' differences
carry the all-kept median's error once per group: a compiled U-Net of five one-layer
groups under selective everywhere was predicted 1.2 ms over its kept step and measured
5.6 over it). Never lowering them: a model can pay once for any layer under an action.
In that compiled U-Net a recomputed convolution anywhere costs about 9 ms (each layer
alone under recompute or selective_narrow +8 to +13 ms, two layers together +9.7 to
+12.6, recompute everywhere +18.8); spread, the everywhere variant's 37 ms below the sum
priced a plan with one recomputed layer (and two selective ones) at 2.4 ms over its kept
step, and it measured 24% over its prediction. Priced each at what it costs alone, a plan
that recomputes many layers is predicted over what it measures: memory a faster plan
could have used, where a prediction under it promises a step the plan does not run. (No
torch here: building and timing come from the caller, see model_profile.py.)

Bytes likewise: a layer saved on its own does not save what the model's next layer makes
it save. Compiled, a selective layer followed by one that joins its region keeps the
outputs the next layer's input is rebuilt from (a GPT block's last linear), which alone
it drops: five GPT blocks under selective_narrow were predicted at 6.6 MiB from their
own bytes and measured 8.4. `bytes_in_context` raises each group's action bytes to what
the whole model saved under it (never lowers them: see there).

    layers, keep_s, saved = context_costs(layers, groups, build, measure, rounds, saved_of)
    profile = bytes_in_context(profile, groups, saved)
"""
from __future__ import annotations

import dataclasses
import statistics
from functools import partial

from .actions import ACTIONS
from .prediction import predict
from .timing import interleaved, spread

KEPT = "keep"


def context_costs(layers: list, groups: list[list[int]], build, measure, rounds: int,
                  saved_of=None):
    """(layers with in-context costs, the all-kept step's median seconds, the bytes each
    variant saved: {"keep" or (group, action): bytes}, empty without `saved_of`).

    layers: LayerProfiles measured each on its own (their options' bytes are kept; their
    times are replaced); groups: lists of layer indices that share one signature;
    build(actions) -> the model running those actions, one name per layer (compiled,
    for a compiled profile);
    measure(model) -> one step's seconds; rounds: samples per variant, interleaved;
    saved_of(model) -> one step's saved-activation bytes (measured once per variant).
    Offload actions keep their times: their compute is their base action's (see
    prediction.compute_times) and their transfers are not the compiler's. An action two
    or more groups have is also timed on all of them at once (its bytes are not measured
    there: bytes_in_context raises by one group's variant at a time).
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
    samples = interleaved({key: partial(measure, run) for key, run in variants.items()},
                          rounds)
    kept = samples.pop(KEPT)
    keep_s = statistics.median(kept)
    on_all = {name: samples.pop((EVERYWHERE, name)) for name in everywhere}
    out = list(layers)
    for (g, name), steps in samples.items():
        size = len(groups[g])
        delta = (statistics.median(steps) - keep_s) / size
        confidence = (spread(steps) + spread(kept)) / size
        for i in groups[g]:
            out[i] = _with_option(out[i], name, _with_time(
                out[i].options[name], out[i].options[KEPT].time_s + delta, confidence))
    for name, where in everywhere.items():
        steps = on_all[name]
        summed = keep_s + sum(out[i].options[name].time_s - out[i].options[KEPT].time_s
                              for i in where)
        missed = (statistics.median(steps) - summed) / len(where)
        if missed <= 0:
            continue
        for i in where:
            cost = out[i].options[name]
            out[i] = _with_option(out[i], name, _with_time(
                cost, cost.time_s + missed, cost.spread_s + spread(steps) / len(where)))
    return out, keep_s, saved


EVERYWHERE = "everywhere"       # variants key: (EVERYWHERE, action) beside (group, action)


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
    they save (a U-Net's skip tensors; a layer whose neighbour changes layout). Lowered
    by one variant's surplus they predicted a compiled U-Net plan at 4.4 MiB that saved
    8.1; a prediction over the truth only leaves memory unused, which fitting by
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
