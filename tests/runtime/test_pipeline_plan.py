"""Pipeline plans (autosched/runtime/pipeline/): the 1F1B model, the partition search
against brute force, BPipe's transfers, the document, the refusal, and the CLI.

All but the CLI test are pure Python on synthetic costs; times are dyadic fractions so
the simulated clock is exact and every equality below is exact."""
from __future__ import annotations

import argparse
import itertools
import json
import textwrap

import pytest

from autosched.cli import plan as cli_plan
from autosched.errors import UserError
from autosched.runtime.pipeline import (Cost, LayerCosts, Link, ModelCosts, PipelinePlan,
                                        StageCost, Transfer, plan_from_costs, simulate)
from autosched.runtime.pipeline.bpipe import parking_options
from autosched.runtime.pipeline.partition import Search
from autosched.runtime.pipeline.schedule import one_f_one_b

FAST = Link(bytes_per_s=2.0 ** 40, latency_s=0.0)      # transfers take ~no time


# -- the 1F1B schedule ----------------------------------------------------------------

def test_1f1b_order_of_a_middle_stage():
    assert one_f_one_b(1, 3, 4) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1),
                                    ("F", 3), ("B", 2), ("B", 3)]


@pytest.mark.parametrize("S,M", [(1, 1), (1, 5), (2, 1), (2, 2), (3, 2), (4, 4), (4, 9),
                                 (5, 3), (6, 8)])
def test_1f1b_holds_min_of_s_minus_i_and_m_micro_batches_per_stage(S, M):
    costs = [StageCost(0.25 * (i + 1), 0.5 + 0.25 * (i % 2), 1.0, 0.125 * i)
             for i in range(S)]                      # unequal stages, p2p on every link
    sim = simulate(costs, M)
    expected = [min(S - i, M) for i in range(S)]
    assert [s.held_micro_batches for s in sim.stages] == expected
    assert [s.peak_bytes for s in sim.stages] == expected          # one byte each


@pytest.mark.parametrize("S,M,f,b", [(1, 4, 1.0, 2.0), (2, 2, 1.0, 2.0), (2, 4, 0.5, 1.5),
                                     (4, 8, 1.0, 2.0), (3, 5, 2.0, 1.0), (4, 2, 0.25, 0.75)])
def test_balanced_pipeline_step_is_m_plus_s_minus_1_times_f_plus_b(S, M, f, b):
    """Equal stages, no p2p time: micro-batch 0 reaches the last stage after (S - 1) f,
    which then runs M forwards and M backwards back to back (it never waits: each next
    input arrived during its previous backward), and the last backward needs (S - 1) b
    more to drain to stage 0: (S - 1)(f + b) + M (f + b) = (M + S - 1)(f + b)."""
    assert simulate([StageCost(f, b, 1.0)] * S, M).step_s == (M + S - 1) * (f + b)


def test_p2p_time_on_the_critical_path():
    """S = 2, M = 2, f = 1, b = 2, 0.5 s per message: stage 1 runs F0 1.5-2.5, B0
    2.5-4.5, F1 4.5-5.5, B1 5.5-7.5; stage 0's B1 waits for that gradient: 8-10."""
    sim = simulate([StageCost(1.0, 2.0, 1.0, 0.5), StageCost(1.0, 2.0, 1.0)], 2)
    assert sim.step_s == 10.0
    assert sim.ops[1, "F", 1] == (4.5, 5.5) and sim.ops[0, "B", 1] == (8.0, 10.0)


@pytest.mark.parametrize("seconds,exposed", [(1.0, 0.0), (2.0, 1.0)])
def test_a_fetch_that_cannot_finish_in_time_delays_the_backward(seconds, exposed):
    """S = 2, M = 1, f = 1, b = 2: stage 0 parks micro-batch 0 on stage 1 from t = 1
    (its forward's end) to 1 + x, fetches it back by 1 + 2x; its backward could start at
    4 (stage 1's backward ends then): it waits max(0, 2x - 3)."""
    sim = simulate([StageCost(1.0, 2.0, 8.0)] * 2, 1, [Transfer(0, 1, (0,), 8.0, seconds)])
    assert sim.exposed_s == exposed and sim.stages[0].exposed_transfer_s == exposed
    assert sim.transfer_s == 2 * seconds and sim.hidden_s == 2 * seconds - exposed
    assert sim.step_s == 6.0 + exposed
    assert sim.stages[1].parked_bytes_in == 8.0 and sim.stages[1].peak_bytes == 16.0


