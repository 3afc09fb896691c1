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
measured, and mixed plans add the measured differences. (No torch here: building and
timing come from the caller, see model_profile.py.)

    layers, keep_s = context_costs(layers, groups, build, measure, rounds)
"""
from __future__ import annotations

import dataclasses
import statistics
from functools import partial

from .actions import ACTIONS
from .timing import interleaved, spread

KEPT = "keep"


def context_costs(layers: list, groups: list[list[int]], build, measure, rounds: int):
    """(layers with in-context costs, the all-kept step's median seconds).

    layers: LayerProfiles measured each on its own (their options' bytes are kept; their
    times are replaced); groups: lists of layer indices that share one signature;
    build(actions) -> the model running those actions, one name per layer (compiled,
    for a compiled profile);
    measure(model) -> one step's seconds; rounds: samples per variant, interleaved.
    Offload actions keep their times: their compute is their base action's (see
    prediction.compute_times) and their transfers are not the compiler's.
    """
    n = len(layers)
    variants = {KEPT: build([KEPT] * n)}
    for g, members in enumerate(groups):
        for name in layers[members[0]].options:
            if name != KEPT and not ACTIONS[name].offload:
                variants[g, name] = build([name if i in members else KEPT
                                           for i in range(n)])
    samples = interleaved({key: partial(measure, run) for key, run in variants.items()},
                          rounds)
    kept = samples.pop(KEPT)
    keep_s = statistics.median(kept)
    out = list(layers)
    for (g, name), steps in samples.items():
        size = len(groups[g])
        delta = (statistics.median(steps) - keep_s) / size
        confidence = (spread(steps) + spread(kept)) / size
        for i in groups[g]:
            cost = _with_time(out[i].options[name], out[i].options[KEPT].time_s + delta,
                              confidence)
            out[i] = dataclasses.replace(out[i], options={**out[i].options, name: cost})
    return out, keep_s


def _with_time(cost, total_s: float, spread_s: float):
    """`cost` taking `total_s` seconds, split between forward and backward as it was."""
    total_s = max(total_s, 0.0)
    share = cost.fwd_s / cost.time_s if cost.time_s > 0 else 0.5
    return dataclasses.replace(cost, fwd_s=total_s * share, bwd_s=total_s * (1 - share),
                               spread_s=spread_s)
