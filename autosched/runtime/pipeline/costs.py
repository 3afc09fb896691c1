"""Per-layer, per-action costs of one micro-batch, and the fastest actions for a stage.

A pipeline plan is searched on these numbers alone (pure Python): for every layer and
action its forward and backward seconds and the saved-activation bytes it keeps for
backward, the bytes a stage receives when it starts at that layer (the boundary
activation, sent forward, its gradient sent back), and what the model does outside the
layers: before them (embedding) on the first stage, after them (head, loss) on the last.
make_pipeline_plan.py fills them from the single-device profile; tests write them.

For a contiguous range of layers the choice of actions is a knapsack: least compute time
such that the stage's micro-batches in memory times the range's bytes fit what the stage
may use. `Frontier` keeps every (bytes, time) point of the range no other point beats in
both, so the fastest fitting choice is exact for any capacity (a frontier wider than
`MAX_POINTS` keeps an even sample of its points: then it is no longer exact).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

MAX_POINTS = 512


@dataclass(frozen=True)
class Cost:
    """One micro-batch through a layer (or the part outside the layers) under one action."""

    forward_s: float
    backward_s: float
    bytes: float

    @property
    def time_s(self) -> float:
        return self.forward_s + self.backward_s


NOTHING = Cost(0.0, 0.0, 0)


@dataclass(frozen=True)
class LayerCosts:
    name: str
    actions: dict                 # action name -> Cost
    in_bytes: float = 0           # boundary activation received when a stage starts here


@dataclass(frozen=True)
class ModelCosts:
    layers: tuple                 # LayerCosts, in model order
    first: Cost = NOTHING         # outside the layers, before them: on the first stage
    last: Cost = NOTHING          # after them (head, loss): on the last stage

    @property
    def names(self) -> list[str]:
        return [layer.name for layer in self.layers]


@dataclass(frozen=True)
class Link:
    """A point-to-point link between stages: bytes / bytes_per_s + latency_s per message."""

    bytes_per_s: float
    latency_s: float
    source: str = "given"

    def seconds(self, nbytes: float) -> float:
        return nbytes / self.bytes_per_s + self.latency_s if nbytes else 0.0

    def to_json(self) -> dict:
        return {"bytes_per_s": self.bytes_per_s, "latency_s": self.latency_s,
                "source": self.source}


@dataclass(frozen=True)
class Point:
    bytes: float
    forward_s: float
    backward_s: float
    actions: tuple

    @property
    def time_s(self) -> float:
        return self.forward_s + self.backward_s


class Frontier:
    """The non-dominated (bytes, time) choices of actions for one range of layers, sorted
    by bytes (ascending; time then strictly descends)."""

    def __init__(self, points: list[Point]):
        points = sorted(points, key=lambda p: (p.bytes, p.time_s))
        kept: list[Point] = []
        for p in points:
            if not kept or p.time_s < kept[-1].time_s:
                kept.append(p)
        if len(kept) > MAX_POINTS:       # an even sample, both ends kept
            step = (len(kept) - 1) / (MAX_POINTS - 1)
            kept = [kept[round(k * step)] for k in range(MAX_POINTS)]
        self.points = kept
        self._bytes = [p.bytes for p in kept]

    def extended(self, layer: LayerCosts) -> "Frontier":
        """This range with `layer` appended."""
        return Frontier([Point(p.bytes + c.bytes, p.forward_s + c.forward_s,
                               p.backward_s + c.backward_s, p.actions + (name,))
                         for p in self.points for name, c in layer.actions.items()])

    def fastest_within(self, capacity: float) -> Point | None:
        """The fastest point whose bytes are at most `capacity`, or None."""
        k = bisect.bisect_right(self._bytes, capacity)
        return self.points[k - 1] if k else None

    @property
    def least_bytes(self) -> float:
        return self.points[0].bytes


def frontiers(model: ModelCosts) -> dict:
    """{(a, b): Frontier of layers a..b-1} for every non-empty range."""
    out = {}
    n = len(model.layers)
    for a in range(n):
        f = Frontier([Point(0, 0.0, 0.0, ())])
        for b in range(a, n):
            f = f.extended(model.layers[b])
            out[a, b + 1] = f
    return out


def stage_extra(model: ModelCosts, stage: int, stages: int) -> Cost:
    """What stage `stage` runs outside the layers: the part before them on the first,
    after them on the last (both on a single stage)."""
    parts = ([model.first] if stage == 0 else []) + \
        ([model.last] if stage == stages - 1 else [])
    return Cost(sum(p.forward_s for p in parts), sum(p.backward_s for p in parts),
                sum(p.bytes for p in parts))