def test_parking_lowers_the_first_stage_and_raises_its_partner():
    """S = 4, M = 8, one byte a micro-batch, transfers instantaneous: stage 0 holds 4
    without parking; parking every other micro-batch on stage 3 leaves 3 resident
    (the fetch of the next backward's micro-batch overlaps the forward before it, so at
    least 2 are resident), and stage 3 holds 1 of its own + 2 parked."""
    costs = [StageCost(1.0, 2.0, 1.0)] * 4
    sim = simulate(costs, 8, [Transfer(0, 3, (0, 2, 4, 6), 1.0, 0.0)])
    assert [s.peak_bytes for s in sim.stages] == [3.0, 3.0, 2.0, 3.0]
    assert sim.stages[0].parked_bytes_out == 2.0 and sim.stages[3].parked_bytes_in == 2.0
    assert sim.step_s == simulate(costs, 8).step_s == 33.0
    options = parking_options(4, 8, 0, 3)
    # with transfers of a moment (the link moves one at a time): 2 resident needs every
    # micro-batch parked, and stage 3 then hosts 4 at once (a park arrives before the
    # previous fetch has gone back)
    assert [(p.resident, p.in_count, p.micro_batches) for p in options] == [
        (3, 2, (0, 2, 4, 6)), (2, 4, (0, 1, 2, 3, 4, 5, 6, 7))]


def test_a_fetch_issued_at_a_parked_forward_waits_for_its_park():
    """S = 3, M = 4: stage 0 runs F0 F1 F2 B0 F3 B1 B2 B3 and holds 3. Parking 0, 1 and 3
    on stage 2, the fetch of 1 (issued as F3 starts) goes on the link after F3's park:
    1 arrives only when 3 has left, so 2 are resident, never 3 (the runner keeps this
    order: tests/runtime/test_pipeline_run.py measures it)."""
    from autosched.runtime.pipeline.schedule import link_order

    order = one_f_one_b(0, 3, 4)
    assert link_order(order, {0: 2, 1: 2, 3: 2}) == {2: [
        ("park", 0), ("park", 1), ("fetch", 0), ("park", 3), ("fetch", 1), ("fetch", 3)]}
    costs = [StageCost(1.0, 2.0, 1.0), StageCost(1.0, 2.0, 0.0), StageCost(1.0, 2.0, 0.0)]
    sim = simulate(costs, 4, [Transfer(0, 2, (0, 1, 3), 1.0, 0.25)])
    assert sim.ops[0, "F", 3] == (9.0, 10.0)
    assert sim.parks[0, 3] == (10.0, 10.25) and sim.fetches[0, 1] == (10.25, 10.5)
    assert sim.ops[0, "B", 1] == (10.5, 12.5) and sim.stages[0].exposed_transfer_s == 0.5
    assert sim.stages[0].peak_bytes == 2.0
    assert [(p.resident, p.micro_batches) for p in parking_options(3, 4, 0, 2)] == [
        (2, (0, 1, 3))]


# -- the partition search against brute force -------------------------------------------

def _synthetic(n_layers: int) -> ModelCosts:
    """Three actions per layer, backward = 2 x forward for every one (so a stage's fastest
    actions are also its fastest forward and backward), bytes varying by layer."""
    layers = []
    for k in range(n_layers):
        f = 0.25 * (1 + k % 3)
        layers.append(LayerCosts(f"l{k}", {
            "keep": Cost(f, 2 * f, 8 + 4 * (k % 2)),
            "memeff": Cost(f + 0.125, 2 * f + 0.25, 5 + k % 3),
            "recompute": Cost(2 * f, 4 * f, 1)}, in_bytes=64 * (k % 2)))
    return ModelCosts(tuple(layers), first=Cost(0.125, 0.25, 2), last=Cost(0.25, 0.5, 3))


