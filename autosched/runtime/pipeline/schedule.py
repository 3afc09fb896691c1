"""The 1F1B pipeline schedule as a model: op order per stage, and an event simulation.

Stage i of S runs min(S - i - 1, M) warm-up forwards, then alternates one forward and one
backward, then drains the remaining backwards (PipeDream-flush / Megatron-LM's 1F1B). It
therefore holds the activations of at most min(S - i, M) micro-batches at once: the
first stage the most, the last the fewest.

The simulation plays the schedule on a clock. A forward of micro-batch m on stage i
starts when the stage is free and m's boundary activation has arrived from stage i - 1
(its forward's end + the point-to-point time of that boundary); a backward when the stage
is free and m's gradient has arrived from stage i + 1. Point-to-point sends are
asynchronous (the sender goes on computing), one boundary does not queue behind another.
The step time is the critical path: the end of the last op anywhere.

BPipe transfers (bpipe.py chooses them): stage i parks the saved activations of some
micro-batches on a lighter stage j after their forward, and fetches them back before
their backward. Each pair (i, j) has its own link, concurrent with compute; transfers on
it run one at a time in the order they are issued. A park starts when the forward ends;
the fetch is issued when stage i starts the op that precedes the backward in its order
(one op of prefetch, or when the park has ended, if later). A backward waits for its
fetch: that wait is the transfer's exposed time, the rest of the link time is hidden.
So the order on a pair's link is fixed by the stage's op order alone: for each op, the
park of its micro-batch (a parked forward), then the fetch issued as it starts. A fetch
issued at a parked forward's start therefore waits for that forward's park: the
micro-batch just computed leaves before the fetched one arrives (out, then in), which is
what lets a stage hold fewer micro-batches than its warm-up window; the runner
(parking.py) keeps the same order.

Memory, in saved-activation bytes per stage over time: a micro-batch's activations count
from its forward's start to its backward's end; a parked one leaves stage i when its park
has ended and counts again from its fetch's start; on stage j it counts from the park's
start to the fetch's end. At one instant, releases come before allocations. The peak of
that curve is the stage's memory; with unit bytes and no transfers it is the held count.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StageCost:
    """One stage's per-micro-batch costs: compute seconds, saved-activation bytes, and the
    point-to-point seconds of the boundary it sends on (activation forward, gradient back;
    the last stage sends nothing)."""

    forward_s: float
    backward_s: float
    act_bytes: float
    send_s: float = 0.0


@dataclass(frozen=True)
class Transfer:
    """Stage `src` parks these micro-batches' saved activations on stage `dst`; each moves
    `bytes` each way and takes `seconds` on the link each way."""

    src: int
    dst: int
    micro_batches: tuple
    bytes: float
    seconds: float


@dataclass
class StageResult:
    forward_s: float               # per micro-batch
    backward_s: float
    busy_s: float                  # compute over the step
    held_micro_batches: int        # peak count whose activations the stage is responsible for
    peak_bytes: float              # peak resident saved bytes (own - parked out + parked in)
    parked_bytes_in: float         # peak bytes parked here by another stage
    parked_bytes_out: float        # peak bytes of this stage's parked on another
    exposed_transfer_s: float = 0.0    # backward delay waiting for fetches


@dataclass
class Simulation:
    step_s: float
    stages: list
    transfer_s: float = 0.0        # link time of all parks and fetches
    exposed_s: float = 0.0         # of which backwards waited for
    ops: dict = field(default_factory=dict)   # (stage, "F"/"B", m) -> (start, end)
    parks: dict = field(default_factory=dict)     # (src stage, m) -> (start, end)
    fetches: dict = field(default_factory=dict)   # (src stage, m) -> (start, end)

    @property
    def hidden_s(self) -> float:
        return self.transfer_s - self.exposed_s


def one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """Stage `stage`'s op order under 1F1B: [("F", 0), ..., ("B", m), ...]."""
    warm = min(stages - stage - 1, micro_batches)
    order = [("F", m) for m in range(warm)]
    for k in range(micro_batches - warm):
        order += [("F", warm + k), ("B", k)]
    order += [("B", m) for m in range(micro_batches - warm, micro_batches)]
    return order


def held_counts(stages: int, micro_batches: int) -> list[int]:
    """Per stage, the most micro-batches whose activations 1F1B holds at once."""
    return [min(stages - i, micro_batches) for i in range(stages)]


