"""Interleaved 1F1B (runtime/pipeline/interleaved.py, interleaved_plan.py): the op order is
torch's ScheduleInterleaved1F1B's, the memory count per rank and the bubble on synthetic
costs (known answers), the planner choosing it only where it is faster within budget,
and the document. Pure Python but for the order check against torch's own function.
Times are dyadic fractions, so the simulated clock is exact."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from autosched.errors import UserError
from autosched.runtime.pipeline import (Cost, LayerCosts, Link, ModelCosts, PipelinePlan,
                                        StageCost, plan_from_costs, simulate)
from autosched.runtime.pipeline.interleaved_schedule import (held_chunk_counts, interleaved_order,
                                                    interleaving_problem,
                                                    simulate_interleaved)
from autosched.runtime.pipeline.launch import read_plan

FAST = Link(bytes_per_s=2.0 ** 40, latency_s=0.0)


@pytest.mark.parametrize("S,v,M", [(2, 2, 2), (2, 2, 4), (3, 2, 6), (4, 2, 4), (4, 2, 8),
                                   (4, 3, 8), (4, 2, 12)])
def test_the_order_is_torchs_interleaved_1f1b(S, v, M):
    from torch.distributed.pipelining.schedules import (ScheduleInterleaved1F1B,
                                                        _ComputationType)

    per_round = M // max(1, M // S)
    state = SimpleNamespace(n_local_stages=v, microbatches_per_round=per_round,
                            pp_group_size=S, _n_microbatches=M)
    for rank in range(S):
        ops = ScheduleInterleaved1F1B._calculate_single_rank_operations(state, rank)
        theirs = [("F" if a.computation_type == _ComputationType.FORWARD else "B",
                   a.stage_index, a.microbatch_index) for a in ops if a is not None]
        assert interleaved_order(rank, S, v, M) == theirs


def test_a_rank_order_warms_up_over_its_chunks_then_alternates():
    """S = 2, v = 2, M = 4, rank 0 (chunks 0 and 2): warm-up (v - 1) 2 + 2 (S - 1) = 4
    forwards, a round of 2 micro-batches per chunk, then F / B pairs."""
    assert interleaved_order(0, 2, 2, 4) == [
        ("F", 0, 0), ("F", 0, 1), ("F", 2, 0), ("F", 2, 1),
        ("F", 0, 2), ("B", 2, 0), ("F", 0, 3), ("B", 2, 1),
        ("F", 2, 2), ("B", 0, 0), ("F", 2, 3), ("B", 0, 1),
        ("B", 2, 2), ("B", 2, 3), ("B", 0, 2), ("B", 0, 3)]


@pytest.mark.parametrize("S,v,M,held", [
    (2, 2, 4, [5, 3]), (4, 2, 8, [11, 9, 7, 5]), (4, 3, 8, [15, 13, 11, 9]),
    (3, 2, 6, [8, 6, 4]), (4, 2, 4, [8, 8, 7, 5])])
def test_memory_count_per_rank_is_the_warm_up_plus_one_capped_at_v_m(S, v, M, held):
    """Rank r holds min((v - 1) M/rounds + 2 (S - 1 - r) + 1, v M) chunk micro-batches:
    more than 1F1B's S - r, in chunks of 1/v of a stage each."""
    assert held_chunk_counts(S, v, M) == held
    costs = [StageCost(0.25 * (1 + c % 3), 0.5, 1.0, 0.125) for c in range(S * v)]
    sim = simulate_interleaved(costs, S, M)
    assert [s.held_micro_batches for s in sim.stages] == held
    assert [s.peak_bytes for s in sim.stages] == held         # one byte each


@pytest.mark.parametrize("S,v,M,f,b", [(2, 2, 4, 1.0, 1.0), (2, 2, 4, 1.0, 2.0),
                                       (4, 2, 8, 1.0, 2.0), (4, 4, 8, 1.0, 2.0),
                                       (3, 2, 6, 0.5, 1.5), (4, 2, 12, 1.0, 1.0)])
def test_the_bubble_is_one_vth_of_1f1b(S, v, M, f, b):
    """Equal ranks, no transfer time: 1F1B's step is M (f + b) + (S - 1)(f + b); with v
    chunks of f / v and b / v per rank the fill and drain shrink v-fold."""
    one = simulate([StageCost(f, b, 1.0)] * S, M).step_s
    inter = simulate_interleaved([StageCost(f / v, b / v, 1.0)] * (S * v), S, M).step_s
    assert inter == M * (f + b) + (S - 1) * (f + b) / v
    assert inter - M * (f + b) == (one - M * (f + b)) / v


def test_what_torch_cannot_interleave_is_named():
    assert interleaving_problem(2, 2, 5) == ("5 micro-batches are not a multiple of "
                                             "torch's 2 rounds for 2 ranks")
    assert interleaving_problem(2, 1, 4) == ("interleaving needs at least 2 virtual "
                                             "stages per rank, got 1")
    assert interleaving_problem(2, 2, 4, layers=3) == "3 layers cannot fill 4 chunks"
    assert interleaving_problem(2, 2, 4, layers=4) is None


# -- the planner ---------------------------------------------------------------------------