def _brute_force(model: ModelCosts, S: int, M: int, budget: float, link: Link):
    """(step, boundaries, actions) minimising the simulated step over every boundary
    choice and every action of every layer, within budget; None if nothing fits."""
    L, best = len(model.layers), None
    for cut in itertools.combinations(range(1, L), S - 1):
        bounds = (0, *cut, L)
        for acts in itertools.product(*(sorted(layer.actions) for layer in model.layers)):
            costs = []
            for i in range(S):
                parts = [model.layers[k].actions[acts[k]]
                         for k in range(bounds[i], bounds[i + 1])]
                parts += ([model.first] if i == 0 else []) + ([model.last] if i == S - 1
                                                              else [])
                send = link.seconds(model.layers[bounds[i + 1]].in_bytes) if i < S - 1 \
                    else 0.0
                costs.append(StageCost(sum(p.forward_s for p in parts),
                                       sum(p.backward_s for p in parts),
                                       sum(p.bytes for p in parts), send))
            sim = simulate(costs, M)
            if all(s.peak_bytes <= budget for s in sim.stages) and (
                    best is None or sim.step_s < best[0]):
                best = (sim.step_s, bounds, acts)
    return best


@pytest.mark.parametrize("S,M,budget", [(2, 4, 40), (2, 4, 26), (3, 4, 30), (3, 4, 21),
                                        (3, 2, 18), (2, 3, 14)])
def test_partition_matches_brute_force(S, M, budget):
    model, link = _synthetic(5), Link(2.0 ** 8, 2.0 ** -6)
    oracle = _brute_force(model, S, M, budget, link)
    found = Search(model, S, M, budget, link).best()
    assert oracle is not None and found is not None
    assert found.step_s == oracle[0]
    assert all(s.peak_bytes <= budget for s in found.simulation.stages)


def test_the_dynamic_program_finds_the_exhaustive_optimum_on_a_regular_model():
    model, link = _synthetic(6), Link(2.0 ** 8, 2.0 ** -6)
    exhaustive = Search(model, 3, 4, 36, link).best()
    dp = Search(model, 3, 4, 36, link, exhaustive=0).best()
    assert dp.step_s == exhaustive.step_s == _brute_force(model, 3, 4, 36, link)[0]


# -- BPipe --------------------------------------------------------------------------------

def _four_layers(keep_bytes=10) -> ModelCosts:
    keep, recompute = Cost(1.0, 2.0, keep_bytes), Cost(1.0, 3.0, 2)
    return ModelCosts(tuple(LayerCosts(f"l{k}", {"keep": keep, "recompute": recompute})
                            for k in range(4)))


@pytest.mark.parametrize("budget", [29, 30, 35, 39, 40, 50])
def test_bpipe_is_chosen_exactly_where_only_it_keeps_everything(budget):
    """4 stages of one layer, 8 micro-batches, keep = 10 bytes a micro-batch. Without
    transfers stage 0 holds 4 (40 bytes), so below 40 it must recompute. Parking every
    other micro-batch balances stage 0 and stage 3 at 3 micro-batches each (30 bytes,
    stage 1 holds 3 anyway): from 30 to 39 only BPipe keeps every layer, and it is
    faster than recomputing. From 40 nothing needs moving, and no transfer is kept;
    below 30 BPipe cannot keep stage 0 either (parking more overfills stage 3)."""
    plan = plan_from_costs(_four_layers(), 4, 8, budget, FAST)
    acts = set(plan.actions.values())
    if 30 <= budget < 40:
        assert acts == {"keep"} and plan.predicted["step_s"] == 33.0
        assert [(t["from"], t["to"], t["micro_batches"], t["bytes"])
                for t in plan.transfers] == [(0, 3, [0, 2, 4, 6], 10)]
        assert [s["peak_saved_bytes"] for s in plan.predicted["stages"]] == [30, 30, 20, 30]
    else:
        assert plan.transfers == []
        assert acts == ({"keep"} if budget >= 40 else {"keep", "recompute"})
    assert all(s["peak_saved_bytes"] <= budget for s in plan.predicted["stages"])


