"""Predicted step time and saved-activation memory of an assignment of actions to layers.

An analytic model over a ModelProfile (model_profile.py): the solver optimises it,
plans report it, benchmarks compare it with the measured step.

Time (Mist-style overlap): rest + sum over layers of the action's compute (forward and
backward, recomputation included) + each once cost the plan pays (once_costs.py: a cost the
model pays once for any layer under an action) + the part of each offload transfer that
other layers' compute does not hide. An offloaded layer's compute is that of the same layer
without offload (keep, or memeff_ln for offload+memeff_ln); its transfers take host_bytes /
bandwidth each way. With a copy engine (CUDA), layer i's device-to-host copy hides behind
layer i+1's forward and its host-to-device prefetch behind layer i+1's backward (the last
layer has no window); offload.OffloadSchedule implements exactly those windows. Without one
(CPU) every transfer is exposed.

Memory: rest + sum of the layers' own saved bytes + each shared (layer-boundary) storage
once if anyone keeps it on the device. Where the profile's plans join checkpoint regions
(compiled: joined_regions.py), a selective or recomputed layer that follows a selective
layer does not keep its inputs (the joined region rebuilds them).
"""
from __future__ import annotations

from dataclasses import dataclass

from .actions import ACTIONS, base_action, is_selective
from .once_costs import paid


def compute_times(layer, name: str) -> tuple[float, float]:
    """(forward, backward) compute seconds of `layer` under action `name`."""
    c = layer.options[base_action(name)]
    return c.fwd_s, c.bwd_s


def transfer_time(profile, layer, name: str) -> tuple[float, float]:
    """(device-to-host, host-to-device) seconds of the layer's offload transfers."""
    host = layer.options[name].host_bytes if ACTIONS[name].offload else 0
    bw = profile.bandwidth
    return host / bw.d2h_bytes_per_s, host / bw.h2d_bytes_per_s


def exposed_transfers(profile, assignment: list[str]) -> list[float]:
    """Per layer, the seconds of its transfers that no compute hides."""
    layers, out = profile.layers, []
    for i, (layer, name) in enumerate(zip(layers, assignment)):
        d2h, h2d = transfer_time(profile, layer, name)
        if not profile.bandwidth.overlap:
            out.append(d2h + h2d)
            continue
        if i + 1 < len(layers):
            nf, nb = compute_times(layers[i + 1], assignment[i + 1])
        else:
            nf = nb = 0.0
        out.append(max(0.0, d2h - nf) + max(0.0, h2d - nb))
    return out


@dataclass(frozen=True)
class Prediction:
    step_time_s: float
    compute_s: float             # layers' compute, recomputation included
    recompute_s: float           # extra over the same layers kept (recompute, lookups,
                                 # once costs)
    exposed_transfer_s: float
    saved_bytes: int             # activation bytes on the device at the end of forward
    host_bytes: int              # activation bytes offloaded to host memory
    layer_time_s: tuple          # per layer: compute + exposed transfer
    layer_bytes: tuple           # per layer: own bytes + shared storages it saves first
    once_costs: tuple = ()       # the once costs the plan pays (once_costs.OnceCost)

    @property
    def once_s(self) -> float:
        """Seconds of once costs in step_time_s."""
        return sum(c.time_s for c in self.once_costs)


def joined(profile, assignment: list[str], i: int) -> bool:
    """Whether layer i's checkpoint region joins layer i - 1's (compiled, i - 1 selective,
    i checkpointed whole and fed by i - 1 alone): then layer i keeps no input."""
    return (profile.joins_selective and i > 0 and is_selective(assignment[i - 1])
            and profile.layers[i].follows_previous and joins_after_selective(assignment[i]))


def joins_after_selective(name: str) -> bool:
    """Whether action `name` checkpoints its whole layer as one region (selective, full)."""
    return ACTIONS[name].recompute in ("selective", "full")


def claimed_shared(profile, assignment: list[str]) -> list[frozenset]:
    """Per layer, the shared storages its action keeps on the device."""
    out = []
    for i, (layer, name) in enumerate(zip(profile.layers, assignment)):
        shared = layer.options[name].shared
        out.append(shared - layer.input_shared if joined(profile, assignment, i) else shared)
    return out


def predict(profile, assignment: list[str]) -> Prediction:
    """Predicted time and memory of running `assignment` (one action name per layer)."""
    if len(assignment) != len(profile.layers):
        raise ValueError(f"{len(assignment)} actions for {len(profile.layers)} layers")
    exposed = exposed_transfers(profile, assignment)
    compute, extra, layer_time = 0.0, 0.0, []
    for layer, name, e in zip(profile.layers, assignment, exposed):
        f, b = compute_times(layer, name)
        compute += f + b
        extra += f + b - layer.options["keep"].time_s
        layer_time.append(f + b + e)
    counted = set(profile.rest_shared)
    layer_bytes = []
    for layer, name, shared in zip(profile.layers, assignment,
                                   claimed_shared(profile, assignment)):
        new = shared - counted
        counted |= new
        layer_bytes.append(layer.options[name].internal_bytes
                           + sum(profile.shared_bytes[s] for s in new))
    saved = (profile.rest_bytes + sum(profile.shared_bytes[s] for s in profile.rest_shared)
             + sum(layer_bytes))
    host = sum(layer.options[n].host_bytes for layer, n in zip(profile.layers, assignment))
    once = tuple(paid(profile.once_costs, assignment))
    once_s = sum(c.time_s for c in once)
    return Prediction(profile.rest_time_s + compute + once_s + sum(exposed), compute,
                      extra + once_s, sum(exposed), saved, host, tuple(layer_time),
                      tuple(layer_bytes), once)
