"""The pipeline plan of given costs: search, balance, write down (pure Python, no torch).

partition.Search finds the fastest boundaries and actions without transfers; bpipe.balance
adds BPipe transfers where they make the simulated step faster or make a plan possible;
with `interleave` (v values), interleaved 1F1B candidates (interleaved_plan.py) compete
too and win only where their simulated step is strictly faster within the budget; the
best candidate becomes a PipelinePlan. A budget no candidate meets is a UserError
naming the least budget the schedule's structure allows (least-memory actions, BPipe
parking at its best, transfers taking no time).
"""
from __future__ import annotations

from ...errors import UserError
from ..units import format_bytes
from .bpipe import balance, options_by_stage
from .costs import Link, ModelCosts
from .document import INTERLEAVED, SCHEDULE, PipelinePlan
from .interleaved_schedule import interleaving_problem
from .interleaved_plan import InterleavedSearch
from .partition import EXHAUSTIVE, Candidate, Search, least_budget
from .schedule import StageCost


def plan_from_costs(model: ModelCosts, stages: int, micro_batches: int, budget_bytes: float,
                    link: Link, *, bpipe: bool = True, info: dict | None = None,
                    interleave: tuple = (2,)) -> PipelinePlan:
    """The fastest predicted 1F1B plan of `model`'s costs within `budget_bytes` per device.

    bpipe=False: no transfers (the plan a pipeline without activation balancing gets).
    info: the document's `model` entry (which model the costs are of).
    interleave: virtual-stage counts v to consider for interleaved 1F1B (each where
    torch's schedule can run it: interleaved.interleaving_problem); () plans 1F1B only.
    An interleaved plan is chosen only where its simulated step is strictly faster than
    the best 1F1B one (BPipe's included) within the budget.
    """
    if stages < 1 or micro_batches < 1:
        raise UserError(f"--stages and --micro-batches must be >= 1, got {stages} and "
                        f"{micro_batches}")
    if micro_batches < stages:
        raise UserError(f"{stages} stages and {micro_batches} micro-batches: 1F1B needs at "
                        "least as many micro-batches as stages")
    if stages > len(model.layers):
        raise UserError(f"{stages} stages for {len(model.layers)} layers: a stage needs at "
                        "least one layer (fewer stages, or name finer layers with --layers)")
    search = Search(model, stages, micro_batches, budget_bytes, link)
    base = search.best()
    best = balance(search, base) if bpipe and stages > 1 else base
    virtual, tried = 1, {}
    for v in interleave:
        if interleaving_problem(stages, v, micro_batches, len(model.layers)):
            continue
        cand = InterleavedSearch(model, stages, v, micro_batches, budget_bytes, link,
                                 ranges=search.frontiers).best()
        tried[str(v)] = None if cand is None else cand.step_s
        if cand is not None and (best is None or cand.step_s < best.step_s):
            best, virtual = cand, v
    if best is None:
        least = least_budget(search, options_by_stage(stages, micro_batches) if bpipe
                             else {})
        raise UserError(
            f"memory budget {format_bytes(budget_bytes)} per device cannot be met by any "
            f"{stages}-stage plan of {micro_batches} micro-batches; the least that could "
            f"work is {format_bytes(least)} (every layer at its least-memory action"
            f"{', BPipe balancing' if bpipe and stages > 1 else ''})")
    found = {"base_step_s": None if base is None else base.step_s, "bpipe": bpipe,
             "exhaustive_limit": EXHAUSTIVE}
    if interleave:
        found["interleaved_step_s"] = tried
    return to_document(model, best, stages, micro_batches, budget_bytes, link, info or {},
                       found, virtual)


def to_document(model: ModelCosts, cand: Candidate, stages: int, micro_batches: int,
                budget_bytes: float, link: Link, info: dict, search: dict,
                virtual: int = 1) -> PipelinePlan:
    """The candidate as the plan document (document.py); `virtual` > 1: an interleaved
    candidate, its stage_costs per chunk (rank c % S), its rows per rank."""
    names = model.names
    sim = cand.simulation
    stage_rows = []
    per_rank = cand.stage_costs if virtual == 1 else [
        _rank_cost(cand.stage_costs[r::stages]) for r in range(stages)]
    for cost, res in zip(per_rank, sim.stages):
        stage_rows.append({
            "forward_s": cost.forward_s, "backward_s": cost.backward_s,
            "peak_saved_bytes": res.peak_bytes, "parked_bytes_in": res.parked_bytes_in,
            "parked_bytes_out": res.parked_bytes_out,
            "held_micro_batches": res.held_micro_batches,
            "saved_bytes_per_micro_batch": cost.act_bytes, "send_s": cost.send_s,
            "exposed_transfer_s": res.exposed_transfer_s})
    transfers = [{"from": t.src, "to": t.dst, "micro_batches": list(t.micro_batches),
                  "bytes": t.bytes, "seconds": t.seconds} for t in cand.transfers]
    plan = PipelinePlan(
        stages=stages, micro_batches=micro_batches, layers=names,
        boundaries=list(cand.boundaries), actions=dict(zip(names, cand.actions)),
        transfers=transfers, budget_bytes=int(budget_bytes),
        predicted={"step_s": sim.step_s, "transfer_s": sim.transfer_s,
                   "exposed_transfer_s": sim.exposed_s, "stages": stage_rows,
                   **({"chunks": [{"forward_s": c.forward_s, "backward_s": c.backward_s,
                                   "saved_bytes_per_micro_batch": c.act_bytes,
                                   "send_s": c.send_s} for c in cand.stage_costs]}
                      if virtual > 1 else {})},
        model=info, link=link.to_json(), search=search,
        schedule=SCHEDULE if virtual == 1 else INTERLEAVED, virtual_stages=virtual)
    plan.check()
    return plan


def _rank_cost(chunks: list) -> StageCost:
    """A rank's chunks as one row: seconds and bytes of one micro-batch through all of
    them; send_s the largest of their boundaries'."""
    return StageCost(sum(c.forward_s for c in chunks), sum(c.backward_s for c in chunks),
                     sum(c.act_bytes for c in chunks), max(c.send_s for c in chunks))