def test_a_parking_stage_leaves_its_partner_room():
    """Stage 3's layer has nothing but keep (12 bytes). Parking two of stage 0's
    micro-batches there leaves room for 18: stage 0's keep (2 x 10) does not fit beside
    it, its memory-efficient form (2 x 8) does, and beats recomputing, which is what
    stage 0 must do without BPipe (4 micro-batches in 30 bytes)."""
    both = {"keep": Cost(1.0, 2.0, 10), "recompute": Cost(1.0, 3.0, 2)}
    model = ModelCosts((
        LayerCosts("l0", dict(both, memeff=Cost(1.0, 2.25, 8))),
        LayerCosts("l1", both), LayerCosts("l2", both),
        LayerCosts("l3", {"keep": Cost(1.0, 2.0, 12)})))
    plan = plan_from_costs(model, 4, 8, 30, FAST)
    assert plan.actions == {"l0": "memeff", "l1": "keep", "l2": "keep", "l3": "keep"}
    assert [(t["from"], t["to"], t["bytes"]) for t in plan.transfers] == [(0, 3, 8)]
    assert [s["peak_saved_bytes"] for s in plan.predicted["stages"]] == [24, 30, 20, 28]
    without = plan_from_costs(model, 4, 8, 30, FAST, bpipe=False)
    assert without.actions["l0"] == "recompute"
    assert plan.predicted["step_s"] < without.predicted["step_s"]


def test_bpipe_is_not_kept_when_its_transfers_cost_more_than_recomputing():
    slow = Link(bytes_per_s=1.0, latency_s=0.0)        # 10 s to move 10 bytes
    plan = plan_from_costs(_four_layers(), 4, 8, 30, slow)
    assert plan.transfers == [] and plan.actions["l0"] == "recompute"
    assert plan_from_costs(_four_layers(), 4, 8, 30, slow, bpipe=False).to_json() != ""


def test_a_budget_no_plan_meets_is_refused_with_the_least_that_works():
    with pytest.raises(UserError) as e:
        plan_from_costs(_four_layers(), 4, 8, 5, FAST)
    assert str(e.value) == (
        "memory budget 5 B per device cannot be met by any 4-stage plan of 8 "
        "micro-batches; the least that could work is 6 B (every layer at its "
        "least-memory action, BPipe balancing)")
    plan = plan_from_costs(_four_layers(), 4, 8, 6, FAST)      # and it does work
    assert set(plan.actions.values()) == {"recompute"} and plan.transfers
    with pytest.raises(UserError, match="least that could work is 8 B"):
        plan_from_costs(_four_layers(), 4, 8, 7, FAST, bpipe=False)
    with pytest.raises(UserError, match="1F1B needs at least as many micro-batches as"):
        plan_from_costs(_four_layers(), 4, 3, 100, FAST)
    with pytest.raises(UserError, match="5 stages for 4 layers"):
        plan_from_costs(_four_layers(), 5, 8, 100, FAST)


# -- the document ------------------------------------------------------------------------

def test_document_round_trips_and_refuses_other_versions():
    plan = plan_from_costs(_four_layers(), 4, 8, 35, FAST)
    again = PipelinePlan.from_json(plan.to_json())
    assert again == plan and again.stage_layers(2) == ["l2"]
    data = json.loads(plan.to_json())
    assert {"format", "version", "stages", "micro_batches", "schedule", "layers",
            "boundaries", "actions", "transfers", "budget_bytes", "predicted"} <= set(data)
    assert data["format"] == "autosched-pipeline-plan" and data["schedule"] == "1F1B"
    assert "transfer    stage 0 -> 3: micro-batches 0,2,4,6" in plan.table()
    with pytest.raises(UserError, match="version 3 is not supported"):
        PipelinePlan.from_json(json.dumps(dict(data, version=3)))
    with pytest.raises(UserError, match="schedule '1F1B' with 1 virtual stages at version 2"):
        PipelinePlan.from_json(json.dumps(dict(data, version=2)))
    with pytest.raises(UserError, match="do not split 4 layers into 4 non-empty stages"):
        PipelinePlan.from_json(json.dumps(dict(data, boundaries=[0, 1, 1, 3, 4])))