def simulate(costs: list[StageCost], micro_batches: int,
             transfers: list[Transfer] = ()) -> Simulation:
    """Play 1F1B for `costs` (one per stage) and M micro-batches; see the module docstring."""
    S, M = len(costs), micro_batches
    if S < 1 or M < 1:
        raise ValueError(f"need at least one stage and micro-batch, got {S} and {M}")
    orders = [one_f_one_b(i, S, M) for i in range(S)]
    parked = {}                         # (src, m) -> Transfer
    for t in transfers:
        if not (0 <= t.src < S and 0 <= t.dst < S) or t.src == t.dst:
            raise ValueError(f"transfer {t.src} -> {t.dst}: not two stages of {S}")
        for m in t.micro_batches:
            if (t.src, m) in parked or not 0 <= m < M:
                raise ValueError(f"micro-batch {m} of stage {t.src}: parked twice or no "
                                 "such micro-batch")
            parked[t.src, m] = t
    ends, ops = {}, {}
    link_free, park_end, fetch_end, parks, fetches = {}, {}, {}, {}, {}
    events = [[] for _ in range(S)]            # per stage: (time, delta bytes)
    free, pos = [0.0] * S, [0] * S
    exposed = [0.0] * S
    while any(pos[i] < len(orders[i]) for i in range(S)):
        progressed = False
        for i in range(S):
            while pos[i] < len(orders[i]):
                kind, m = orders[i][pos[i]]
                if kind == "F":
                    dep = 0.0 if i == 0 else ends.get((i - 1, "F", m))
                    arrive = None if dep is None else dep + (costs[i - 1].send_s if i else 0)
                else:
                    dep = ends.get((i, "F", m)) if i == S - 1 else ends.get((i + 1, "B", m))
                    arrive = None if dep is None else dep + (costs[i].send_s if i < S - 1
                                                             else 0.0)
                if arrive is None:
                    break
                start = max(free[i], arrive)
                if kind == "B" and (i, m) in fetch_end:
                    waited = max(0.0, fetch_end[i, m] - start)
                    exposed[i] += waited
                    start += waited
                dur = costs[i].forward_s if kind == "F" else costs[i].backward_s
                end = start + dur
                ends[i, kind, m] = end
                ops[i, kind, m] = (start, end)
                free[i] = end
                a = costs[i].act_bytes
                if kind == "F":
                    events[i].append((start, a))
                    if (i, m) in parked:
                        t = parked[i, m]
                        s0 = max(end, link_free.get((t.src, t.dst), 0.0))
                        park_end[i, m] = link_free[t.src, t.dst] = s0 + t.seconds
                        parks[i, m] = (s0, s0 + t.seconds)
                        events[t.dst].append((s0, t.bytes))
                        events[i].append((s0 + t.seconds, -t.bytes))
                else:
                    events[i].append((end, -a))
                _issue_fetch(i, pos[i], orders[i], start, parked, park_end, fetch_end,
                             link_free, events, fetches)
                pos[i] += 1
                progressed = True
        if not progressed:
            raise RuntimeError("1F1B schedule deadlocked (a bug: the order is acyclic)")
    link_total = sum(2 * t.seconds * len(t.micro_batches) for t in transfers)
    step = max(free)
    stages = []
    for i, c in enumerate(costs):
        held = curve_peak([(t, 1 if d > 0 else -1) for t, d in _own(ops, i)])
        stages.append(StageResult(
            c.forward_s, c.backward_s, M * (c.forward_s + c.backward_s), held,
            curve_peak(events[i]),
            _parked_peak(transfers, i, park_end, fetch_end, incoming=True),
            _parked_peak(transfers, i, park_end, fetch_end, incoming=False), exposed[i]))
    return Simulation(step, stages, link_total, sum(exposed), ops, parks, fetches)


def link_order(order: list, parked: dict) -> dict:
    """{destination stage: [("park" | "fetch", micro-batch), ...]}: one stage's transfers
    on each pair's link in the order simulate() runs them, given the stage's op `order`
    and `parked` ({micro-batch: destination}): per op, the park of a parked forward's
    micro-batch, then the fetch of the parked micro-batch whose backward comes next."""
    seq: dict = {}
    for p, (kind, m) in enumerate(order):
        if kind == "F" and m in parked:
            seq.setdefault(parked[m], []).append(("park", m))
        if p + 1 < len(order) and order[p + 1][0] == "B" and order[p + 1][1] in parked:
            n = order[p + 1][1]
            seq.setdefault(parked[n], []).append(("fetch", n))
    return seq


def _issue_fetch(i, p, order, start, parked, park_end, fetch_end, link_free, events,
                 fetches):
    """Op p of stage i started at `start` (and its own park, if any, is on the link):
    issue the fetch of the micro-batch whose backward is op p + 1 (if parked), from then
    or from its park's end, whichever is later, on its pair's link."""
    if p + 1 >= len(order) or order[p + 1][0] != "B" or (i, order[p + 1][1]) not in parked:
        return
    m = order[p + 1][1]
    t = parked[i, m]
    s0 = max(start, park_end[i, m], link_free.get((t.src, t.dst), 0.0))
    fetch_end[i, m] = link_free[t.src, t.dst] = s0 + t.seconds
    fetches[i, m] = (s0, s0 + t.seconds)
    events[i].append((s0, t.bytes))
    events[t.dst].append((s0 + t.seconds, -t.bytes))


def _own(ops, i):
    """(time, +1/-1) of stage i's micro-batches: forward start, backward end."""
    out = []
    for (stage, kind, _m), (start, end) in ops.items():
        if stage == i:
            out.append((start, 1) if kind == "F" else (end, -1))
    return out


def curve_peak(curve) -> float:
    """The peak of a step curve given as (time, delta) events; releases first at ties."""
    level = peak = 0
    for _, delta in sorted(curve, key=lambda e: (e[0], e[1] > 0)):
        level += delta
        peak = max(peak, level)
    return peak


def _parked_peak(transfers, stage, park_end, fetch_end, incoming: bool) -> float:
    """Peak bytes parked on `stage` (incoming) or of `stage` parked elsewhere (outgoing):
    a micro-batch counts from its park's start (incoming) or end (outgoing) to its fetch's
    end (incoming) or start (outgoing)."""
    curve = []
    for t in transfers:
        if (t.dst if incoming else t.src) != stage:
            continue
        for m in t.micro_batches:
            if (t.src, m) not in park_end or (t.src, m) not in fetch_end:
                continue
            up = park_end[t.src, m] - (t.seconds if incoming else 0.0)
            down = fetch_end[t.src, m] - (0.0 if incoming else t.seconds)
            curve += [(up, t.bytes), (down, -t.bytes)]
    return curve_peak(curve)