def _eight() -> ModelCosts:
    """Eight equal layers: kept 0.25 / 0.5 s and 4 bytes a micro-batch, recomputed
    0.5 / 1 s and 1 byte."""
    return ModelCosts(tuple(LayerCosts(f"l{k}", {"keep": Cost(0.25, 0.5, 4),
                                                 "recompute": Cost(0.5, 1.0, 1)})
                            for k in range(8)))


def test_the_planner_interleaves_where_it_is_faster_within_budget():
    """S = 2, M = 4, everything kept: 1F1B (two stages of 4 layers, f = 1, b = 2) takes
    (M + S - 1) 3 = 15 s and holds 2 x 16 bytes on stage 0; interleaved (four chunks of
    2 layers) takes 4 x 3 + 3 / 2 = 13.5 s and holds 5 chunks of 8 bytes on rank 0."""
    plan = plan_from_costs(_eight(), 2, 4, 40, FAST)
    assert (plan.schedule, plan.virtual_stages, plan.version) == ("interleaved-1F1B", 2, 2)
    assert plan.boundaries == [0, 2, 4, 6, 8] and set(plan.actions.values()) == {"keep"}
    assert plan.predicted["step_s"] == 13.5 and plan.search["base_step_s"] == 15.0
    assert [s["peak_saved_bytes"] for s in plan.predicted["stages"]] == [40, 24]
    assert [s["held_micro_batches"] for s in plan.predicted["stages"]] == [5, 3]
    assert plan.stage_layers(0) == ["l0", "l1", "l4", "l5"]
    assert "interleaved-1F1B (2 virtual stages per device)" in plan.table()
    assert "0      l0..l1+l4..l5  keep" in plan.table()


@pytest.mark.parametrize("budget, interleaved_step", [(39, 15.75), (32, 18.0)])
def test_the_planner_keeps_1f1b_where_memory_forbids_interleaving(budget, interleaved_step):
    """Below 40 bytes rank 0 cannot keep 5 chunks of 8 bytes: the interleaved candidate
    recomputes (39: 15.75 s; 32: 6.4 bytes a chunk micro-batch, each of rank 0's chunks
    keep + recompute, 2.25 s a micro-batch, 18 s of work it never waits in) and is
    slower than 1F1B, which keeps everything in 32 bytes at 15 s."""
    plan = plan_from_costs(_eight(), 2, 4, budget, FAST)
    assert (plan.schedule, plan.virtual_stages, plan.version) == ("1F1B", 1, 1)
    assert plan.predicted["step_s"] == 15.0
    assert plan.search["interleaved_step_s"] == {"2": interleaved_step}


def test_interleaving_is_not_tried_where_torch_cannot_run_it_or_when_off():
    assert plan_from_costs(_eight(), 2, 5, 40, FAST).search["interleaved_step_s"] == {}
    plan = plan_from_costs(_eight(), 2, 4, 40, FAST, interleave=())
    assert plan.schedule == "1F1B" and "interleaved_step_s" not in plan.search


# -- the document --------------------------------------------------------------------------

def test_an_interleaved_plan_round_trips_and_the_runner_reads_it():
    plan = plan_from_costs(_eight(), 2, 4, 40, FAST)
    text = plan.to_json()
    assert PipelinePlan.from_json(text) == plan
    run = read_plan(json.loads(text))
    assert (run.stages, run.virtual, run.boundaries) == (2, 2, (0, 2, 4, 6, 8))


@pytest.mark.parametrize("change, message", [
    ({"virtual_stages": 1}, "malformed pipeline plan: schedule 'interleaved-1F1B' with 1 "
     "virtual stages at version 2 (1F1B with 1 at version 1, or interleaved-1F1B with 2 or "
     "more at version 2)"),
    ({"boundaries": [0, 4, 8]}, "malformed pipeline plan: boundaries [0, 4, 8] do not "
     "split 8 layers into 4 non-empty chunks"),
    ({"transfers": [{"from": 0, "to": 1, "micro_batches": [0], "bytes": 8,
                     "seconds": 0.0}]},
     "malformed pipeline plan: interleaved-1F1B with transfers")])
def test_a_malformed_interleaved_plan_is_refused_in_one_line(change, message):
    data = dict(json.loads(plan_from_costs(_eight(), 2, 4, 40, FAST).to_json()), **change)
    with pytest.raises(UserError) as e:
        PipelinePlan.from_json(json.dumps(data))
    assert str(e.value) == message


def test_the_runner_refuses_an_interleaving_torch_cannot_run():
    data = dict(json.loads(plan_from_costs(_eight(), 2, 4, 40, FAST).to_json()),
                micro_batches=5)
    with pytest.raises(UserError) as e:
        read_plan(data)
    assert str(e.value) == ("pipeline plan: 5 micro-batches are not a multiple of torch's "
                            "2 rounds for 2 ranks")


def test_compile_budgets_are_not_chosen_for_an_interleaved_plan():
    from autosched.runtime.pipeline import stage_compile_fractions

    doc = json.loads(plan_from_costs(_eight(), 2, 4, 40, FAST).to_json())
    with pytest.raises(UserError) as e:
        stage_compile_fractions("model.py", doc, 40)
    assert str(e.value) == ("compile budgets are chosen for 1F1B plans; this plan is "
                            "interleaved")
