"""The hand-written strategies a plan is compared with, as per-layer action lists.

* uniform: checkpoint k of the n layers, evenly spaced, with the smallest k that fits
  (the least recomputation any whole-layer checkpointing gives at that budget);
* megatron: Megatron-LM's selective recomputation, the attention core of every layer;
* megatron+uniform: the attention core everywhere, plus the fewest evenly spaced whole
  layers that make it fit.

Whether a strategy fits is decided with the same exact accounting the planner uses
(autosched.runtime.predict); bench/runtime_plans.py measures it again.
"""
from __future__ import annotations

from dataclasses import dataclass

from autosched.runtime import predict


@dataclass(frozen=True)
class Baseline:
    name: str
    actions: list | None          # None: nothing of this kind fits
    note: str


def spaced(n: int, k: int) -> list[int]:
    """k of range(n), evenly spaced."""
    return sorted({int(j * n / k) for j in range(k)}) if k else []


def _fewest(profile, budget: int, base: str, name: str, what: str) -> Baseline:
    n = len(profile.layers)
    for k in range(n + 1):
        chosen = set(spaced(n, k))
        actions = ["recompute" if i in chosen else base for i in range(n)]
        if predict(profile, actions).saved_bytes <= budget:
            return Baseline(name, actions, f"{what}, {k} of {n} layers recomputed")
    return Baseline(name, None, "does not fit even with every layer recomputed")


def uniform(profile, budget: int) -> Baseline:
    return _fewest(profile, budget, "keep", "uniform", "whole-layer checkpointing")


def megatron(profile, budget: int) -> Baseline:
    n = len(profile.layers)
    if any("recompute_attention" not in layer.options for layer in profile.layers):
        return Baseline("megatron", None, "a layer has no attention core")
    actions = ["recompute_attention"] * n
    if predict(profile, actions).saved_bytes <= budget:
        return Baseline("megatron", actions, "attention core recomputed in every layer")
    return Baseline("megatron", None, "attention-core recomputation alone does not fit")


def megatron_uniform(profile, budget: int) -> Baseline:
    if any("recompute_attention" not in layer.options for layer in profile.layers):
        return Baseline("megatron+uniform", None, "a layer has no attention core")
    return _fewest(profile, budget, "recompute_attention", "megatron+uniform",
                   "attention core everywhere")


def all_baselines(profile, budget: int) -> list[Baseline]:
    return [uniform(profile, budget), megatron(profile, budget),
            megatron_uniform(profile, budget)]
