"""Interleaved 1F1B as a model: v virtual stages per rank, their op order and simulation.

The model's layers are split into C = S * v chunks; chunk c runs on rank c % S (rank r
holds chunks r, r + S, ..., r + (v - 1) S), so a micro-batch passes every rank v times.
Each rank runs its ops in the order of torch.distributed.pipelining's
ScheduleInterleaved1F1B (interleaved_order reproduces it): micro-batches go in rounds of
M // rounds (rounds = max(1, M // S), M a multiple of rounds), a rank's forwards cycle
through its chunks one round at a time, it runs

    warm-up = min((v - 1) * per_round + 2 * (S - 1 - r), v * M)

forwards, then alternates one forward and one backward (backwards cycle through its
chunks from the last), then drains the backwards. Rank r therefore holds up to
warm-up + 1 chunk micro-batches at once: with v = 2, S = 4, M = 8 rank 0 holds 11 chunks'
activations, each about half a 1F1B stage's, 5.5 stage micro-batches against 1F1B's 4.
That is what interleaving costs in memory. What it buys: each op is 1/v of a stage's,
so the fill and drain shrink: on S equal ranks with no transfer time and M a multiple of
S, the step is M (f + b) + (S - 1)(f + b) / v, the bubble (S - 1)/v of 1F1B's.

The simulation plays these orders on a clock as schedule.simulate plays 1F1B: a forward
of chunk c waits for chunk c - 1's forward of the same micro-batch plus its boundary's
point-to-point time (StageCost.send_s of chunk c - 1), a backward of chunk c for chunk
c + 1's backward plus chunk c's send_s (the last chunk: its own forward). Memory: a
chunk micro-batch's bytes count on its rank from its forward's start to its backward's
end. No BPipe transfers here: interleaving and parking are alternatives the planner
compares (planner.py).
"""
from __future__ import annotations

from .schedule import Simulation, StageCost, StageResult, curve_peak


def rounds(stages: int, micro_batches: int) -> int:
    """torch's number of rounds: max(1, M // S)."""
    return max(1, micro_batches // stages)


def interleaving_problem(stages: int, virtual: int, micro_batches: int,
                         layers: int | None = None) -> str | None:
    """Why interleaving `virtual` chunks per rank cannot run here (None: it can)."""
    if virtual < 2:
        return f"interleaving needs at least 2 virtual stages per rank, got {virtual}"
    if stages < 2:
        return "interleaving needs at least 2 ranks"
    if micro_batches % rounds(stages, micro_batches):
        return (f"{micro_batches} micro-batches are not a multiple of torch's "
                f"{rounds(stages, micro_batches)} rounds for {stages} ranks")
    if layers is not None and layers < stages * virtual:
        return f"{layers} layers cannot fill {stages * virtual} chunks"
    return None


def interleaved_order(rank: int, stages: int, virtual: int,
                      micro_batches: int) -> list[tuple[str, int, int]]:
    """Rank `rank`'s ops as ScheduleInterleaved1F1B runs them: [("F" | "B", chunk, m)]."""
    S, v, M = stages, virtual, micro_batches
    per_round = M // rounds(S, M)
    warm = min((v - 1) * per_round + 2 * (S - 1 - rank), v * M)
    total = v * M

    def fwd_chunk(step):
        return ((step // per_round) % v) * S + rank

    def bwd_chunk(step):
        return (v - 1 - ((step - warm) // per_round) % v) * S + rank

    nf: dict = {}
    nb: dict = {}
    order = []

    def take(counts, chunk):
        m = counts.get(chunk, 0)
        counts[chunk] = m + 1
        return m

    for step in range(total):
        c = fwd_chunk(step)
        order.append(("F", c, take(nf, c)))
        if step >= warm:
            c = bwd_chunk(step)
            order.append(("B", c, take(nb, c)))
    for step in range(total, total + warm):
        c = bwd_chunk(step)
        order.append(("B", c, take(nb, c)))
    return order


def held_chunk_counts(stages: int, virtual: int, micro_batches: int) -> list[int]:
    """Per rank, the most chunk micro-batches whose activations it holds at once (the
    warm-up forwards and the one that starts the first forward-backward pair)."""
    out = []
    for r in range(stages):
        level = peak = 0
        for kind, _c, _m in interleaved_order(r, stages, virtual, micro_batches):
            level += 1 if kind == "F" else -1
            peak = max(peak, level)
        out.append(peak)
    return out


def simulate_interleaved(chunks: list[StageCost], stages: int,
                         micro_batches: int) -> Simulation:
    """Play interleaved 1F1B for `chunks` (one StageCost per chunk, S * v of them) on
    `stages` ranks; per rank in `stages` of the result: its chunks' forward and backward
    seconds summed (one micro-batch through all its chunks), held chunk micro-batches and
    peak bytes. ops: (chunk, "F"/"B", m) -> (start, end)."""
    C, S, M = len(chunks), stages, micro_batches
    if S < 1 or C % S or M < 1:
        raise ValueError(f"{C} chunks on {S} ranks, {M} micro-batches")
    v = C // S
    problem = interleaving_problem(S, v, M)
    if problem:
        raise ValueError(problem)
    orders = [interleaved_order(r, S, v, M) for r in range(S)]
    ops: dict = {}
    free, pos = [0.0] * S, [0] * S
    events = [[] for _ in range(S)]
    counts = [[] for _ in range(S)]
    while any(pos[r] < len(orders[r]) for r in range(S)):
        progressed = False
        for r in range(S):
            while pos[r] < len(orders[r]):
                kind, c, m = orders[r][pos[r]]
                if kind == "F":
                    dep = (0.0, 0.0) if c == 0 else (ops.get((c - 1, "F", m)),
                                                     chunks[c - 1].send_s)
                elif c == C - 1:
                    dep = (ops.get((c, "F", m)), 0.0)
                else:
                    dep = (ops.get((c + 1, "B", m)), chunks[c].send_s)
                if dep[0] is None:
                    break
                ready = dep[0] if isinstance(dep[0], float) else dep[0][1] + dep[1]
                start = max(free[r], ready)
                end = start + (chunks[c].forward_s if kind == "F" else chunks[c].backward_s)
                ops[c, kind, m] = (start, end)
                free[r] = end
                a = chunks[c].act_bytes
                events[r].append((start, a) if kind == "F" else (end, -a))
                counts[r].append((start, 1) if kind == "F" else (end, -1))
                pos[r] += 1
                progressed = True
        if not progressed:
            raise RuntimeError("interleaved schedule deadlocked (a bug: the order is "
                               "acyclic)")
    ranks = []
    for r in range(S):
        mine = [chunks[c] for c in range(r, C, S)]
        f = sum(x.forward_s for x in mine)
        b = sum(x.backward_s for x in mine)
        ranks.append(StageResult(f, b, M * (f + b), curve_peak(counts[r]),
                                 curve_peak(events[r]), 0.0, 0.0))
    return Simulation(max(free), ranks, ops=ops)