@pytest.mark.parametrize("text, message", [
    ("{", "not a pipeline plan: invalid JSON (Expecting property name enclosed in double "
          "quotes: line 1 column 2 (char 1))"),
    ("[]", "not an autosched pipeline plan (missing format 'autosched-pipeline-plan')"),
    ('{"format": "autosched.plan", "version": 1}',
     "not an autosched pipeline plan (missing format 'autosched-pipeline-plan')"),
    ('{"format": "autosched-pipeline-plan", "version": 7}',
     "pipeline plan version 7 is not supported (this autosched reads versions 1 and 2)")])
def test_the_document_and_the_runner_refuse_other_documents_with_the_same_line(text, message):
    """One check of format and version (runtime/document.py's, which plans use too) for
    the document and for the runner's reading of it."""
    from autosched.runtime.pipeline.launch import read_plan

    with pytest.raises(UserError) as e:
        PipelinePlan.from_json(text)
    assert str(e.value) == message
    if text != "{":
        with pytest.raises(UserError) as e:
            read_plan(json.loads(text))
        assert str(e.value) == message


# -- the command line ----------------------------------------------------------------------

TINY = """
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return x + torch.tanh(self.fc(x))

def make_model():
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block(), Block())

def make_inputs():
    return torch.randn(4, 8)
"""


def _parse(*argv):
    parser = argparse.ArgumentParser(prog="autosched")
    cli_plan.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["plan", *argv])


def test_cli_writes_a_pipeline_plan_covering_every_layer_once(tmp_path, capsys,
                                                              monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    model = tmp_path / "tiny.py"
    model.write_text(textwrap.dedent(TINY))
    out = tmp_path / "plan.json"
    args = _parse(str(model), "--stages", "2", "--micro-batches", "3", "--memory-budget",
                  "1MiB", "--repeats", "1", "-o", str(out))
    assert cli_plan.run(args) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert {"format", "version", "stages", "micro_batches", "schedule", "layers",
            "boundaries", "actions", "transfers", "budget_bytes", "predicted"} <= set(data)
    assert data["layers"] == ["0", "1", "2"] and data["budget_bytes"] == 1 << 20
    b = data["boundaries"]
    covered = [name for s in range(2) for name in data["layers"][b[s]:b[s + 1]]]
    assert covered == data["layers"] and set(data["actions"]) == set(data["layers"])
    assert [s["held_micro_batches"] for s in data["predicted"]["stages"]] == [2, 1]
    assert data["search"]["bpipe"] is True
    args = _parse(str(model), "--stages", "2", "--micro-batches", "3", "--memory-budget",
                  "1MiB", "--repeats", "1", "--no-bpipe", "-o", str(out))
    assert cli_plan.run(args) == 0
    data = json.loads(out.read_text())
    assert data["search"]["bpipe"] is False and data["transfers"] == []
    args = _parse(str(model), "--stages", "2", "--micro-batches", "3", "--memory-budget",
                  "1MiB", "--repeats", "1", "--no-interleave", "-o", str(out))
    assert cli_plan.run(args) == 0
    data = json.loads(out.read_text())
    assert data["schedule"] == "1F1B" and data["version"] == 1
    with pytest.raises(UserError, match="--stages needs --micro-batches"):
        cli_plan.run(_parse(str(model), "--stages", "2", "--memory-budget", "1MiB"))
    with pytest.raises(UserError, match="split into 4 micro-batches, not 5"):
        cli_plan.run(_parse(str(model), "--stages", "2", "--micro-batches", "5",
                            "--memory-budget", "1MiB"))


def test_least_budget_by_dynamic_program_equals_the_exhaustive_one_without_parking():
    from autosched.runtime.pipeline.partition import least_budget

    model = _synthetic(6)
    exhaustive = least_budget(Search(model, 3, 8, 1, FAST), {})
    assert least_budget(Search(model, 3, 8, 1, FAST, exhaustive=0), {}) == exhaustive
    assert exhaustive == min(
        max(min(3 - i, 8) * sum(min(c.bytes for c in layer.actions.values())
                                for layer in model.layers[b[i]:b[i + 1]])
            + min(3 - i, 8) * ((2 if i == 0 else 0) + (3 if i == 2 else 0))
            for i in range(3))
        for b in [(0, *cut, 6) for cut in itertools.combinations(range(1, 6), 2)])
